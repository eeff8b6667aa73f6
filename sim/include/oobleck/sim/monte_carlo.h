// Monte Carlo over generated traces: every policy replayed on many traces
// drawn from one generator with consecutive seeds, summarized per policy as
// median and 5th and 95th percentiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/experiment.h"
#include "oobleck/sim/replay.h"

namespace oobleck::sim {

struct Spread {
  double median = 0;
  double p5 = 0;
  double p95 = 0;
  friend bool operator==(const Spread&, const Spread&) = default;
};

struct PolicySpread {
  Policy policy = Policy::oobleck;
  bool runnable = true;  // in the first run
  Spread samples_per_s;
  Spread goodput;
  Spread failures;
  Spread unrecoverable;
  Spread lost_work_s;
  friend bool operator==(const PolicySpread&, const PolicySpread&) = default;
};

struct SeedsSummary {
  std::size_t seeds = 0;  // runs summarized
  std::uint64_t first_seed = 1;
  std::vector<PolicySpread> policies;  // in the runs' order
  friend bool operator==(const SeedsSummary&, const SeedsSummary&) = default;
};

// The statistics of finished runs. Every run holds the same policies in the
// same order (as replay gives them for one ReplayOptions); `runs` is not
// empty (std::invalid_argument otherwise).
[[nodiscard]] SeedsSummary summarize_seeds(const std::vector<ReplayResult>& runs, std::uint64_t first_seed);

// Replays every trace of `traces` with `options` (each replay's policies one
// after another: the runs already share the cores) and summarizes them, with
// first_seed = traces.spec.seed. The same inputs give the same summary
// whatever the thread count. Throws what replay and generate_trace throw.
[[nodiscard]] SeedsSummary replay_seeds(const Profile& profile, const TraceSet& traces, const ReplayOptions& options,
                                        const Scenario& scenario, const ExperimentOptions& experiment = {});

// The `oobleck.replay-seeds.v1` JSON document.
[[nodiscard]] std::string seeds_to_json(const SeedsSummary& summary);
// The human summary: samples/s and goodput per policy, median [p5, p95].
[[nodiscard]] std::string seeds_summary_table(const SeedsSummary& summary);

}  // namespace oobleck::sim
