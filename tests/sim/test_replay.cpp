#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "replay_fixtures.h"
#include "scenario_errors.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::replay_fixtures;

namespace {

Trace trace_of(const std::string& csv) { return parse_trace(csv, "test trace"); }

void check_books(const ReplayResult& result) {
  for (const auto& p : result.policies) {
    CAPTURE(policy_name(p.policy));
    CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-9));
    CHECK(p.time.training_ms >= -1e-6);
    CHECK(p.time.lost_work_ms >= -1e-6);
    CHECK(p.goodput >= 0);
    CHECK(p.goodput <= 1 + 1e-12);
    // Samples come in whole iterations.
    const double iterations = p.samples / result.samples_per_iteration;
    CHECK(iterations == std::round(iterations));
    CHECK(p.samples_per_s == doctest::Approx(p.samples / (result.duration_ms / 1000.0)));
    for (std::size_t i = 1; i < p.timeline.size(); ++i) CHECK(p.timeline[i].time_ms > p.timeline[i - 1].time_ms);
  }
}

// The p3 trace replayed with `options`, then with `change` made to them:
// the second's books add up and it is the same in parallel or not. Both
// results, in that order.
std::pair<ReplayResult, ReplayResult> replay_p3_before_and_after(const Profile& profile, ReplayOptions options,
                                                                const std::function<void(ReplayOptions&)>& change) {
  const Trace trace = load_trace((kRoot / "traces/p3-trace.csv").string());
  ReplayResult before = replay(profile, trace, options);
  change(options);
  ReplayResult after = replay(profile, trace, options);
  check_books(after);
  options.parallel = false;
  CHECK(replay_to_json(replay(profile, trace, options)) == replay_to_json(after));
  REQUIRE(after.policies.size() == before.policies.size());
  return {std::move(before), std::move(after)};
}

}  // namespace

TEST_CASE("replay: every policy's time adds up to the trace's duration, on the bundled traces") {
  for (const char* name : {"p3-trace.csv", "g4dn-trace.csv", "1h.csv", "scale_gcp-trace.csv"}) {
    CAPTURE(name);
    const Trace trace = load_trace((kRoot / "traces" / name).string());
    ReplayOptions options;
    options.fault_tolerance = 1;
    options.global_microbatches = 64;
    const ReplayResult result = replay(gpt3_1_3b(), trace, options);
    REQUIRE(result.policies.size() == std::size(kAllPolicies));
    check_books(result);
    for (const auto& p : result.policies) {
      CHECK(p.runnable);
      CHECK(p.samples > 0);
    }
  }
}

TEST_CASE("replay: plans whose stages span nodes: the books add up, deterministic, and oobleck trains faster") {
  // Llama 3 70B's costs on the p3 trace's H100 nodes, any degree allowed
  // (replay_fixtures.h): stages over two nodes let every re-plan choose
  // 16-GPU stages where they are faster.
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 256;
  options.policies = {Policy::oobleck, Policy::checkpoint, Policy::oobleck_snapshots};
  const auto [within, spanning] =
      replay_p3_before_and_after(llama3_70b_any_degree(), options,
                                 [](ReplayOptions& o) { o.tensor_parallel_nodes = 2; });
  for (std::size_t i = 0; i < spanning.policies.size(); ++i) {
    const auto policy = policy_name(spanning.policies[i].policy);  // (CAPTURE holds a reference: not to a temporary)
    CAPTURE(policy);
    CHECK(spanning.policies[i].runnable);
    CHECK(spanning.policies[i].samples_per_s > within.policies[i].samples_per_s);
  }
}

TEST_CASE("replay: interleaved plans: the books add up, deterministic, faster iterations for the policies that plan them, Bamboo's unchanged") {
  // GPT-3 175B on the p3 trace's A100 nodes, B = 128: 16-node pipelines of
  // 4 chunks a device play 22 % faster than plain ones.
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 128;
  const auto [plain, interleaved] = replay_p3_before_and_after(
      load_profile(kRoot / "profiles/gpt3-175b-a100.analytic.json"), options, [](ReplayOptions& o) { o.interleave = 4; });
  for (std::size_t i = 0; i < interleaved.policies.size(); ++i) {
    const PolicyResult& a = plain.policies[i];
    const PolicyResult& b = interleaved.policies[i];
    CAPTURE(policy_name(b.policy));
    CHECK(b.runnable);
    if (b.policy == Policy::bamboo) {
      // Bamboo plans pipelines without interleaving.
      CHECK(b.samples == a.samples);
      CHECK(b.time.training_ms == a.time.training_ms);
    } else if (b.policy != Policy::oobleck) {
      // Restarts and rollbacks alike train on faster plans. (Oobleck's
      // fall-back to the disk checkpoint can lose: fewer, deeper pipelines
      // go past f more often.)
      CHECK(b.samples_per_s > a.samples_per_s);
    }
  }
}

