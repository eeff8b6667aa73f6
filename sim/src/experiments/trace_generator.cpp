// A generator spec from the command line turned into a trace.
#include "oobleck/sim/trace_generator.h"

#include <cmath>

namespace oobleck::sim {

namespace {

constexpr const char* kLlama3Preset = "llama3-405b";

double poisson_rate(const TraceSpec& spec, int default_gpus_per_node) {
  double rate = spec.failures_per_node_hour;
  if (!spec.preset.empty()) {
    if (rate >= 0) throw InputError("--failure-rate and --preset: give one of them");
    if (spec.preset != kLlama3Preset) {
      throw InputError("--preset: expected " + std::string(kLlama3Preset) + ", got \"" + spec.preset + "\"");
    }
    rate = kLlama3FailuresPerGpuHour * (spec.gpus_per_node > 0 ? spec.gpus_per_node : default_gpus_per_node);
  }
  if (rate < 0) throw InputError("--failure-rate: required for poisson traces (or --preset llama3-405b)");
  return rate;
}

}  // namespace

Trace generate_trace(const TraceSpec& spec, std::uint64_t seed, int default_gpus_per_node) {
  if (spec.nodes <= 0) throw InputError("--nodes: required with --generate");
  const Milliseconds length_ms = parse_duration(spec.duration, "--duration");
  Trace trace;
  if (spec.kind == "fixed") {
    trace = fixed_interval_trace(spec.nodes, parse_duration(spec.interval, "--interval"), spec.min_nodes, seed);
  } else if (spec.kind == "poisson") {
    const double rate = poisson_rate(spec, default_gpus_per_node);
    trace = poisson_trace(spec.nodes, rate, parse_duration(spec.mttr, "--mttr"), length_ms, seed);
  } else if (spec.kind == "spot") {
    trace = spot_trace(spec.nodes, spec.add_probability, spec.remove_probability, length_ms, seed);
  } else {
    throw InputError("--generate: expected fixed, poisson or spot, got \"" + spec.kind + "\"");
  }
  trace.origin = spec.kind + " trace (seed " + std::to_string(seed) + ")";
  double rate = spec.stragglers_per_node_hour;
  Milliseconds mean_ms = parse_duration(spec.straggler_mean, "--straggler-mean");
  std::vector<double> factors = spec.straggler_factors;
  if (!spec.straggler_preset.empty()) {
    if (spec.straggler_preset != "falcon") {
      throw InputError("--straggler-preset: expected falcon, got \"" + spec.straggler_preset + "\"");
    }
    if (rate > 0) throw InputError("--stragglers-per-node-hour and --straggler-preset: give one of them");
    rate = kFalconStragglers.per_node_hour;
    mean_ms = kFalconStragglers.mean_duration_ms;
    factors = {kFalconStragglers.factor_min, kFalconStragglers.factor_max};
  }
  if (rate < 0 || !std::isfinite(rate)) {
    throw InputError("--stragglers-per-node-hour: expected a non-negative number, got " + std::to_string(rate));
  }
  if (factors.size() != 2) throw InputError("--straggler-factors: expected MIN,MAX");
  if (rate > 0) {
    if (!(mean_ms > 0)) throw InputError("--straggler-mean: expected a positive duration such as 10m");
    if (!(factors[0] >= 0.01 && factors[0] <= factors[1] && factors[1] < 1)) {
      throw InputError("--straggler-factors: expected 0.01 <= MIN <= MAX < 1, got " + std::to_string(factors[0]) +
                       "," + std::to_string(factors[1]));
    }
    // Over the generator's duration (a fixed-interval trace ends at its last loss).
    trace = with_stragglers(trace, rate, mean_ms, factors[0], factors[1], seed ^ 0x5f0a11e5ULL,
                            spec.kind == "fixed" ? 0 : length_ms);
  }
  return trace;
}

}  // namespace oobleck::sim
