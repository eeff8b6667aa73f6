// What a replay gives people and scripts: JSON, a timeline CSV, an SVG plot
// and a summary table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "oobleck/sim/replay.h"

namespace oobleck::sim {
namespace {

// Shortest text that reads back to the same double, as JSON writes it.
std::string number(double x) { return nlohmann::json(x).dump(); }

std::string fixed(double x, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, x);
  return buffer;
}

}  // namespace

std::string replay_to_json(const ReplayResult& result) {
  using nlohmann::ordered_json;
  ordered_json out;
  out["format"] = "oobleck.replay.v1";
  out["duration_s"] = result.duration_ms / 1000.0;
  out["samples_per_iteration"] = result.samples_per_iteration;
  ordered_json policies = ordered_json::object();
  for (const auto& p : result.policies) {
    ordered_json entry;
    entry["runnable"] = p.runnable;
    entry["reason"] = p.reason;
    entry["samples"] = p.samples;
    entry["samples_per_s"] = p.samples_per_s;
    entry["goodput"] = p.goodput;
    entry["time_s"] = {{"training", p.time.training_ms / 1000.0},
                       {"reconfiguration", p.time.reconfiguration_ms / 1000.0},
                       {"restart", p.time.restart_ms / 1000.0},
                       {"checkpoint", p.time.checkpoint_ms / 1000.0},
                       {"lost_work", p.time.lost_work_ms / 1000.0},
                       {"waiting", p.time.waiting_ms / 1000.0}};
    entry["failures"] = p.failures;
    entry["reconfigurations"] = p.reconfigurations;
    entry["restarts"] = p.restarts;
    entry["unrecoverable"] = p.unrecoverable;
    entry["checkpoint_interval_iterations"] = p.checkpoint_interval_iterations;
    entry["checkpoint_save_s"] = p.checkpoint_save_ms / 1000.0;
    if (p.policy == Policy::oobleck || p.policy == Policy::oobleck_snapshots) {
      entry["kept_microbatches"] = p.kept_microbatches;
    }
    if (p.policy == Policy::oobleck_snapshots) {
      entry["snapshot_every_iterations"] = p.snapshot_every_iterations;
      entry["mirror_every_iterations"] = p.mirror_every_iterations;
      // Where each rollback past f (unrecoverable) took its state from.
      entry["rollbacks"] = {{"memory", p.rollbacks_from_memory},
                            {"mirror", p.rollbacks_from_mirror},
                            {"checkpoint", p.rollbacks_from_checkpoint}};
    }
    policies[result_name(p)] = std::move(entry);
  }
  out["policies"] = std::move(policies);
  return out.dump(2) + "\n";
}

std::string timeline_csv(const ReplayResult& result) {
  std::string out = "policy,time_s,nodes,pipelines,samples_per_s\n";
  for (const auto& p : result.policies) {
    for (const auto& point : p.timeline) {
      out += result_name(p) + "," + number(point.time_ms / 1000.0) + "," +
             std::to_string(point.nodes) + "," + std::to_string(point.pipelines) + "," + number(point.samples_per_s) +
             "\n";
    }
  }
  return out;
}

std::string summary_table(const ReplayResult& result) {
  // The policy column fits the longest name (10 wide when all are short).
  int width = 10;
  for (const auto& p : result.policies) width = std::max(width, static_cast<int>(result_name(p).size()));
  std::ostringstream out;
  out << std::string("policy") + std::string(static_cast<std::size_t>(width) - 4, ' ')
      << "samples/s  goodput  training  reconfig  restart  checkpoint  lost work  waiting   failures  "
         "reconfigs  restarts  unrecoverable\n";
  auto hours = [](Milliseconds ms) { return fixed(ms / 3.6e6, 2) + "h"; };
  std::string notes;
  for (const auto& p : result.policies) {
    char line[512];
    const std::string name = result_name(p);
    if (!p.runnable) {
      std::snprintf(line, sizeof line, "%-*s  cannot run: %s\n", width, name.c_str(), p.reason.c_str());
      out << line;
      continue;
    }
    std::snprintf(line, sizeof line, "%-*s  %9.2f  %6.1f%%  %8s  %8s  %7s  %10s  %9s  %7s  %8d  %9d  %8d  %13d\n",
                  width, name.c_str(), p.samples_per_s, 100 * p.goodput, hours(p.time.training_ms).c_str(),
                  hours(p.time.reconfiguration_ms).c_str(), hours(p.time.restart_ms).c_str(),
                  hours(p.time.checkpoint_ms).c_str(), hours(p.time.lost_work_ms).c_str(),
                  hours(p.time.waiting_ms).c_str(), p.failures, p.reconfigurations, p.restarts, p.unrecoverable);
    out << line;
    if (p.policy == Policy::oobleck_snapshots) {
      std::snprintf(line, sizeof line,
                    "%s: snapshots every %d iterations, mirrored every %d; rollbacks past f to memory %d, to "
                    "mirrors %d, to the checkpoint %d\n",
                    name.c_str(), p.snapshot_every_iterations, p.mirror_every_iterations, p.rollbacks_from_memory,
                    p.rollbacks_from_mirror, p.rollbacks_from_checkpoint);
      notes += line;
    }
  }
  out << notes;
  return out.str();
}

