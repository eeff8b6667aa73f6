// A loss during a step, replayed as a live run resumes it
// (recovery/step_shares.h): pipelines the new plan leaves as they were keep
// their passes, are waited for only where that saves time, and the resumed
// step trains only the rest.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "replay_fixtures.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::replay_fixtures;

namespace {

struct Recovery {
  int kept = 0;
  Milliseconds down_ms = 0;     // reconfiguration: detection (0 here), any wait, communicators
  Milliseconds resumed_ms = 0;  // the first step after it
  Milliseconds next_ms = 0;     // the step after that
};

// Four one-node pipelines (GPT-3 1.3B, B = 8, two microbatches each) train
// steps of exactly 1 s from 11 s on (a restart of 10 s, communicators of
// 1 s, no detection delay, no copies, no checkpoints), with `policy` alone.
ReplayResult replay_four_nodes(const std::string& csv, Policy policy) {
  Scenario scenario;
  scenario.cluster.detection_ms = 0;
  scenario.cluster.restart_ms = 10'000;
  scenario.cluster.communicator_ms = 1'000;
  scenario.overrides.iteration_ms = 1'000;
  scenario.overrides.checkpoint_interval_iterations = 0;
  scenario.overrides.oobleck_copy_ms = 0;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 8;
  options.policies = {policy};
  return replay(gpt3_1_3b(), parse_trace(csv, "test trace"), options, scenario);
}

// node2 is lost `into` ms into step 5.
Recovery lose_node_during_a_step(Milliseconds into, Policy policy = Policy::oobleck) {
  constexpr Milliseconds kStart = 11'000, kStep = 1'000;
  const auto at = static_cast<long long>(kStart + 5 * kStep + into);
  const ReplayResult result = replay_four_nodes(start_with(4) + std::to_string(at) + ",remove,node2\n60000,add,node9\n",
                                                policy);
  REQUIRE(result.policies.size() == 1);
  const PolicyResult& p = result.policies.front();
  CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-9));
  CHECK(p.reconfigurations == 1);
  Recovery r;
  r.kept = p.kept_microbatches;
  r.down_ms = p.time.reconfiguration_ms;
  // The timeline after the loss: down, then the resumed step, then steady.
  std::size_t down = 0;
  while (down < p.timeline.size() && !(p.timeline[down].time_ms >= static_cast<double>(at) &&
                                       p.timeline[down].pipelines == 0)) {
    ++down;
  }
  REQUIRE(down + 1 < p.timeline.size());
  const auto step_ms = [&](std::size_t i) { return result.samples_per_iteration / p.timeline[i].samples_per_s * 1000.0; };
  CHECK(p.timeline[down + 1].pipelines == 3);
  r.resumed_ms = step_ms(down + 1);
  r.next_ms = r.kept > 0 && down + 2 < p.timeline.size() ? step_ms(down + 2) : r.resumed_ms;
  return r;
}

}  // namespace

TEST_CASE("replay: a loss during a step keeps the other pipelines' passes where waiting for them saves time") {
  // Each surviving pipeline keeps its 2 microbatches or none; node2's two
  // are trained again by the three pipelines left, the others then only
  // all-reduce: the resumed step is shorter than a whole one.
  std::vector<Recovery> by_twentieth;  // 50 ms into the step, 100, ..., 950, then 990
  for (int k = 1; k <= 20; ++k) {
    CAPTURE(k);
    const Recovery r = lose_node_during_a_step(k < 20 ? k * 50.0 : 990.0);
    CHECK((r.kept == 0 || r.kept == 6));
    CHECK(r.next_ms == doctest::Approx(1000));
    if (r.kept == 0) {
      CHECK(r.down_ms == doctest::Approx(1000));  // communicators alone: no wait
      CHECK(r.resumed_ms == doctest::Approx(1000));
    } else {
      CHECK(r.down_ms >= 1000);
      CHECK(r.resumed_ms < 1000);
      // Waiting and the resumed step together cost less than the whole step again.
      CHECK(r.down_ms - 1000 + r.resumed_ms < 1000);
    }
    by_twentieth.push_back(r);
  }
  // Early in the step the passes left take longer than they would save:
  // nothing kept. Late, they are over: kept at once. Between, the generation
  // waits for them, a wait that ends when they pass.
  CHECK(by_twentieth.front().kept == 0);
  CHECK(by_twentieth.back().kept == 6);
  CHECK(by_twentieth.back().down_ms == doctest::Approx(1000));
  bool waited = false;
  for (std::size_t k = 1; k < by_twentieth.size(); ++k) {
    const Recovery& before = by_twentieth[k - 1];
    const Recovery& r = by_twentieth[k];
    if (before.kept > 0) CHECK(r.kept > 0);  // once worth it, worth it later in the step too
    if (before.kept > 0 && before.down_ms > 1000) {
      waited = true;
      // The passes end at one moment of the step: 50 ms later, 50 ms less wait.
      const Milliseconds later = k + 1 < by_twentieth.size() ? 50 : 40;
      CHECK(r.down_ms == doctest::Approx(std::max(1000.0, before.down_ms - later)));
    }
    if (r.kept > 0) CHECK(r.resumed_ms == doctest::Approx(by_twentieth.back().resumed_ms));
  }
  CHECK(waited);
  for (std::size_t k = 0; k < by_twentieth.size(); ++k) {
    if (by_twentieth[k].kept == 0) continue;
    MESSAGE("kept from " << (k + 1) * 50 << " ms into the step (waiting " << by_twentieth[k].down_ms - 1000
                         << " ms for the passes); the resumed step " << by_twentieth[k].resumed_ms << " ms of 1000");
    break;
  }
}

TEST_CASE("replay: oobleck-snapshots keeps passes as oobleck does") {
  const Recovery plain = lose_node_during_a_step(990);
  const Recovery snapshots = lose_node_during_a_step(990, Policy::oobleck_snapshots);
  CHECK(plain.kept == 6);
  CHECK(snapshots.kept == plain.kept);
  CHECK(snapshots.down_ms == doctest::Approx(plain.down_ms));
}

TEST_CASE("replay: a loss during the resumed step keeps what its pipelines hold of it") {
  // node2 lost late in step 5: 6 microbatches kept, node2's 2 trained again
  // by node1 and node3 (one each) in a resumed step of some 340 ms that
  // starts at 17 s. node3 is lost 300 ms into it: node4, which trained
  // nothing, holds its 2 kept ones; node1 holds its 2 and the one it
  // trains, once past its passes. node3's three are trained again.
  const ReplayResult result =
      replay_four_nodes(start_with(4) + "16990,remove,node2\n18300,remove,node3\n60000,add,node9\n", Policy::oobleck);
  const PolicyResult& p = result.policies.front();
  CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-9));
  CHECK(p.reconfigurations == 2);
  CHECK(p.unrecoverable == 0);
  // (node1's one pass is over, or waited for: the resumed step's passes
  // end well before a whole step's would.)
  CHECK(p.kept_microbatches == 6 + 2 + 3);
  const double iterations = p.samples / result.samples_per_iteration;
  CHECK(iterations == std::round(iterations));
}
