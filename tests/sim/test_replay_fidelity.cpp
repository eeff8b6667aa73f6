// Replay against the settings published simulators use: long traces,
// Bamboo's rebalancing, per-node-count iteration times and per-policy
// overrides.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "oobleck/common/files.h"
#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "replay_fixtures.h"
#include "scenario_errors.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::replay_fixtures;

namespace {

// The trace with every time multiplied by `factor`.
Trace stretched(const Trace& trace, double factor) {
  std::ostringstream csv;
  for (const auto& e : trace.events) {
    csv << static_cast<long long>(std::llround(e.time_ms * factor)) << ','
        << (e.change == NodeChange::add ? "add" : "remove") << ',' << e.node << '\n';
  }
  return parse_trace(csv.str(), "stretched");
}

}  // namespace

TEST_CASE("replay: the same losses stretched tenfold lose no more work, at a checkpoint every iteration") {
  // Losses late in a long trace used to count iterations whose end the
  // clock's rounding put a hair before the boundary as lost: every
  // iteration, at a checkpoint every iteration.
  const Trace trace = load_trace((kRoot / "traces/3h.csv").string());
  Scenario scenario;
  scenario.overrides.iteration_ms = 1234.567;
  scenario.overrides.checkpoint_interval_iterations = 1;
  scenario.overrides.checkpoint_save_ms = 12.3;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  options.policies = {Policy::checkpoint, Policy::oobleck};
  for (const double factor : {1.0, 10.0}) {
    CAPTURE(factor);
    const ReplayResult result = replay(gpt3_1_3b(), stretched(trace, factor), options, scenario);
    for (const auto& p : result.policies) {
      CAPTURE(policy_name(p.policy));
      // At most the iteration in flight (and its save) per failure and per
      // restart, where the job stopped.
      const double most = (p.failures + p.restarts + 1) * (1234.567 + 12.3);
      CHECK(p.time.lost_work_ms <= most);
      CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-9));
    }
  }
}

TEST_CASE("scenario: iteration times per node count, interpolated between counts, per node beyond them") {
  const Scenario s = parse_scenario(R"({"overrides": {"iteration_ms_by_nodes": {"8": 1200, "16": 800, "12": 900}}})",
                                    "s.json");
  const Overrides& o = s.overrides;
  REQUIRE(o.iteration_ms_by_nodes.size() == 3);
  CHECK(overridden_iteration_ms(o, 8) == 1200);
  CHECK(overridden_iteration_ms(o, 12) == 900);
  CHECK(*overridden_iteration_ms(o, 10) == doctest::Approx(1050));       // halfway between 8 and 12
  CHECK(*overridden_iteration_ms(o, 14) == doctest::Approx(850));
  CHECK(*overridden_iteration_ms(o, 4) == doctest::Approx(2400));        // 8 nodes' throughput per node
  CHECK(*overridden_iteration_ms(o, 32) == doctest::Approx(400));
  CHECK_FALSE(overridden_iteration_ms(Overrides{}, 8));
  Overrides constant;
  constant.iteration_ms = 700;
  CHECK(overridden_iteration_ms(constant, 3) == 700);

  const auto message = [](const std::string& text) { return scenario_error(text, "bad.json"); };
  CHECK(message(R"({"overrides": {"iteration_ms_by_nodes": {"0": 5}}})")
            .find("bad.json: overrides.iteration_ms_by_nodes.0: expected a node count from 1 to 1000000") == 0);
  CHECK(message(R"({"overrides": {"iteration_ms_by_nodes": {"eight": 5}}})").find("iteration_ms_by_nodes.eight") !=
        std::string::npos);
  CHECK(message(R"({"overrides": {"iteration_ms_by_nodes": {"8": 0}}})")
            .find("bad.json: overrides.iteration_ms_by_nodes.8: expected a positive number") == 0);
  CHECK(message(R"({"overrides": {"iteration_ms_by_nodes": []}})").find("expected an object of node counts") !=
        std::string::npos);
  CHECK(message(R"({"overrides": {"iteration_ms_by_nodes": {"8": 5}, "iteration_ms": 3}})")
            .find("bad.json: overrides: give iteration_ms or iteration_ms_by_nodes, not both") == 0);
}