TEST_CASE("replay: pipelines sharing nodes: the books add up, deterministic, faster for the policies that plan them, Bamboo's unchanged") {
  // GPT-3 1.3B on the p3 trace's H100 nodes, B = 512: a pipeline on part of
  // a node trains faster than whole-node ones (shorter fill and drain).
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 512;
  const auto [whole, sharing] =
      replay_p3_before_and_after(load_profile(kRoot / "profiles/gpt3-1.3b-h100.analytic.json"), options,
                                 [](ReplayOptions& o) { o.pipelines_per_node = 0; });  // every divisor of G, the fastest kept
  for (std::size_t i = 0; i < sharing.policies.size(); ++i) {
    const PolicyResult& a = whole.policies[i];
    const PolicyResult& b = sharing.policies[i];
    CAPTURE(policy_name(b.policy));
    CHECK(b.runnable);
    if (b.policy == Policy::bamboo) {
      CHECK(b.samples == a.samples);  // Bamboo's pipelines stay on whole nodes
      CHECK(b.time.training_ms == a.time.training_ms);
    } else {
      CHECK(b.samples_per_s > 1.1 * a.samples_per_s);
    }
  }
}

TEST_CASE("replay: interleaving or sharing nodes mitigates stragglers by keeping or dropping slow nodes, never by "
          "splits at node speeds") {
  // node3 at 0.1 of its speed for two hours: worth dropping.
  const Trace trace = trace_of(start_with(8) + "7200000,slow,node3,0.1\n14400000,slow,node3,1\n21600000,add,node99\n");
  for (const auto& [interleave, pipelines_per_node] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const int devices_interleave = interleave;  // (clang 14's lambdas capture no structured binding)
    CAPTURE(devices_interleave);
    ReplayOptions options;
    options.fault_tolerance = 1;
    options.global_microbatches = 16;
    options.interleave = interleave;
    options.pipelines_per_node = pipelines_per_node;
    options.record_decisions = true;
    const ReplayResult result = replay(gpt3_1_3b(), trace, options);
    check_books(result);
    int mitigating = 0;
    for (const auto& p : result.policies) {
      if (p.stragglers != StragglerHandling::mitigate) continue;
      ++mitigating;
      int drops = 0;
      for (const auto& line : p.decisions) {
        CAPTURE(line);
        const auto d = nlohmann::json::parse(line);
        if (d["kind"] != "speeds") continue;
        CHECK(d["resplit_ms"] == d["keep_ms"]);  // neither split nor placed at node speeds
        CHECK(d["replan_ms"] == d["keep_ms"]);
        CHECK(d["chosen"] != "resplit");
        CHECK(d["chosen"] != "replan");
        drops += d["chosen"] == "drop";
      }
      CHECK(drops >= 1);  // at 0.1, node3 is worth dropping
    }
    CHECK(mitigating == 2);  // oobleck and oobleck-snapshots
  }
}

TEST_CASE("replay: same inputs, byte-identical outputs, in parallel or not") {
  const Trace trace = load_trace((kRoot / "traces/p3-trace.csv").string());
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 64;
  const ReplayResult a = replay(gpt3_1_3b(), trace, options);
  options.parallel = false;
  const ReplayResult b = replay(gpt3_1_3b(), trace, options);
  CHECK(replay_to_json(a) == replay_to_json(b));
  CHECK(timeline_csv(a) == timeline_csv(b));
  CHECK(timeline_svg(a, "t") == timeline_svg(b, "t"));
}

