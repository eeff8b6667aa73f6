// What the experiments over many replays (Monte Carlo over seeds, sweeps)
// share: the traces they replay, how their runs use the cores, and the
// percentiles they summarize with.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "oobleck/common.h"
#include "oobleck/sim/trace.h"
#include "oobleck/sim/trace_generator.h"

namespace oobleck::sim {

// The traces an experiment replays, one per run: `given` in every run when
// set (shared, not copied: a trace may hold 10,000,000 events), otherwise the
// trace `spec` makes with seed spec.seed + run.
struct TraceSet {
  std::shared_ptr<const Trace> given;
  TraceSpec spec;
  int runs = 1;
  int default_gpus_per_node = 8;  // for generate_trace
  // Throws what generate_trace throws.
  [[nodiscard]] std::shared_ptr<const Trace> trace_for_run(int run) const;
};

struct ExperimentOptions {
  // Runs are independent and replayed on this many threads (0: one per
  // core). Results do not depend on it.
  int threads = 0;
  // After each run, "WHAT K/N done"; called from one thread at a time.
  Progress progress;
};

// The q-quantile (q in [0, 1]) by linear interpolation between the closest
// ranks: q = 0.5 of {1, 2, 3, 10} is 2.5. 0 for no values.
[[nodiscard]] double percentile(std::vector<double> values, double q);

}  // namespace oobleck::sim