TEST_CASE("scenario: overrides per policy replace the common ones for that policy alone") {
  const Scenario s = parse_scenario(R"({
    "overrides": {"iteration_ms": 1000, "checkpoint_interval_iterations": 50, "checkpoint_save_ms": 20000},
    "policy_overrides": {
      "checkpoint": {"iteration_ms_by_nodes": {"4": 1500}, "checkpoint_interval_iterations": 1},
      "bamboo": {"bamboo_slowdown": 1.5}}})",
                                    "s.json");
  const Overrides checkpoint = s.overrides_for(Policy::checkpoint);
  CHECK_FALSE(checkpoint.iteration_ms);  // the table replaces the common constant
  CHECK(checkpoint.iteration_ms_by_nodes.at(4) == 1500);
  CHECK(checkpoint.checkpoint_interval_iterations == 1);
  CHECK(checkpoint.checkpoint_save_ms == 20000);  // not overridden: the common one
  const Overrides oobleck = s.overrides_for(Policy::oobleck);
  CHECK(oobleck.iteration_ms == 1000);
  CHECK(oobleck.checkpoint_interval_iterations == 50);
  CHECK(s.overrides_for(Policy::bamboo).bamboo_slowdown == 1.5);
  CHECK_FALSE(s.overrides_for(Policy::inmemory).bamboo_slowdown);

  const auto message = [](const std::string& text) { return scenario_error(text, "bad.json"); };
  CHECK(message(R"({"policy_overrides": {"varuna": {}}})")
            .find("bad.json: policy_overrides.varuna: no such policy; expected one of: oobleck, checkpoint") == 0);
  CHECK(message(R"({"policy_overrides": {"oobleck": {"iteration": 3}}})")
            .find("bad.json: policy_overrides.oobleck.iteration: unknown field") == 0);
  CHECK(message(R"({"policy_overrides": {"oobleck": 3}})").find("policy_overrides.oobleck: expected an object") !=
        std::string::npos);
  // The merged snapshot intervals are checked: 4 is not a multiple of 3.
  CHECK(message(R"({"overrides": {"snapshot_every_iterations": 3, "mirror_every_iterations": 6},
                    "policy_overrides": {"oobleck-snapshots": {"mirror_every_iterations": 4}}})")
            .find("bad.json: policy_overrides.oobleck-snapshots.mirror_every_iterations: expected 0 or a multiple") ==
        0);
}

TEST_CASE("replay: each policy trains at its own table's iteration time for the nodes its plan uses") {
  // 8 nodes, no loss: every policy trains on all 8 from its first start to
  // the end at the iteration time its table gives for 8 nodes.
  const Trace trace = parse_trace(start_with(8) + "3600000,add,node9\n", "no losses");
  const Scenario scenario = parse_scenario(R"({
    "overrides": {"iteration_ms_by_nodes": {"4": 4000, "16": 1000}, "checkpoint_interval_iterations": 0},
    "policy_overrides": {"checkpoint": {"iteration_ms_by_nodes": {"8": 1500}}}})",
                                           "table.json");
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  options.policies = {Policy::oobleck, Policy::checkpoint};
  const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
  REQUIRE(result.policies.size() == 2);
  for (const auto& p : result.policies) {
    CAPTURE(policy_name(p.policy));
    REQUIRE(!p.timeline.empty());
    // The plan on 8 nodes (the trace's first hour): 8 nodes of the 1.3B
    // model make whole pipelines, all of them used.
    const TimelinePoint& first_training = *std::find_if(p.timeline.begin(), p.timeline.end(),
                                                        [](const TimelinePoint& t) { return t.pipelines > 0; });
    CHECK(first_training.nodes == 8);
    const double expected_ms = p.policy == Policy::checkpoint ? 1500.0 : 4000.0 + (8 - 4) * (1000.0 - 4000.0) / 12;
    CHECK(first_training.samples_per_s == doctest::Approx(result.samples_per_iteration / expected_ms * 1000));
  }
}