namespace {

// Samples/s averaged over `bins` equal spans of the trace: the timeline's
// step function integrated per span, so short outages show as dips instead
// of a comb of spikes.
std::vector<double> binned_rate(const std::vector<TimelinePoint>& points, Milliseconds duration_ms, int bins) {
  std::vector<double> out(bins, 0.0);
  const double width = duration_ms / bins;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double from = points[i].time_ms;
    const double to = i + 1 < points.size() ? points[i + 1].time_ms : duration_ms;
    if (to <= from || points[i].samples_per_s == 0) continue;
    int b = std::clamp(static_cast<int>(from / width), 0, bins - 1);
    for (; b < bins && b * width < to; ++b) {
      const double overlap = std::min(to, (b + 1) * width) - std::max(from, b * width);
      if (overlap > 0) out[b] += points[i].samples_per_s * overlap / width;
    }
  }
  return out;
}

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// 1, 2 or 5 times a power of ten, at least x.
double nice_ceiling(double x) {
  if (x <= 0) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (x <= m * p * (1 + 1e-12)) return m * p;
  }
  return 10 * p;
}

// The plot's geometry (two panels: samples/s above, nodes below) and the
// scales that map time, rate and node count onto it.
struct SvgFrame {
  double width = 960, left = 70, right = 30, top = 40;
  double rate_h = 330, gap = 50, nodes_h = 110, bottom = 45;
  double height = top + rate_h + gap + nodes_h + bottom;
  double plot_w = width - left - right;
  double nodes_top_y = top + rate_h + gap;
  int bins = 120;
  double duration_ms = 1;
  double hours = 0;
  double rate_top = 1;   // samples/s at the top of the upper panel
  double nodes_top = 1;  // nodes at the top of the lower panel
  [[nodiscard]] double x_of(Milliseconds ms) const { return left + plot_w * ms / duration_ms; }
  [[nodiscard]] double y_rate(double r) const { return top + rate_h * (1 - r / rate_top); }
  [[nodiscard]] double y_nodes(double n) const { return nodes_top_y + nodes_h * (1 - n / nodes_top); }
};

// The frame for `result`, and each policy's binned samples/s in `rates`.
SvgFrame frame_of(const ReplayResult& result, std::vector<std::vector<double>>& rates) {
  SvgFrame f;
  f.duration_ms = std::max(result.duration_ms, 1e-9);
  f.hours = f.duration_ms / 3.6e6;
  double max_rate = 0;
  int max_nodes = 0;
  for (const auto& p : result.policies) {
    rates.push_back(binned_rate(p.timeline, f.duration_ms, f.bins));
    for (double r : rates.back()) max_rate = std::max(max_rate, r);
    for (const auto& point : p.timeline) max_nodes = std::max(max_nodes, point.nodes);
  }
  f.rate_top = nice_ceiling(max_rate * 1.25);  // room for the legend
  f.nodes_top = nice_ceiling(max_nodes * 1.05);
  return f;
}

// A panel's grid lines, value labels, border and axis label.
void svg_panel(std::ostream& svg, const SvgFrame& f, double y0, double h, double top_value, const char* label,
               int ticks) {
  for (int i = 0; i <= ticks; ++i) {
    const double y = y0 + h * i / ticks;
    svg << "<line x1=\"" << f.left << "\" y1=\"" << y << "\" x2=\"" << f.left + f.plot_w << "\" y2=\"" << y
        << "\" stroke=\"#e4e4e4\"/>\n";
    const double v = top_value * (ticks - i) / ticks;
    svg << "<text x=\"" << f.left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << fixed(v, v == std::floor(v) ? 0 : 1) << "</text>\n";
  }
  svg << "<rect x=\"" << f.left << "\" y=\"" << y0 << "\" width=\"" << f.plot_w << "\" height=\"" << h
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg << "<text transform=\"translate(18," << y0 + h / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << label
      << "</text>\n";
}

