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

std::string timeline_svg(const ReplayResult& result, const std::string& title) {
  const double width = 960, height = 560, left = 70, right = 70, top = 50, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const double duration_h = std::max(result.duration_ms / 3.6e6, 1e-9);
  double max_rate = 0;
  int max_nodes = 0;
  for (const auto& p : result.policies) {
    for (const auto& point : p.timeline) {
      max_rate = std::max(max_rate, point.samples_per_s);
      max_nodes = std::max(max_nodes, point.nodes);
    }
  }
  // Round the axes up to 1, 2 or 5 times a power of ten.
  auto nice = [](double x) {
    if (x <= 0) return 1.0;
    const double p = std::pow(10.0, std::floor(std::log10(x)));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (x <= m * p) return m * p;
    }
    return 10 * p;
  };
  const double rate_top = nice(max_rate * 1.05), nodes_top = nice(max_nodes * 1.05);
  auto x_of = [&](Milliseconds ms) { return left + plot_w * (ms / 3.6e6) / duration_h; };
  auto y_rate = [&](double r) { return top + plot_h * (1 - r / rate_top); };
  auto y_nodes = [&](double n) { return top + plot_h * (1 - n / nodes_top); };
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string escaped;
  for (char c : title) {
    if (c == '<') escaped += "&lt;";
    else if (c == '>') escaped += "&gt;";
    else if (c == '&') escaped += "&amp;";
    else escaped += c;
  }
  svg << "<text x=\"" << width / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << escaped << "</text>\n";
  // Grid and axes.
  for (int i = 0; i <= 5; ++i) {
    const double y = top + plot_h * i / 5.0;
    svg << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + plot_w << "\" y2=\"" << y
        << "\" stroke=\"#ddd\"/>\n";
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << fixed(rate_top * (5 - i) / 5.0, rate_top >= 10 ? 0 : 2) << "</text>\n";
    svg << "<text x=\"" << left + plot_w + 6 << "\" y=\"" << y + 4 << "\">"
        << fixed(nodes_top * (5 - i) / 5.0, 0) << "</text>\n";
  }
  for (int i = 0; i <= 6; ++i) {
    const double x = left + plot_w * i / 6.0;
    svg << "<text x=\"" << x << "\" y=\"" << top + plot_h + 18 << "\" text-anchor=\"middle\">"
        << fixed(duration_h * i / 6.0, duration_h >= 12 ? 0 : 1) << "</text>\n";
  }
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 18 << "\" text-anchor=\"middle\">time (hours)</text>\n";
  svg << "<text transform=\"translate(18," << top + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">samples/s</text>\n";
  svg << "<text transform=\"translate(" << width - 14 << "," << top + plot_h / 2
      << ") rotate(90)\" text-anchor=\"middle\">nodes in the cluster (grey)</text>\n";

  auto step_path = [&](const std::vector<TimelinePoint>& points, auto y_of) {
    std::ostringstream d;
    double last_y = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const double x = x_of(points[i].time_ms);
      const double y = y_of(points[i]);
      if (i == 0) {
        d << "M" << fixed(x, 1) << "," << fixed(y, 1);
      } else {
        d << " H" << fixed(x, 1) << " V" << fixed(y, 1);
      }
      last_y = y;
    }
    if (!points.empty()) d << " H" << fixed(x_of(result.duration_ms), 1);
    (void)last_y;
    return d.str();
  };
  // Node count (the same for every policy): from the first policy.
  if (!result.policies.empty()) {
    svg << "<path d=\"" << step_path(result.policies.front().timeline, [&](const TimelinePoint& p) { return y_nodes(p.nodes); })
        << "\" fill=\"none\" stroke=\"#999\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n";
  }
  int legend = 0;
  for (std::size_t i = 0; i < result.policies.size(); ++i) {
    const auto& p = result.policies[i];
    const char* colour = colours[i % 4];
    if (p.runnable) {
      svg << "<path d=\"" << step_path(p.timeline, [&](const TimelinePoint& t) { return y_rate(t.samples_per_s); })
          << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.6\" opacity=\"0.85\"/>\n";
    }
    const double ly = top + 16 + 16 * legend++;
    svg << "<line x1=\"" << left + 10 << "\" y1=\"" << ly - 4 << "\" x2=\"" << left + 30 << "\" y2=\"" << ly - 4
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    svg << "<text x=\"" << left + 36 << "\" y=\"" << ly << "\">" << policy_name(p.policy);
    if (p.runnable) {
      svg << ": " << fixed(p.samples_per_s, 2) << " samples/s on average, goodput " << fixed(100 * p.goodput, 1) << "%";
    } else {
      svg << ": cannot run";
    }
    svg << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace oobleck::sim