TEST_CASE("replay: without failures, training is everything after the first start") {
  // 8 nodes for 10 hours; the trace ends with a node joining at 10 h, too
  // late to be used.
  const Trace trace = trace_of(start_with(8) + "36000000,add,node9\n");
  Scenario scenario;
  scenario.overrides.iteration_ms = 1000;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
  const Cluster c;
  for (const auto& p : result.policies) {
    CAPTURE(policy_name(p.policy));
    CHECK(p.failures == 0);
    CHECK(p.unrecoverable == 0);
    CHECK(p.restarts == 1);
    CHECK(p.time.restart_ms == doctest::Approx(c.restart_ms + c.communicator_ms));
    CHECK(p.checkpoint_interval_iterations == 0);  // no losses in the trace: no checkpoints
    if (p.policy == Policy::inmemory) continue;  // pays its host copy every iteration
    const double iterations = std::floor((36e6 - c.restart_ms - c.communicator_ms) / 1000.0);
    CHECK(p.samples == iterations * 16 * gpt3_1_3b().microbatch_size);
    CHECK(p.time.training_ms == doctest::Approx(iterations * 1000.0));
  }
}

TEST_CASE("replay: one loss - oobleck reconfigures, checkpoint-restart rolls back") {
  // 8 nodes; node3 fails at 2 h; the trace ends at 4 h.
  const Trace trace = trace_of(start_with(8) + "7200000,remove,node3\n14400000,add,node99\n");
  Scenario scenario;
  scenario.overrides.iteration_ms = 1000;
  scenario.overrides.checkpoint_interval_iterations = 1000;  // every 1000 s of training
  scenario.overrides.checkpoint_save_ms = 10'000;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
  check_books(result);
  const Cluster c;
  const auto& oobleck = result.policies[0];
  const auto& checkpoint = result.policies[1];
  REQUIRE(oobleck.policy == Policy::oobleck);
  REQUIRE(checkpoint.policy == Policy::checkpoint);
  CHECK(oobleck.failures == 1);
  CHECK(oobleck.reconfigurations == 1);
  CHECK(oobleck.restarts == 1);
  CHECK(oobleck.unrecoverable == 0);
  // Downtime: detection, state copies (none: every layer still has its
  // replica on the same... copies at link speed), communicators.
  CHECK(oobleck.time.reconfiguration_ms >= c.detection_ms + c.communicator_ms);
  CHECK(checkpoint.failures == 1);
  CHECK(checkpoint.restarts == 2);
  CHECK(checkpoint.time.restart_ms ==
        doctest::Approx(2 * (c.restart_ms + c.communicator_ms) + c.detection_ms + 10'000 /* load */));
  // Start at 95 s; cycles of 1000 iterations + 10 s save: 6 done by 2 h, the
  // failure at 7200 s hits 1 s into... everything since the last save is lost.
  const double first_start = (c.restart_ms + c.communicator_ms) / 1000.0;
  const double cycle = 1000 + 10;
  const double since_save = std::fmod(7200 - first_start, cycle);
  CHECK(checkpoint.time.lost_work_ms == doctest::Approx(since_save * 1000.0));
  // Oobleck loses only the iteration in flight.
  CHECK(oobleck.time.lost_work_ms < 1000);
  CHECK(oobleck.samples > checkpoint.samples);
}

TEST_CASE("replay: oobleck falls back to the checkpoint when the planner finds no plan") {
  // All but one node lost at once: no template runs on one node of a model
  // that needs... one node may hold the 1.3B model, so lose all of them and
  // bring one back.
  const Trace trace = trace_of(start_with(4) + "3600000,remove,node1\n3600000,remove,node2\n3600000,remove,node3\n"
                                               "3600000,remove,node4\n5400000,add,node5\n7200000,add,node6\n");
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  options.policies = {Policy::oobleck};
  Scenario scenario;
  scenario.overrides.checkpoint_interval_iterations = 100;
  const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
  check_books(result);
  const auto& p = result.policies[0];
  CHECK(p.unrecoverable == 1);
  CHECK(p.failures == 4);
  CHECK(p.time.waiting_ms >= 1800e3);  // no node from 1 h to 1.5 h
  CHECK(p.restarts == 2);
}

TEST_CASE("replay: bamboo survives isolated losses, not neighbouring ones") {
  Scenario scenario;
  scenario.overrides.iteration_ms = 1000;
  scenario.overrides.checkpoint_interval_iterations = 500;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  options.policies = {Policy::bamboo};
  SUBCASE("two neighbours of one pipeline") {
    // Pipelines take nodes in order of arrival: node1 and node2 are neighbours.
    const Trace trace = trace_of(start_with(8) + "3600000,remove,node1\n3600000,remove,node2\n7200000,add,node9\n");
    const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
    check_books(result);
    const auto& p = result.policies[0];
    REQUIRE(p.runnable);
    CHECK(p.unrecoverable == 1);
    CHECK(p.failures == 2);
    CHECK(p.restarts == 2);
  }
  SUBCASE("one loss fails over without a restart") {
    const Trace trace = trace_of(start_with(8) + "3600000,remove,node2\n7200000,add,node9\n");
    const ReplayResult result = replay(gpt3_1_3b(), trace, options, scenario);
    check_books(result);
    const auto& p = result.policies[0];
    CHECK(p.unrecoverable == 0);
    CHECK(p.restarts == 1);
    CHECK(p.reconfigurations >= 1);
  }
}

TEST_CASE("replay: bamboo says why it cannot run when the redundant layers do not fit") {
  // One GPU per node with room for one layer's state, not two: every
  // template fits, none with a neighbour's layers as well.
  Profile tight = gpt3_1_3b();
  LayerProfile layer = tight.layers[1];
  layer.param_bytes = Bytes{5} << 29;       // 2.5 GiB
  layer.optimizer_bytes = Bytes{15} << 29;  // 7.5 GiB
  layer.activation_bytes = layer.output_bytes = Bytes{1} << 20;
  layer.tensor_parallel.clear();
  tight.layers.assign(8, layer);
  tight.hardware.gpus_per_node = 1;
  tight.hardware.gpu_memory_bytes = Bytes{15} << 30;
  const Trace trace = trace_of(start_with(8) + "3600000,remove,node2\n");
  ReplayOptions options;
  options.fault_tolerance = 0;
  options.global_microbatches = 16;
  options.policies = {Policy::bamboo, Policy::oobleck};
  const ReplayResult result = replay(tight, trace, options);
  CHECK_FALSE(result.policies[0].runnable);
  CHECK(result.policies[0].reason.find("does not fit") != std::string::npos);
  CHECK(result.policies[0].time.total_ms() == doctest::Approx(result.duration_ms));
  CHECK(result.policies[1].runnable);
  const auto json = nlohmann::json::parse(replay_to_json(result));
  CHECK(json["policies"]["bamboo"]["runnable"] == false);
  CHECK(summary_table(result).find("cannot run") != std::string::npos);
}

TEST_CASE("replay: scenario files") {
  const Scenario s = parse_scenario(R"({"format": "oobleck.scenario.v1",
    "cluster": {"storage_bytes_per_s": 5e9, "detection_ms": 30000},
    "overrides": {"checkpoint_interval_iterations": 40, "iteration_ms": 2500}})",
                                    "s.json");
  CHECK(s.cluster.storage_bytes_per_s == 5e9);
  CHECK(s.cluster.detection_ms == 30000);
  CHECK(s.cluster.restart_ms == Cluster{}.restart_ms);
  CHECK(s.overrides.checkpoint_interval_iterations == 40);
  CHECK(s.overrides.iteration_ms == 2500);
  CHECK_FALSE(s.overrides.checkpoint_save_ms);

  const auto message = [](const std::string& text) { return scenario_error(text, "bad.json"); };
  CHECK(message(R"({"cluster": {"detection": 3}})").find("bad.json: cluster.detection: unknown field") == 0);
  CHECK(message(R"({"cluster": {"detection_ms": "3"}})").find("bad.json: cluster.detection_ms: expected a number") == 0);
  CHECK(message(R"({"cluster": {"storage_bytes_per_s": 0}})").find("expected a positive number") != std::string::npos);
  CHECK(message(R"({"overrides": {"checkpoint_interval_iterations": 1.5}})").find("non-negative integer") !=
        std::string::npos);
  CHECK(message("{\n  \"cluster\": {,\n}").find("bad.json:2:") == 0);
  CHECK(message(R"({"clusters": {}})").find("bad.json: clusters: unknown field") == 0);
  CHECK(message(R"([1])").find("expected an object") != std::string::npos);
  CHECK(message(R"({"format": "v0"})").find("format") != std::string::npos);
}

