// Monte Carlo over generated traces: the runs, their statistics, and the
// summary as JSON and as a table.
#include "oobleck/sim/monte_carlo.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "experiment_internal.h"

namespace oobleck::sim {

namespace {

template <typename Field>
Spread spread(const std::vector<ReplayResult>& runs, std::size_t policy, Field field) {
  std::vector<double> values;
  values.reserve(runs.size());
  for (const auto& run : runs) values.push_back(field(run.policies[policy]));
  return {percentile(values, 0.5), percentile(values, 0.05), percentile(values, 0.95)};
}

nlohmann::ordered_json spread_json(const Spread& s) {
  return nlohmann::ordered_json{{"median", s.median}, {"p5", s.p5}, {"p95", s.p95}};
}

}  // namespace

SeedsSummary summarize_seeds(const std::vector<ReplayResult>& runs, std::uint64_t first_seed) {
  if (runs.empty()) throw std::invalid_argument("summarize_seeds: no runs");
  SeedsSummary summary;
  summary.seeds = runs.size();
  summary.first_seed = first_seed;
  for (std::size_t p = 0; p < runs.front().policies.size(); ++p) {
    PolicySpread s;
    s.policy = runs.front().policies[p].policy;
    s.runnable = runs.front().policies[p].runnable;
    s.samples_per_s = spread(runs, p, [](const PolicyResult& r) { return r.samples_per_s; });
    s.goodput = spread(runs, p, [](const PolicyResult& r) { return r.goodput; });
    s.failures = spread(runs, p, [](const PolicyResult& r) { return static_cast<double>(r.failures); });
    s.unrecoverable = spread(runs, p, [](const PolicyResult& r) { return static_cast<double>(r.unrecoverable); });
    s.lost_work_s = spread(runs, p, [](const PolicyResult& r) { return r.time.lost_work_ms / 1000.0; });
    summary.policies.push_back(s);
  }
  return summary;
}

SeedsSummary replay_seeds(const Profile& profile, const TraceSet& traces, const ReplayOptions& options,
                          const Scenario& scenario, const ExperimentOptions& experiment) {
  ReplayOptions one_thread = options;
  one_thread.parallel = false;  // the runs already use every core
  // One result per policy in every run, whether or not its trace drew a
  // straggler: the spreads are taken position by position.
  one_thread.stragglers = {StragglerHandling::ignore};
  const auto runs = experiment_internal::run_jobs<ReplayResult>(
      traces.runs, [&](int i) { return replay(profile, *traces.trace_for_run(i), one_thread, scenario); }, experiment,
      "trace");
  return summarize_seeds(runs, traces.spec.seed);
}

std::string seeds_to_json(const SeedsSummary& summary) {
  using nlohmann::ordered_json;
  ordered_json out;
  out["format"] = "oobleck.replay-seeds.v1";
  out["seeds"] = summary.seeds;
  out["first_seed"] = summary.first_seed;
  ordered_json policies = ordered_json::object();
  for (const PolicySpread& p : summary.policies) {
    ordered_json entry;
    entry["runnable"] = p.runnable;
    entry["samples_per_s"] = spread_json(p.samples_per_s);
    entry["goodput"] = spread_json(p.goodput);
    entry["failures"] = spread_json(p.failures);
    entry["unrecoverable"] = spread_json(p.unrecoverable);
    entry["lost_work_s"] = spread_json(p.lost_work_s);
    policies[std::string(policy_name(p.policy))] = std::move(entry);
  }
  out["policies"] = std::move(policies);
  return out.dump(2) + "\n";
}

std::string seeds_summary_table(const SeedsSummary& summary) {
  using experiment_internal::formatted;
  std::string out = formatted("%zu generated traces: median [5th, 95th percentile]\n", summary.seeds);
  // The policy column fits the longest name (10 wide when all are short).
  int width = 10;
  for (const PolicySpread& p : summary.policies) {
    width = std::max(width, static_cast<int>(policy_name(p.policy).size()));
  }
  out += formatted("%-*s  %-32s  %-28s\n", width, "policy", "samples/s", "goodput");
  for (const PolicySpread& p : summary.policies) {
    out += formatted("%-*s  %9.2f [%9.2f, %9.2f]  %6.1f%% [%6.1f%%, %6.1f%%]\n", width,
                     std::string(policy_name(p.policy)).c_str(), p.samples_per_s.median, p.samples_per_s.p5,
                     p.samples_per_s.p95, 100 * p.goodput.median, 100 * p.goodput.p5, 100 * p.goodput.p95);
  }
  return out;
}

}  // namespace oobleck::sim
