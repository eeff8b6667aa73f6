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
    policies[std::string(policy_name(p.policy))] = std::move(entry);
  }
  out["policies"] = std::move(policies);
  return out.dump(2) + "\n";
}

std::string timeline_csv(const ReplayResult& result) {
  std::string out = "policy,time_s,nodes,pipelines,samples_per_s\n";
  for (const auto& p : result.policies) {
    for (const auto& point : p.timeline) {
      out += std::string(policy_name(p.policy)) + "," + number(point.time_ms / 1000.0) + "," +
             std::to_string(point.nodes) + "," + std::to_string(point.pipelines) + "," + number(point.samples_per_s) +
             "\n";
    }
  }
  return out;
}

std::string summary_table(const ReplayResult& result) {
  std::ostringstream out;
  out << "policy      samples/s  goodput  training  reconfig  restart  checkpoint  lost work  waiting   failures  "
         "reconfigs  restarts  unrecoverable\n";
  auto hours = [](Milliseconds ms) { return fixed(ms / 3.6e6, 2) + "h"; };
  for (const auto& p : result.policies) {
    char line[512];
    if (!p.runnable) {
      std::snprintf(line, sizeof line, "%-10s  cannot run: %s\n", std::string(policy_name(p.policy)).c_str(),
                    p.reason.c_str());
      out << line;
      continue;
    }
    std::snprintf(line, sizeof line, "%-10s  %9.2f  %6.1f%%  %8s  %8s  %7s  %10s  %9s  %7s  %8d  %9d  %8d  %13d\n",
                  std::string(policy_name(p.policy)).c_str(), p.samples_per_s, 100 * p.goodput,
                  hours(p.time.training_ms).c_str(), hours(p.time.reconfiguration_ms).c_str(),
                  hours(p.time.restart_ms).c_str(), hours(p.time.checkpoint_ms).c_str(),
                  hours(p.time.lost_work_ms).c_str(), hours(p.time.waiting_ms).c_str(), p.failures,
                  p.reconfigurations, p.restarts, p.unrecoverable);
    out << line;
  }
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

}  // namespace

std::string timeline_svg(const ReplayResult& result, const std::string& title) {
  const double width = 960, left = 70, right = 30, top = 40;
  const double rate_h = 330, gap = 50, nodes_h = 110, bottom = 45;
  const double height = top + rate_h + gap + nodes_h + bottom;
  const double plot_w = width - left - right;
  const double nodes_top_y = top + rate_h + gap;
  const int bins = 120;
  const double duration_ms = std::max(result.duration_ms, 1e-9);
  const double hours = duration_ms / 3.6e6;

  std::vector<std::vector<double>> rates;
  double max_rate = 0;
  int max_nodes = 0;
  for (const auto& p : result.policies) {
    rates.push_back(binned_rate(p.timeline, duration_ms, bins));
    for (double r : rates.back()) max_rate = std::max(max_rate, r);
    for (const auto& point : p.timeline) max_nodes = std::max(max_nodes, point.nodes);
  }
  const double rate_top = nice_ceiling(max_rate * 1.25);  // room for the legend
  const double nodes_top = nice_ceiling(max_nodes * 1.05);
  auto x_of = [&](Milliseconds ms) { return left + plot_w * ms / duration_ms; };
  auto y_rate = [&](double r) { return top + rate_h * (1 - r / rate_top); };
  auto y_nodes = [&](double n) { return nodes_top_y + nodes_h * (1 - n / nodes_top); };
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape_xml(title)
      << "</text>\n";
  auto panel = [&](double y0, double h, double top_value, const char* label, int ticks) {
    for (int i = 0; i <= ticks; ++i) {
      const double y = y0 + h * i / ticks;
      svg << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + plot_w << "\" y2=\"" << y
          << "\" stroke=\"#e4e4e4\"/>\n";
      const double v = top_value * (ticks - i) / ticks;
      svg << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
          << fixed(v, v == std::floor(v) ? 0 : 1) << "</text>\n";
    }
    svg << "<rect x=\"" << left << "\" y=\"" << y0 << "\" width=\"" << plot_w << "\" height=\"" << h
        << "\" fill=\"none\" stroke=\"#444\"/>\n";
    svg << "<text transform=\"translate(18," << y0 + h / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << label
        << "</text>\n";
  };
  panel(top, rate_h, rate_top, "samples/s", 5);
  panel(nodes_top_y, nodes_h, nodes_top, "nodes", 2);
  // Hour ticks at a round step.
  const double step_h = nice_ceiling(hours / 8);
  for (double h = 0; h <= hours * (1 + 1e-9); h += step_h) {
    const double x = x_of(h * 3.6e6);
    svg << "<text x=\"" << x << "\" y=\"" << nodes_top_y + nodes_h + 16 << "\" text-anchor=\"middle\">"
        << fixed(h, step_h >= 1 ? 0 : 1) << "</text>\n";
    svg << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << top + rate_h
        << "\" stroke=\"#f0f0f0\"/>\n";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 10
      << "\" text-anchor=\"middle\">time (hours)</text>\n";

  // Nodes in the cluster: the same for every policy.
  if (!result.policies.empty()) {
    std::ostringstream d;
    const auto& points = result.policies.front().timeline;
    for (std::size_t i = 0; i < points.size(); ++i) {
      d << (i == 0 ? "M" : " H") << fixed(x_of(points[i].time_ms), 1) << (i == 0 ? "," : " V")
        << fixed(y_nodes(points[i].nodes), 1);
    }
    if (!points.empty()) d << " H" << fixed(x_of(duration_ms), 1);
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.3\"/>\n";
  }
  for (std::size_t i = 0; i < result.policies.size(); ++i) {
    const auto& p = result.policies[i];
    const char* colour = colours[i % 4];
    if (p.runnable) {
      std::ostringstream d;
      for (int b = 0; b < bins; ++b) {
        d << (b == 0 ? "M" : " L") << fixed(x_of((b + 0.5) * duration_ms / bins), 1) << ","
          << fixed(y_rate(rates[i][b]), 1);
      }
      svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.8\"/>\n";
    }
    const double ly = top + 18 + 16 * static_cast<double>(i);
    svg << "<line x1=\"" << left + 10 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + 30 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    svg << "<text x=\"" << left + 36 << "\" y=\"" << ly << "\">" << policy_name(p.policy);
    if (p.runnable) {
      svg << ": " << fixed(p.samples_per_s, p.samples_per_s >= 100 ? 0 : 2) << " samples/s on average, goodput "
          << fixed(100 * p.goodput, 1) << "%";
    } else {
      svg << ": cannot run (" << escape_xml(p.reason.substr(0, 80)) << ")";
    }
    svg << "</text>\n";
  }
  svg << "<text x=\"" << left + plot_w - 6 << "\" y=\"" << top + 16
      << "\" text-anchor=\"end\" fill=\"#666\">throughput averaged over "
      << fixed(hours * 60 / bins, hours * 60 / bins >= 10 ? 0 : 1) << "-minute spans</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace oobleck::sim
