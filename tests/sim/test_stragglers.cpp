// Stragglers in the simulator: slow events in traces, the generator that
// adds them, and replay under each handling (ignore, evict, mitigate), with
// the books still adding up to the trace's duration.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "replay_fixtures.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::replay_fixtures;

namespace {

const PolicyResult& named(const ReplayResult& r, const std::string& name) {
  const auto it = std::find_if(r.policies.begin(), r.policies.end(),
                               [&](const PolicyResult& p) { return result_name(p) == name; });
  REQUIRE(it != r.policies.end());
  return *it;
}

// Eight nodes for 12 hours; node3 at half speed from hour 2 to hour 8.
std::string straggler_csv(bool slow) {
  std::string csv = start_with(8);
  if (slow) csv += "7200000,slow,node3,0.5\n28800000,slow,node3,1\n";
  csv += "43200000,slow,node1,1\n";  // (the trace's end; node1 stays at full speed)
  return csv;
}

}  // namespace

TEST_CASE("replay, stragglers: every policy under every handling, the books adding up") {
  const Trace plain = parse_trace(straggler_csv(false), "plain");
  const Trace slow = parse_trace(straggler_csv(true), "slow");
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 64;
  options.record_decisions = true;
  const ReplayResult without = replay(gpt3_1_3b(), plain, options);
  const ReplayResult with = replay(gpt3_1_3b(), slow, options);
  // Without slow events each policy runs once; with them, once per handling
  // (mitigate for the oobleck policies only).
  CHECK(without.policies.size() == std::size(kAllPolicies));
  CHECK(with.policies.size() == 3 * std::size(kAllPolicies) - 3);
  for (const auto& p : with.policies) {
    CAPTURE(result_name(p));
    CHECK(p.time.total_ms() == doctest::Approx(with.duration_ms).epsilon(1e-9));
    CHECK(p.samples > 0);
    const double iterations = p.samples / with.samples_per_iteration;
    CHECK(iterations == std::round(iterations));
  }
  for (const Policy policy : kAllPolicies) {
    const std::string name(policy_name(policy));
    CAPTURE(name);
    const auto& base = named(without, name);
    const auto& ignored = named(with, name);
    // Six hours at half speed on one node cost every policy that ignores it.
    CHECK(ignored.samples < base.samples);
    CHECK(ignored.failures == 0);
    // Evicting it is a loss and a join to each policy.
    const auto& evicted = named(with, name + "+evict");
    CHECK(evicted.samples < base.samples);
    CHECK(evicted.reconfigurations + evicted.restarts > ignored.reconfigurations + ignored.restarts);
  }
  // oobleck re-splits (or re-plans) and gets back more than ignoring or
  // evicting; its decisions say what it weighed.
  for (const char* name : {"oobleck", "oobleck-snapshots"}) {
    CAPTURE(name);
    const auto& mitigated = named(with, std::string(name) + "+mitigate");
    CHECK(mitigated.samples > named(with, name).samples);
    CHECK(mitigated.samples <= named(without, name).samples);
  }
  const auto& mitigated = named(with, "oobleck+mitigate");
  int for_speeds = 0, weighed = 0;
  for (const auto& d : mitigated.decisions) {
    for_speeds += d.find("\"cause\":\"speeds\"") != std::string::npos ? 1 : 0;
    weighed += d.find("\"kind\":\"speeds\"") != std::string::npos ? 1 : 0;
  }
  CHECK(for_speeds == 2);  // slowed, then its share back
  CHECK(weighed >= 2);
}

TEST_CASE("stragglers generator: slowdowns inside each node's presence, deterministic, at about the rate") {
  std::string csv = start_with(100);
  csv += "180000000,remove,node7\n360000000,slow,node1,1\n";  // 100 hours
  const Trace base = parse_trace(csv, "base");
  const Trace t = with_stragglers(base, 0.01, 600'000, 0.5, 0.9, 42);
  CHECK(t.events == with_stragglers(base, 0.01, 600'000, 0.5, 0.9, 42).events);
  CHECK(with_stragglers(base, 0, 600'000, 0.5, 0.9, 42).events == base.events);
  // A valid trace: it parses back as it is.
  CHECK(parse_trace(trace_to_csv(t), "again").events == t.events);
  int episodes = 0;
  std::map<std::string, double> speed;
  for (const auto& e : t.events) {
    if (e.change != NodeChange::slow || e.node == "node1") continue;
    CHECK((e.factor == 1 || (e.factor >= 0.5 && e.factor <= 0.9)));
    if (e.factor < 1) {
      CHECK(speed[e.node] == 0);  // one at a time per node
      ++episodes;
      speed[e.node] = e.factor;
    } else {
      speed[e.node] = 0;
    }
    if (e.node == "node7") CHECK(e.time_ms < 180000000);
  }
  // 99.5 node-hundred-hours at 0.01 an hour: about 100.
  CHECK(episodes > 60);
  CHECK(episodes < 150);
  CHECK_THROWS_AS((void)with_stragglers(base, 0.01, 600'000, 0.9, 0.5, 1), InputError);
  CHECK_THROWS_AS((void)with_stragglers(base, -1, 600'000, 0.5, 0.9, 1), InputError);
}