// Both panels and the time axis, with hour ticks at a round step.
void svg_axes(std::ostream& svg, const SvgFrame& f) {
  svg_panel(svg, f, f.top, f.rate_h, f.rate_top, "samples/s", 5);
  svg_panel(svg, f, f.nodes_top_y, f.nodes_h, f.nodes_top, "nodes", 2);
  const double step_h = nice_ceiling(f.hours / 8);
  for (double h = 0; h <= f.hours * (1 + 1e-9); h += step_h) {
    const double x = f.x_of(h * 3.6e6);
    svg << "<text x=\"" << x << "\" y=\"" << f.nodes_top_y + f.nodes_h + 16 << "\" text-anchor=\"middle\">"
        << fixed(h, step_h >= 1 ? 0 : 1) << "</text>\n";
    svg << "<line x1=\"" << x << "\" y1=\"" << f.top << "\" x2=\"" << x << "\" y2=\"" << f.top + f.rate_h
        << "\" stroke=\"#f0f0f0\"/>\n";
  }
  svg << "<text x=\"" << f.left + f.plot_w / 2 << "\" y=\"" << f.height - 10
      << "\" text-anchor=\"middle\">time (hours)</text>\n";
}

// Nodes in the cluster: the same for every policy, so drawn once.
void svg_nodes(std::ostream& svg, const SvgFrame& f, const std::vector<TimelinePoint>& points) {
  std::ostringstream d;
  for (std::size_t i = 0; i < points.size(); ++i) {
    d << (i == 0 ? "M" : " H") << fixed(f.x_of(points[i].time_ms), 1) << (i == 0 ? "," : " V")
      << fixed(f.y_nodes(points[i].nodes), 1);
  }
  if (!points.empty()) d << " H" << fixed(f.x_of(f.duration_ms), 1);
  svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.3\"/>\n";
}

// One policy's throughput line (when it can run) and its legend entry, the
// `index`-th from the top.
void svg_policy(std::ostream& svg, const SvgFrame& f, const PolicyResult& p, const std::vector<double>& rates,
                std::size_t index) {
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  const char* colour = colours[index % 5];
  if (p.runnable) {
    std::ostringstream d;
    for (int b = 0; b < f.bins; ++b) {
      d << (b == 0 ? "M" : " L") << fixed(f.x_of((b + 0.5) * f.duration_ms / f.bins), 1) << ","
        << fixed(f.y_rate(rates[b]), 1);
    }
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.8\"/>\n";
  }
  const double ly = f.top + 18 + 16 * static_cast<double>(index);
  svg << "<line x1=\"" << f.left + 10 << "\" y1=\"" << ly - 4 << "\" x2=\"" << f.left + 30 << "\" y2=\"" << ly - 4
      << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
  svg << "<text x=\"" << f.left + 36 << "\" y=\"" << ly << "\">" << result_name(p);
  if (p.runnable) {
    svg << ": " << fixed(p.samples_per_s, p.samples_per_s >= 100 ? 0 : 2) << " samples/s on average, goodput "
        << fixed(100 * p.goodput, 1) << "%";
  } else {
    svg << ": cannot run (" << escape_xml(p.reason.substr(0, 80)) << ")";
  }
  svg << "</text>\n";
}

}  // namespace

std::string timeline_svg(const ReplayResult& result, const std::string& title) {
  std::vector<std::vector<double>> rates;
  const SvgFrame f = frame_of(result, rates);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f.width << "\" height=\"" << f.height
      << "\" viewBox=\"0 0 " << f.width << " " << f.height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << f.width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape_xml(title)
      << "</text>\n";
  svg_axes(svg, f);
  if (!result.policies.empty()) svg_nodes(svg, f, result.policies.front().timeline);
  for (std::size_t i = 0; i < result.policies.size(); ++i) svg_policy(svg, f, result.policies[i], rates[i], i);
  const double span_minutes = f.hours * 60 / f.bins;
  svg << "<text x=\"" << f.left + f.plot_w - 6 << "\" y=\"" << f.top + 16
      << "\" text-anchor=\"end\" fill=\"#666\">throughput averaged over "
      << fixed(span_minutes, span_minutes >= 10 ? 0 : 1) << "-minute spans</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

std::string decisions_jsonl(const ReplayResult& result) {
  // One policy's: generation numbers are per policy (with stragglers, the
  // run that mitigates them, whose decisions include theirs).
  const PolicyResult* chosen = nullptr;
  for (Policy wanted : {Policy::oobleck, Policy::oobleck_snapshots}) {
    for (const auto& p : result.policies) {
      if (p.policy != wanted || p.decisions.empty()) continue;
      if (!chosen || (chosen->policy == wanted && p.stragglers == StragglerHandling::mitigate)) chosen = &p;
    }
    if (chosen) break;
  }
  std::string out;
  if (chosen) {
    for (const auto& line : chosen->decisions) out.append(line).append("\n");
  }
  return out;
}

}  // namespace oobleck::sim