TEST_CASE("replay: policy lists") {
  CHECK(parse_policies("all").size() == 5);
  CHECK(parse_policies("all").back() == Policy::oobleck_snapshots);
  CHECK(parse_policies("oobleck-snapshots,oobleck") == std::vector<Policy>{Policy::oobleck_snapshots, Policy::oobleck});
  CHECK(policy_name(Policy::oobleck_snapshots) == "oobleck-snapshots");
  CHECK(parse_policies("bamboo,oobleck") == std::vector<Policy>{Policy::bamboo, Policy::oobleck});
  CHECK_THROWS_AS((void)parse_policies("oobleck,varuna"), InputError);
  CHECK_THROWS_AS((void)parse_policies(""), InputError);
}

namespace {

// Small numbers that make the books easy to follow: 1 s iterations, no
// detection delay, 10 s restarts, 1 s communicators, 0.3 s checkpoints.
Scenario quick_scenario(int checkpoint_every) {
  Scenario s;
  s.cluster.detection_ms = 0;
  s.cluster.restart_ms = 10'000;
  s.cluster.communicator_ms = 1'000;
  s.overrides.iteration_ms = 1000;
  s.overrides.checkpoint_interval_iterations = checkpoint_every;
  s.overrides.checkpoint_save_ms = 300;
  s.overrides.checkpoint_load_ms = 0;
  s.overrides.oobleck_copy_ms = 0;
  s.overrides.inmemory_save_ms = 0;
  s.overrides.inmemory_restore_ms = 0;
  s.overrides.bamboo_failover_ms = 0;
  return s;
}

const PolicyResult& only(const ReplayResult& r) {
  REQUIRE(r.policies.size() == 1);
  return r.policies.front();
}

ReplayResult replay_one(Policy policy, const std::string& csv, const Scenario& scenario, int B = 8) {
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = B;
  options.policies = {policy};
  const ReplayResult result = replay(gpt3_1_3b(), trace_of(csv), options, scenario);
  check_books(result);
  return result;
}

}  // namespace

