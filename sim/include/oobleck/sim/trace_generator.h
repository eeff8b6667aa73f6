// Generated traces as the command line describes them: which generator,
// its parameters (durations as text such as "6h") and a seed, turned into a
// trace by the generators of trace.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oobleck/sim/trace.h"

namespace oobleck::sim {

// The parameters of one generator. Each field comes from the flag named
// beside it, and errors about it name that flag. Durations are text such as
// "90m" (parse_duration), so a bad one is reported with its flag.
struct TraceSpec {
  std::string kind{};                  // --generate: fixed, poisson or spot
  int nodes = 0;                       // --nodes: at the start (fixed, poisson) or slots (spot); required
  std::string interval = "1h";         // --interval, fixed: one node lost every interval
  int min_nodes = 0;                   // --min-nodes, fixed: stop removing at this many nodes
  double failures_per_node_hour = -1;  // --failure-rate, poisson; negative: not given
  std::string preset{};                // --preset, poisson: "llama3-405b" instead of a failure rate
  int gpus_per_node = 0;               // --gpus-per-node: scales the preset; 0: the caller's default
  std::string mttr = "0";              // --mttr, poisson: mean time to repair; 0: never repaired
  std::string duration = "1d";         // --duration: poisson, spot; checked but unused for fixed
  double add_probability = 0.5;        // --add-probability, spot: per hour, for an absent slot
  double remove_probability = 0.05;    // --remove-probability, spot: per hour, for a present node
  std::uint64_t seed = 1;              // --seed: the first seed of an experiment
  // Stragglers added to whatever is generated (with_stragglers): slowdowns
  // per node-hour (0: none), or the preset "falcon" (kFalconStragglers);
  // their mean duration; their factors, drawn uniformly.
  double stragglers_per_node_hour = 0;   // --stragglers-per-node-hour
  std::string straggler_preset{};        // --straggler-preset
  std::string straggler_mean = "10m";    // --straggler-mean
  std::vector<double> straggler_factors = {0.75, 0.85};  // --straggler-factors MIN,MAX
};

// FALCON / GREYHOUND (Wu et al., USENIX ATC 2025, section 3.2): of 392 jobs
// of one 4-GPU node, 70 to 90 minutes each, 6 met a compute fail-slow (CPU
// contention or GPU degradation), of 10 minutes on average, the ones
// described 20 % and 21.6 % slower: about 6 / (392 x 80 min) = 1.1e-2 per
// node-hour.
struct StragglerPreset {
  double per_node_hour;
  Milliseconds mean_duration_ms;
  double factor_min, factor_max;
};
inline constexpr StragglerPreset kFalconStragglers{6.0 / (392 * 80.0 / 60), 10 * 60'000.0, 0.75, 0.85};

// The trace `spec` describes, drawn with `seed` (not spec.seed, so that an
// experiment can draw many), with origin "KIND trace (seed N)". The preset's
// rate is per GPU: it is scaled by spec.gpus_per_node, or by
// `default_gpus_per_node` when that is 0. Throws InputError naming the flag:
// no --nodes, a duration that does not parse, poisson with both or neither
// of --failure-rate and --preset, an unknown kind or preset, or parameters
// the generator refuses. Stragglers, when asked for, are added last.
[[nodiscard]] Trace generate_trace(const TraceSpec& spec, std::uint64_t seed, int default_gpus_per_node);

}  // namespace oobleck::sim
