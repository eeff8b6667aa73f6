// Sweeps: oobleck replayed for several fault tolerances f and
// checkpoint-restart for several checkpoint intervals, on the same traces,
// with the best of each recommended.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/experiment.h"
#include "oobleck/sim/replay.h"

namespace oobleck::sim {

// "0,1,2,3": values of f. Each a non-negative integer up to 1,000,000;
// otherwise, or for an empty list, InputError naming `flag`.
[[nodiscard]] std::vector<int> parse_fault_tolerances(const std::string& text, const std::string& flag);
// "auto,10,50": checkpoint intervals in iterations, as above; "auto"
// (nullopt) is the Young/Daly interval.
[[nodiscard]] std::vector<std::optional<int>> parse_checkpoint_intervals(const std::string& text,
                                                                         const std::string& flag);

struct SweepOptions {
  std::vector<int> fault_tolerances;                     // one oobleck point each
  std::vector<std::optional<int>> checkpoint_intervals;  // one checkpoint point each; nullopt: Young/Daly
  int global_microbatches = 1;
};

// One point of the sweep, as medians over the runs.
struct SweepRow {
  Policy policy = Policy::oobleck;
  int fault_tolerance = 0;                                      // 0 for checkpoint-restart, which needs no replicas
  std::optional<int> requested_checkpoint_interval_iterations;  // nullopt: auto
  int checkpoint_interval_iterations = 0;                       // what the last run used
  double samples_per_s = 0;
  double goodput = 0;
  friend bool operator==(const SweepRow&, const SweepRow&) = default;
};

struct SweepResult {
  int seeds = 1;               // runs per point
  std::vector<SweepRow> rows;  // oobleck points in the order given, then checkpoint points
  // The oobleck row with the most samples/s (the first of equals); -1: none.
  int recommended_fault_tolerance = -1;
  // The interval used by the checkpoint row with the most samples/s; -1: none.
  int recommended_checkpoint_interval_iterations = -1;
  friend bool operator==(const SweepResult&, const SweepResult&) = default;
};

// Replays every point on every trace of `traces`, one policy per replay.
// The same inputs give the same result whatever the thread count. Throws
// what replay and generate_trace throw.
[[nodiscard]] SweepResult sweep(const Profile& profile, const TraceSet& traces, const SweepOptions& options,
                                const Scenario& scenario, const ExperimentOptions& experiment = {});

// The `oobleck.sweep.v1` JSON document.
[[nodiscard]] std::string sweep_to_json(const SweepResult& result);
// The human summary: one line per point, then the recommendation.
[[nodiscard]] std::string sweep_summary_table(const SweepResult& result);

}  // namespace oobleck::sim