TEST_CASE("replay: a node that leaves and returns in one millisecond is a loss and an arrival") {
  const std::string csv = "0,add,a\n0,add,b\n0,add,c\n0,add,d\n30500,remove,a\n30500,add,a\n60000,add,x\n";
  for (Policy policy : kAllPolicies) {
    CAPTURE(policy_name(policy));
    const auto r = replay_one(policy, csv, quick_scenario(10));
    CHECK(only(r).failures == 1);
  }
  CHECK(only(replay_one(Policy::oobleck, csv, quick_scenario(10))).reconfigurations >= 1);
}

TEST_CASE("replay: arrivals during a checkpoint save join when it ends") {
  // A checkpoint after every iteration: node e arrives during a save.
  const std::string csv = "0,add,a\n0,add,b\n0,add,c\n0,add,d\n50000,remove,b\n100200,add,e\n130000,add,f\n"
                          "130000,remove,f\n";
  const auto r = replay_one(Policy::oobleck, csv, quick_scenario(1));
  const auto& p = only(r);
  CHECK(p.reconfigurations == 2);  // the loss of b, then e joining
  CHECK(p.timeline.back().pipelines == 4);
  // The save runs from 100.1 s to 100.4 s; then e joins: 1 s of
  // communicators, no training counted meanwhile.
  bool joined = false;
  for (const auto& t : p.timeline) MESSAGE(t.time_ms << " " << t.pipelines << " " << t.nodes);
  MESSAGE(p.kept_microbatches);
  for (std::size_t i = 0; i + 1 < p.timeline.size(); ++i) {
    if (p.timeline[i].time_ms == doctest::Approx(100400) && p.timeline[i].pipelines == 0) {
      joined = true;
      CHECK(p.timeline[i + 1].time_ms == doctest::Approx(101400));
      CHECK(p.timeline[i + 1].pipelines == 4);
    }
  }
  CHECK(joined);
}

TEST_CASE("replay: bamboo does not train while it takes in a new node") {
  // x arrives just before a save: the replacement (1 s of communicators and
  // a copy of the lost node's layers) must not overlap training.
  const std::string csv = "0,add,a\n0,add,b\n0,add,c\n0,add,d\n30500,remove,b\n40000,add,x\n60000,add,y\n";
  const auto r = replay_one(Policy::bamboo, csv, quick_scenario(10));
  const auto& p = only(r);
  REQUIRE(p.runnable);
  // The first stop after x arrives is the replacement.
  std::size_t i = 0;
  while (i + 1 < p.timeline.size() && !(p.timeline[i].time_ms >= 40000 && p.timeline[i].pipelines == 0)) ++i;
  REQUIRE(i + 1 < p.timeline.size());
  CHECK(p.timeline[i + 1].time_ms - p.timeline[i].time_ms >= 1000 - 1e-6);
  CHECK(p.reconfigurations == 2);
}

