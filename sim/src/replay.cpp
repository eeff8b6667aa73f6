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

std::string_view straggler_handling_name(StragglerHandling handling) {
  switch (handling) {
    case StragglerHandling::ignore:
      return "ignore";
    case StragglerHandling::evict:
      return "evict";
    case StragglerHandling::mitigate:
      return "mitigate";
  }
  return "?";
}

std::vector<StragglerHandling> parse_straggler_handlings(std::string_view list) {
  if (list == "all") return {std::begin(kAllStragglerHandlings), std::end(kAllStragglerHandlings)};
  std::vector<StragglerHandling> out;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view name = list.substr(start, comma - start);
    const auto* it = std::find_if(std::begin(kAllStragglerHandlings), std::end(kAllStragglerHandlings),
                                  [&](StragglerHandling h) { return straggler_handling_name(h) == name; });
    if (it == std::end(kAllStragglerHandlings)) {
      throw InputError("--stragglers: unknown handling \"" + std::string(name) +
                       "\"; expected a comma-separated list of ignore, evict, mitigate, or all");
    }
    if (std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
    start = comma + 1;
  }
  return out;
}

bool policy_mitigates(Policy policy) { return policy == Policy::oobleck || policy == Policy::oobleck_snapshots; }

std::string result_name(const PolicyResult& result) {
  std::string name(policy_name(result.policy));
  if (result.stragglers != StragglerHandling::ignore) name.append("+").append(straggler_handling_name(result.stragglers));
  return name;
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
  // Each policy once per straggler handling it has (once, as ignore, when
  // the trace slows no node).
  std::vector<std::pair<Policy, StragglerHandling>> runs;
  for (const Policy policy : options.policies) {
    if (!trace.has_stragglers()) {
      runs.emplace_back(policy, StragglerHandling::ignore);
      continue;
    }
    for (const StragglerHandling h : options.stragglers) {
      if (h != StragglerHandling::mitigate || policy_mitigates(policy)) runs.emplace_back(policy, h);
    }
  }
  out.policies.resize(runs.size());
  auto run_one = [&](std::size_t i) {
    const StragglerHandling h = runs[i].second;
    switch (runs[i].first) {
      case Policy::oobleck: out.policies[i] = detail::run_oobleck(job, h); break;
      case Policy::checkpoint: out.policies[i] = detail::run_checkpoint(job, h); break;
      case Policy::inmemory: out.policies[i] = detail::run_inmemory(job, h); break;
      case Policy::bamboo: out.policies[i] = detail::run_bamboo(job, h); break;
      case Policy::oobleck_snapshots: out.policies[i] = detail::run_oobleck_snapshots(job, h); break;
    }
  };
  if (options.parallel && runs.size() > 1 && std::thread::hardware_concurrency() > 1) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(runs.size());
    for (std::size_t i = 0; i < runs.size(); ++i) {
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
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (progress) progress("replaying " + std::string(policy_name(runs[i].first)));
      run_one(i);
    }
  }
  return out;
}

}  // namespace oobleck::sim
