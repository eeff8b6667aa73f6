// Sweeps over f and the checkpoint interval: the lists from the command
// line, the runs, the recommendation, and the result as JSON and as a table.
#include "oobleck/sim/sweep.h"

#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <stdexcept>

#include "experiment_internal.h"

namespace oobleck::sim {

namespace {

// Comma-separated non-negative integers; "auto" (nullopt) too when allowed.
std::vector<std::optional<int>> parse_int_list(const std::string& text, const std::string& flag, bool allow_auto) {
  std::vector<std::optional<int>> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (allow_auto && item == "auto") {
      out.emplace_back(std::nullopt);
      continue;
    }
    try {
      std::size_t used = 0;
      const long value = std::stol(item, &used);
      if (used != item.size() || value < 0 || value > 1'000'000) throw std::invalid_argument(item);
      out.emplace_back(static_cast<int>(value));
    } catch (const std::exception&) {
      throw InputError(flag + ": expected a comma-separated list of non-negative integers" +
                       (allow_auto ? std::string(" or auto") : "") + ", got \"" + item + "\"");
    }
  }
  if (out.empty()) throw InputError(flag + ": empty list");
  return out;
}

// A replay of one policy with one f or one checkpoint interval.
struct Point {
  Policy policy = Policy::oobleck;
  int fault_tolerance = 0;
  std::optional<int> checkpoint_interval_iterations;  // nullopt: Young/Daly
};

std::vector<Point> points_of(const SweepOptions& options) {
  std::vector<Point> points;
  for (int f : options.fault_tolerances) points.push_back({Policy::oobleck, f, std::nullopt});
  // Checkpoint-restart needs no replicas: f = 0.
  for (const auto& k : options.checkpoint_intervals) points.push_back({Policy::checkpoint, 0, k});
  return points;
}

PolicyResult replay_point(const Profile& profile, const Trace& trace, const Point& point, int global_microbatches,
                          Scenario scenario) {
  ReplayOptions options;
  options.fault_tolerance = point.fault_tolerance;
  options.global_microbatches = global_microbatches;
  options.policies = {point.policy};
  options.parallel = false;  // the runs already use every core
  if (point.checkpoint_interval_iterations) {
    scenario.overrides.checkpoint_interval_iterations = point.checkpoint_interval_iterations;
    for (auto& [policy, own] : scenario.policy_overrides) own.checkpoint_interval_iterations.reset();
  }
  return replay(profile, trace, options, scenario).policies.front();
}

// Medians over one point's runs.
SweepRow row_of(const Point& point, std::span<const PolicyResult> runs) {
  std::vector<double> rates, goodputs;
  SweepRow row;
  for (const PolicyResult& run : runs) {
    rates.push_back(run.samples_per_s);
    goodputs.push_back(run.goodput);
    row.checkpoint_interval_iterations = run.checkpoint_interval_iterations;
  }
  row.policy = point.policy;
  row.fault_tolerance = point.fault_tolerance;
  row.requested_checkpoint_interval_iterations = point.checkpoint_interval_iterations;
  row.samples_per_s = percentile(rates, 0.5);
  row.goodput = percentile(goodputs, 0.5);
  return row;
}

void recommend(SweepResult& result) {
  double best_oobleck = -1, best_checkpoint = -1;
  for (const SweepRow& row : result.rows) {
    if (row.policy == Policy::oobleck && row.samples_per_s > best_oobleck) {
      best_oobleck = row.samples_per_s;
      result.recommended_fault_tolerance = row.fault_tolerance;
    }
    if (row.policy == Policy::checkpoint && row.samples_per_s > best_checkpoint) {
      best_checkpoint = row.samples_per_s;
      result.recommended_checkpoint_interval_iterations = row.checkpoint_interval_iterations;
    }
  }
}

}  // namespace

std::vector<int> parse_fault_tolerances(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  for (const auto& value : parse_int_list(text, flag, false)) out.push_back(*value);
  return out;
}

std::vector<std::optional<int>> parse_checkpoint_intervals(const std::string& text, const std::string& flag) {
  return parse_int_list(text, flag, true);
}

SweepResult sweep(const Profile& profile, const TraceSet& traces, const SweepOptions& options, const Scenario& scenario,
                  const ExperimentOptions& experiment) {
  const std::vector<Point> points = points_of(options);
  const int runs = traces.runs;
  const auto results = experiment_internal::run_jobs<PolicyResult>(
      static_cast<int>(points.size()) * runs,
      [&](int i) {
        const Point& point = points[static_cast<std::size_t>(i / runs)];
        return replay_point(profile, *traces.trace_for_run(i % runs), point, options.global_microbatches, scenario);
      },
      experiment, "sweep run");
  SweepResult result;
  result.seeds = runs;
  for (std::size_t p = 0; p < points.size(); ++p) {
    const auto first = results.begin() + static_cast<std::ptrdiff_t>(p) * runs;
    result.rows.push_back(row_of(points[p], std::span<const PolicyResult>(first, first + runs)));
  }
  recommend(result);
  return result;
}

std::string sweep_to_json(const SweepResult& result) {
  using nlohmann::ordered_json;
  ordered_json out;
  out["format"] = "oobleck.sweep.v1";
  out["seeds"] = result.seeds;
  ordered_json rows = ordered_json::array();
  for (const SweepRow& row : result.rows) {
    const auto& requested = row.requested_checkpoint_interval_iterations;
    rows.push_back({{"policy", std::string(policy_name(row.policy))},
                    {"fault_tolerance", row.fault_tolerance},
                    {"checkpoint_interval", requested ? ordered_json(*requested) : ordered_json("auto")},
                    {"checkpoint_interval_iterations", row.checkpoint_interval_iterations},
                    {"samples_per_s", row.samples_per_s},
                    {"goodput", row.goodput}});
  }
  out["runs"] = std::move(rows);
  out["recommended"] = {{"fault_tolerance", result.recommended_fault_tolerance},
                        {"checkpoint_interval_iterations", result.recommended_checkpoint_interval_iterations}};
  return out.dump(2) + "\n";
}

std::string sweep_summary_table(const SweepResult& result) {
  using experiment_internal::formatted;
  std::string out = formatted("%-10s  %3s  %-10s  %12s  %8s\n", "policy", "f", "interval", "samples/s", "goodput");
  for (const SweepRow& row : result.rows) {
    const std::string interval = std::to_string(row.checkpoint_interval_iterations) +
                                 (row.requested_checkpoint_interval_iterations ? "" : " (auto)");
    out += formatted("%-10s  %3d  %-10s  %12.2f  %7.1f%%\n", std::string(policy_name(row.policy)).c_str(),
                     row.fault_tolerance, interval.c_str(), row.samples_per_s, 100 * row.goodput);
  }
  out += formatted("Recommended: f = %d for oobleck; a checkpoint every %d iterations for checkpoint-restart\n",
                   result.recommended_fault_tolerance, result.recommended_checkpoint_interval_iterations);
  return out;
}

}  // namespace oobleck::sim