TEST_CASE("replay: in-memory copies are lost when a node and its peer fail before training resumes") {
  // a holds b's... node i's copy is on node i+1: a's copy is on b. Both go
  // within the 11 s restart, so the state comes from the persisted copy.
  const auto apart = replay_one(Policy::inmemory,
                                "0,add,a\n0,add,b\n0,add,c\n0,add,d\n50000,remove,a\n55000,remove,b\n100000,add,e\n",
                                quick_scenario(1));
  CHECK(only(apart).unrecoverable == 1);
  const auto together = replay_one(
      Policy::inmemory, "0,add,a\n0,add,b\n0,add,c\n0,add,d\n50000,remove,a\n50000,remove,b\n100000,add,e\n",
      quick_scenario(1));
  CHECK(only(together).unrecoverable == 1);
  const auto far = replay_one(Policy::inmemory,
                              "0,add,a\n0,add,b\n0,add,c\n0,add,d\n50000,remove,a\n80000,remove,b\n100000,add,e\n",
                              quick_scenario(1));
  CHECK(only(far).unrecoverable == 0);
}

TEST_CASE("replay: checkpoint-restart grows even when the trace loses no node") {
  const Scenario scenario;  // simulated iteration times: more nodes train faster
  const auto r = replay_one(Policy::checkpoint, "0,add,a\n0,add,b\n3600000,add,c\n3600000,add,d\n36000000,add,e\n",
                            scenario, 16);
  const auto& p = only(r);
  CHECK(p.checkpoint_interval_iterations == 0);
  CHECK(p.restarts == 2);
  CHECK(p.timeline.back().pipelines == 4);
}

TEST_CASE("replay: oobleck says why when f cannot be met even at the peak") {
  // 2 nodes of a model whose smallest pipeline... f = 1 needs 2 pipelines but
  // the batch has only one microbatch: oobleck cannot run; the others can.
  ReplayOptions options;
  options.fault_tolerance = 3;
  options.global_microbatches = 16;
  Profile big = gpt3_1_3b();
  const ReplayResult r = replay(big, trace_of(start_with(2) + "3600000,remove,node1\n"), options);
  CHECK_FALSE(r.policies[0].runnable);
  CHECK(r.policies[0].reason.find("f = 3") != std::string::npos);
  CHECK(r.policies[1].runnable);
  check_books(r);
}

TEST_CASE("replay: scenario values that would make times infinite are refused") {
  const auto message = [](const std::string& text) { return scenario_error(text, "s.json"); };
  CHECK(message(R"({"cluster": {"detection_ms": 1e400}})").find("s.json") == 0);
  CHECK(message(R"({"cluster": {"storage_bytes_per_s": 1e-300}})").find("at least 1 byte/s") != std::string::npos);
  CHECK(message(R"({"cluster": {"restart_ms": 1e20}})").find("at most 1e12 ms") != std::string::npos);
  CHECK(message(R"({"overrides": {"iteration_ms": 1e-12}})").find("at least 0.001 ms") != std::string::npos);
  CHECK(message(R"({"overrides": {"bamboo_slowdown": 1e9}})").find("at most 1e6") != std::string::npos);
}

TEST_CASE("replay: traces longer than two years are refused, not ground through") {
  ReplayOptions options;
  options.global_microbatches = 8;
  const Trace trace = trace_of(start_with(2) + "100000000000000,remove,node1\n");
  CHECK_THROWS_WITH_AS((void)replay(gpt3_1_3b(), trace, options), doctest::Contains("at most two years"), InputError);
}

