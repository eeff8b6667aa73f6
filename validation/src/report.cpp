// The validation's report for people and its JSON.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "oobleck/validation.h"

namespace oobleck::validation {
namespace {

std::string format(const char* pattern, auto... values) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, pattern, values...);
  return buffer;
}

std::string percent(double fraction) { return format("%.2f %%", fraction * 100); }

std::string summary_line(const char* what, const ErrorSummary& s) {
  if (s.rows == 0) return format("  %-12s no runs\n", what);
  return format("  %-12s %5d runs: mean %s, median %s, worst %s\n", what, s.rows, percent(s.mean).c_str(),
                percent(s.median).c_str(), percent(s.worst).c_str());
}

nlohmann::json summary_json(const ErrorSummary& s) {
  return {{"runs", s.rows}, {"mean_error", s.mean}, {"median_error", s.median}, {"worst_error", s.worst}};
}

}  // namespace

std::string validation_report(const ValidationResult& result, bool every_row) {
  const auto& hw = result.calibration.hardware;
  std::string out = format(
      "Hardware %s, calibrated on %d runs (mean error %s there): %.1f %% of the matrix peak, %.1f %% of the memory "
      "bandwidth, %.3f ms a layer pass, %.3f ms to launch a layer's kernels, %.3f ms a microbatch, %.4f ms a link's "
      "latency\n",
      hw.key.c_str(), result.calibration.rows, percent(result.calibration.mean_error).c_str(),
      hw.compute_efficiency * 100, hw.memory_efficiency * 100, hw.layer_overhead_ms, hw.layer_launch_ms,
      result.calibration.microbatch_overhead_ms, hw.latency_ms);
  for (const auto& d : result.datasets) {
    out += "\n" + d.dataset->name + " (" + std::to_string(d.rows.size()) + " runs";
    if (d.unsupported > 0) out += ", " + std::to_string(d.unsupported) + " not expressible yet";
    out += "):\n";
    out += summary_line("held out", d.held_out);
    out += summary_line("calibration", d.calibration);
    out += format("  bounds       mean %s, worst %s: %s\n", percent(d.dataset->max_mean_error).c_str(),
                  percent(d.dataset->max_worst_error).c_str(), d.within_bounds ? "within" : "EXCEEDED");
    // Groups of runs alike in their parallel degrees (every run on its own
    // line when asked, or when the dataset is small).
    const bool rows = every_row || d.rows.size() <= 32;
    if (rows) {
      out += format("  %4s  %-46s %12s %12s %9s\n", "run", "", "measured ms", "predicted ms", "error");
      for (const auto& r : d.rows) {
        if (!r.unsupported.empty()) {
          out += format("  %4d  %-46s %12.1f %12s  not expressible: %s\n", r.run->row, r.run->label.c_str(),
                        r.run->measured_ms, "-", r.unsupported.c_str());
        } else {
          out += format("  %4d  %-46s %12.1f %12.1f %+8.2f %%%s\n", r.run->row, r.run->label.c_str(),
                        r.run->measured_ms, r.predicted_ms, r.error * 100, r.calibration ? "  (calibration)" : "");
        }
      }
      continue;
    }
    std::map<std::tuple<int, int, int>, std::vector<double>> groups;
    std::map<std::tuple<int, int, int>, double> signed_sum;
    for (const auto& r : d.rows) {
      if (!r.unsupported.empty() || r.calibration) continue;
      const auto key = std::make_tuple(r.run->tensor, r.run->data, r.run->pipeline);
      groups[key].push_back(std::abs(r.error));
      signed_sum[key] += r.error;
    }
    out += format("  %-12s %5s %9s %9s %9s %9s\n", "t d p", "runs", "mean", "median", "worst", "bias");
    for (const auto& [key, errors] : groups) {
      const ErrorSummary s = summarise(errors);
      out += format("  %-12s %5d %9s %9s %9s %+8.2f %%\n",
                    format("%d %d %d", std::get<0>(key), std::get<1>(key), std::get<2>(key)).c_str(), s.rows,
                    percent(s.mean).c_str(), percent(s.median).c_str(), percent(s.worst).c_str(),
                    signed_sum[key] / static_cast<double>(errors.size()) * 100);
    }
  }
  return out;
}

std::string validation_to_json(const ValidationResult& result) {
  const auto& hw = result.calibration.hardware;
  nlohmann::json doc = {
      {"format", "oobleck.validation-result.v1"},
      {"within_bounds", result.within_bounds()},
      {"calibration",
       {{"hardware", hw.key},
        {"runs", result.calibration.rows},
        {"mean_error", result.calibration.mean_error},
        {"compute_efficiency", hw.compute_efficiency},
        {"memory_efficiency", hw.memory_efficiency},
        {"layer_overhead_ms", hw.layer_overhead_ms},
        {"layer_launch_ms", hw.layer_launch_ms},
        {"microbatch_overhead_ms", result.calibration.microbatch_overhead_ms},
        {"latency_ms", hw.latency_ms}}}};
  nlohmann::json datasets = nlohmann::json::array();
  for (const auto& d : result.datasets) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : d.rows) {
      nlohmann::json row = {{"row", r.run->row},
                            {"label", r.run->label},
                            {"measured_ms", r.run->measured_ms},
                            {"calibration", r.calibration}};
      if (r.unsupported.empty()) {
        row["predicted_ms"] = r.predicted_ms;
        row["error"] = r.error;
      } else {
        row["not_expressible"] = r.unsupported;
      }
      rows.push_back(std::move(row));
    }
    datasets.push_back({{"name", d.dataset->name},
                        {"file", d.dataset->file},
                        {"held_out", summary_json(d.held_out)},
                        {"calibration", summary_json(d.calibration)},
                        {"not_expressible", d.unsupported},
                        {"bounds", {{"mean_error", d.dataset->max_mean_error}, {"worst_error", d.dataset->max_worst_error}}},
                        {"within_bounds", d.within_bounds},
                        {"rows", std::move(rows)}});
  }
  doc["datasets"] = std::move(datasets);
  return doc.dump(1) + "\n";
}

}  // namespace oobleck::validation
