// A generator spec from the command line turned into a trace.
#include "oobleck/sim/trace_generator.h"

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
  return trace;
}

}  // namespace oobleck::sim
