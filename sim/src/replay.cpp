// Trace replay. Each policy is a model driven by its own event engine: the
// trace's adds and removes are events, and so are the ends of downtimes,
// checkpoints and deferred growth. Training between events is accounted
// analytically (whole iterations at the current plan's simulated iteration
// time), so days of training cost a handful of events.
#include "oobleck/sim/replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "oobleck/sim/engine.h"
#include "oobleck/sim/iteration.h"
#include "policies/policy_model.h"

namespace oobleck::sim {

std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::oobleck: return "oobleck";
    case Policy::checkpoint: return "checkpoint";
    case Policy::inmemory: return "inmemory";
    case Policy::bamboo: return "bamboo";
    case Policy::oobleck_snapshots: return "oobleck-snapshots";
  }
  return "?";
}

std::vector<Policy> parse_policies(std::string_view list) {
  if (list == "all") return {std::begin(kAllPolicies), std::end(kAllPolicies)};
  std::vector<Policy> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view name = list.substr(start, comma - start);
    bool found = false;
    for (Policy p : kAllPolicies) {
      if (policy_name(p) == name) {
        if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
        found = true;
      }
    }
    if (!found) {
      throw InputError("--policy: unknown policy \"" + std::string(name) +
                       "\"; expected a comma-separated list of oobleck, checkpoint, inmemory, bamboo, "
                       "oobleck-snapshots, or all");
    }
    start = comma + 1;
  }
  return out;
}



ReplayResult replay(const Profile& profile, const Trace& trace, const ReplayOptions& options, const Scenario& scenario,
                    const Progress& progress) {
  if (trace.events.empty()) throw InputError(trace.origin + ": the trace has no events");
  // Checkpoints and iterations are events: bound how many a replay can make.
  constexpr Milliseconds kMaxReplayMs = 2 * 365.25 * 24 * 3.6e6;
  if (trace.duration_ms() > kMaxReplayMs) {
    throw InputError(trace.origin + ": the trace spans " + std::to_string(trace.duration_ms() / 3.6e6 / 24) +
                     " days; at most two years (730.5 days) can be replayed");
  }
  if (options.fault_tolerance < 0) throw InputError("--fault-tolerance: expected a non-negative integer");
  if (options.global_microbatches < 1) throw InputError("--global-microbatches: expected a positive integer");
  const detail::Job job(profile, trace, options, scenario, progress);
  ReplayResult out;
  out.duration_ms = trace.duration_ms();
  out.samples_per_iteration = job.samples_per_iteration;
  out.policies.resize(options.policies.size());
  auto run_one = [&](std::size_t i) {
    switch (options.policies[i]) {
      case Policy::oobleck: out.policies[i] = detail::run_oobleck(job); break;
      case Policy::checkpoint: out.policies[i] = detail::run_checkpoint(job); break;
      case Policy::inmemory: out.policies[i] = detail::run_inmemory(job); break;
      case Policy::bamboo: out.policies[i] = detail::run_bamboo(job); break;
      case Policy::oobleck_snapshots: out.policies[i] = detail::run_oobleck_snapshots(job); break;
    }
  };
  if (options.parallel && options.policies.size() > 1 && std::thread::hardware_concurrency() > 1) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(options.policies.size());
    for (std::size_t i = 0; i < options.policies.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          run_one(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  } else {
    for (std::size_t i = 0; i < options.policies.size(); ++i) {
      if (progress) progress("replaying " + std::string(policy_name(options.policies[i])));
      run_one(i);
    }
  }
  return out;
}

}  // namespace oobleck::sim