TEST_CASE("replay: oobleck's decisions, a loss during a recovery planned from the last ready plan") {
  // node3 fails at 2 h; node5 fails 2 s later, while the recovery (10 s of
  // detection, copies, 5 s of communicators) is under way, or an hour
  // later; node99 joins at 3.5 h.
  auto decisions = [](Milliseconds second_loss_ms) {
    const Trace trace = trace_of(start_with(8) + "7200000,remove,node3\n" + std::to_string(second_loss_ms) +
                                 ",remove,node5\n12600000,add,node99\n14400000,remove,node1\n");
    ReplayOptions options;
    options.fault_tolerance = 1;
    options.global_microbatches = 16;
    options.policies = {Policy::oobleck};
    options.record_decisions = true;
    const ReplayResult result = replay(gpt3_1_3b(), trace, options);
    check_books(result);
    const auto& p = result.policies[0];
    std::vector<nlohmann::json> records;
    for (const auto& line : p.decisions) records.push_back(nlohmann::json::parse(line));
    REQUIRE(records.size() == static_cast<std::size_t>(p.restarts + p.reconfigurations));
    CHECK(decisions_jsonl(result).size() > 0);
    for (std::size_t i = 0; i < records.size(); ++i) {
      CHECK(records[i]["kind"] == "generation");
      CHECK(records[i]["generation"] == static_cast<int>(i) + 1);
      if (i > 0) CHECK(records[i]["at_ms"] >= records[i - 1]["at_ms"]);
    }
    return records;
  };
  const auto during = decisions(7202000);
  REQUIRE(during.size() == 5);  // start, loss, loss during its recovery, join, loss
  CHECK(during[0]["cause"] == "start");
  CHECK(during[1]["lost"] == nlohmann::json{"node3"});
  CHECK(during[2]["lost"] == (nlohmann::json{"node3", "node5"}));  // both, from the plan before the first loss
  CHECK(during[2]["source"] == "replicas");
  CHECK(during[3]["cause"] == "join");
  CHECK(during[3]["added"] == nlohmann::json{"node99"});
  const auto after = decisions(7200000 + 3600000);
  REQUIRE(after.size() == 5);
  CHECK(after[2]["lost"] == nlohmann::json{"node5"});  // the first recovery was ready: its plan is the base
}

namespace {

// A count series of N nodes, then 1, then N again, replayed with `policies`
// beside the same with 1,000 nodes. No plan takes more than B pipelines of
// the largest template, so beyond that the nodes wait as spares: the
// policies do what they do on 1,000 nodes, and only the node counts differ.
void check_replays_as_1000_nodes(int nodes, const std::vector<Policy>& policies) {
  const auto series = [](int n_nodes) {
    const std::string n = std::to_string(n_nodes);
    return parse_count_series("2021-12-10, 00:00:00, " + n + "\n2021-12-10, 01:00:00, 1\n2021-12-10, 02:00:00, " + n,
                              std::to_string(n_nodes) + " nodes");
  };
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 8;
  options.policies = policies;
  const Trace big = series(nodes);
  REQUIRE(big.events.size() == 3 * static_cast<std::size_t>(nodes) - 2);
  const ReplayResult many = replay(gpt3_1_3b(), big, options);
  const ReplayResult few = replay(gpt3_1_3b(), series(1'000), options);
  check_books(many);
  REQUIRE(many.policies.size() == few.policies.size());
  for (std::size_t i = 0; i < many.policies.size(); ++i) {
    const PolicyResult &m = many.policies[i], &f = few.policies[i];
    CAPTURE(policy_name(m.policy));
    CHECK(m.samples == f.samples);
    CHECK(m.time.training_ms == f.time.training_ms);
    CHECK(m.time.lost_work_ms == f.time.lost_work_ms);
    CHECK(m.failures == f.failures);
    CHECK(m.restarts == f.restarts);
    CHECK(m.failures > 0);
    REQUIRE(m.timeline.size() == f.timeline.size());
    std::vector<int> counts;
    for (const auto& point : m.timeline) counts.push_back(point.nodes);
    CHECK(std::find(counts.begin(), counts.end(), 1) != counts.end());
    CHECK(*std::max_element(counts.begin(), counts.end()) == nodes);
  }
}

}  // namespace

TEST_CASE("replay: a count trace of 200,000 nodes replays as one of 1,000, whose plans are the same") {
  check_replays_as_1000_nodes(200'000, {Policy::checkpoint, Policy::inmemory, Policy::bamboo});
}

TEST_CASE("replay: oobleck's policies replay a count trace of 20,000 nodes as one of 1,000") {
  check_replays_as_1000_nodes(20'000, {Policy::oobleck, Policy::oobleck_snapshots});
}