TEST_CASE("replay: the Oobleck artifact's constants reproduce its simulators' throughput on its own traces") {
  // sim/scenarios/oobleck-artifact-gpt3-medium.json holds the constants of
  // the artifact's oobleck_simulator.py and varuna_simulator.py for GPT-3
  // medium (819 samples per step). Their results, from running the
  // artifact's code on the same traces: samples per second from the first
  // start to the last step, oobleck 29.281 (3h.csv) and 29.305 (6h.csv),
  // Varuna 29.409 and 29.504. (Varuna is our checkpoint policy.)
  const Profile profile = load_profile(kRoot / "profiles/gpt2-medium-h200-mb1-fp32.analytic.json");
  REQUIRE(profile.microbatch_size == 1);
  const Scenario scenario = parse_scenario(
      read_text_file((kRoot / "sim/scenarios/oobleck-artifact-gpt3-medium.json").string()), "artifact scenario");
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 819;
  options.policies = {Policy::oobleck, Policy::checkpoint};
  struct Published {
    const char* trace;
    double oobleck, varuna;
  };
  for (const Published& published : {Published{"3h.csv", 29.281, 29.409}, Published{"6h.csv", 29.305, 29.504}}) {
    CAPTURE(published.trace);
    const ReplayResult result =
        replay(profile, load_trace((kRoot / "traces" / published.trace).string()), options, scenario);
    REQUIRE(result.samples_per_iteration == 819);
    for (const auto& p : result.policies) {
      CAPTURE(policy_name(p.policy));
      const auto first = std::find_if(p.timeline.begin(), p.timeline.end(),
                                      [](const TimelinePoint& t) { return t.pipelines > 0; });
      REQUIRE(first != p.timeline.end());
      const double rate = p.samples / ((result.duration_ms - first->time_ms) / 1000.0);
      const double expected = p.policy == Policy::oobleck ? published.oobleck : published.varuna;
      CHECK(rate == doctest::Approx(expected).epsilon(0.015));
      // Every node count the trace passes through (30 down to 16) is in the
      // tables: no throughput extrapolated.
      CHECK(p.timeline.back().nodes >= 15);
    }
  }
}

namespace {

ReplayResult replay_bamboo(const std::string& csv) {
  Scenario scenario;
  scenario.overrides.checkpoint_interval_iterations = 0;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 64;
  options.policies = {Policy::bamboo};
  return replay(gpt3_1_3b(), parse_trace(csv, "bamboo trace"), options, scenario);
}

// The throughput from `time_ms` on.
double rate_at(const PolicyResult& p, Milliseconds time_ms) {
  double rate = 0;
  for (const auto& t : p.timeline) {
    if (t.time_ms <= time_ms) rate = t.samples_per_s;
  }
  return rate;
}

}  // namespace

TEST_CASE("replay: bamboo re-forms its pipelines once overloaded nodes pass 5 % of the active ones") {
  constexpr Milliseconds kHourMs = 3'600'000;
  SUBCASE("8 nodes: one loss is 2 of 7, the pipelines are re-formed over the 7 after a step") {
    const auto lost = replay_bamboo(start_with(8) + "3600000,remove,node3\n10800000,add,node99\n");
    const auto healthy = replay_bamboo(start_with(7) + "10800000,add,node99\n");  // (the same peak, 8)
    const auto& p = lost.policies.front();
    REQUIRE(p.runnable);
    CHECK(p.failures == 1);
    CHECK(p.unrecoverable == 0);
    CHECK(p.restarts == 1);           // the first start only
    CHECK(p.reconfigurations == 2);   // the failover, then the rebalance
    // Afterwards it trains as 7 nodes would from the start, with no merged stage.
    CHECK(rate_at(p, 2 * kHourMs) == doctest::Approx(rate_at(healthy.policies.front(), 2 * kHourMs)));
    CHECK(rate_at(p, 2 * kHourMs) > 0);
  }
  SUBCASE("48 nodes: one loss is 2 of 47 and waits; a second one is 4 of 46 and re-forms") {
    const auto one = replay_bamboo(start_with(48) + "3600000,remove,node1\n10800000,add,node99\n");
    const auto& p = one.policies.front();
    REQUIRE(p.runnable);
    CHECK(p.reconfigurations == 1);  // the failover alone: a merged stage until the end
    const auto healthy = replay_bamboo(start_with(47) + "10800000,add,node99\n");
    CHECK(rate_at(p, 2 * kHourMs) < rate_at(healthy.policies.front(), 2 * kHourMs));

    const auto two = replay_bamboo(start_with(48) + "3600000,remove,node1\n5400000,remove,node25\n10800000,add,node99\n");
    const auto& q = two.policies.front();
    CHECK(q.unrecoverable == 0);
    CHECK(q.reconfigurations == 3);  // two failovers and a rebalance
    // (Peaking at 48 too: templates are made for the trace's peak.)
    const auto healthy46 = replay_bamboo(start_with(46) + "10800000,add,node98\n10800000,add,node99\n");
    CHECK(rate_at(q, 2 * kHourMs) == doctest::Approx(rate_at(healthy46.policies.front(), 2 * kHourMs)));
  }
}
