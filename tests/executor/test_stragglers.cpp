// A slow node live: its agent throttles its worker's CPU (--inject
// ...,slow,node1,0.25), the master's detector flags it from measured compute
// times alone, the controller re-splits the batch so that its pipeline
// trains fewer microbatches, and once the slowdown ends the node gets its
// full share back. The losses stay the single-process run's, bit for bit:
// a re-split changes only which pipeline trains which microbatch.
//
// What the step times come to under each choice is a benchmark's to
// measure (tools/bench-stragglers.sh); this test asserts the decisions and
// the losses. The slowdown is large (0.25 against a threshold of 0.6), so
// that the detector's outcome does not hinge on this machine's noise: the
// agent stops and continues its worker in turn, and on a machine whose
// cores the nodes share, 0.4 of the wall time measured as little as 0.6 of
// the others' speed.
#include <doctest/doctest.h>

#include "live_setup.h"

namespace {

using nlohmann::json;
using oobleck::test::LiveSetup;

// GPT-mini on three one-node pipelines (the model fits one node), 2
// microbatches of 4 samples each.
std::string one_node_pipelines(int fault_tolerance) {
  return "--nodes 3 --fault-tolerance " + std::to_string(fault_tolerance) +
         " --global-microbatches 6 --memory-mb 400 --repeats 1";
}

// The run's step records, each checked: the single process's loss, bit for
// bit, and the whole batch trained, each sample once.
std::vector<json> checked_steps(const LiveSetup& setup, int steps, int seed) {
  const auto reference = setup.reference_losses(steps, seed);
  const auto records = setup.steps("live.jsonl");
  REQUIRE(records.size() == static_cast<std::size_t>(steps));
  for (int k = 0; k < steps; ++k) {
    CAPTURE(k);
    CHECK(records[static_cast<std::size_t>(k)]["loss"].get<double>() == reference[static_cast<std::size_t>(k)]);
    CHECK(records[static_cast<std::size_t>(k)]["step_samples"] == 6 * 4);
  }
  return records;
}

// The generations started for node speeds, in order.
std::vector<json> speed_generations(const LiveSetup& setup) {
  std::vector<json> out;
  for (const auto& g : setup.of_kind("live.jsonl", "generation")) {
    if (g["cause"] == "speeds") out.push_back(g);
  }
  return out;
}

}  // namespace

TEST_CASE("stragglers: a node slowed to 0.25 trains fewer microbatches, then its full share again, bit for bit") {
  LiveSetup setup(LiveSetup::SetUp{"mini", one_node_pipelines(2)});
  const auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 3);
  REQUIRE(plan["pipelines"][1]["nodes"] == json::array({"node1"}));
  setup.s.write("inject.csv", "step:3,slow,node1,0.25\nstep:12,slow,node1,1\n");
  const int steps = 26;
  const auto run = setup.live(steps, 3, "live.jsonl",
                              "--inject " + setup.s.str("inject.csv") +
                                  " --stragglers mitigate --straggler-thresholds 0.6,0.75");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const auto records = checked_steps(setup, steps, 3);
  // Every step but a generation's first reports each node's speed and the
  // cost model's prediction at those speeds.
  int measured = 0;
  for (const auto& r : records) {
    if (!r.contains("node_speeds")) continue;
    ++measured;
    CHECK(r["node_speeds"].size() == 3);
    CHECK(r["predicted_ms"].get<double>() > 0);
  }
  CHECK(measured >= steps - 4);

  // Generations for speeds: the first after the slowdown gives node1's
  // pipeline fewer microbatches than the others; the last gives every
  // pipeline its full share.
  const std::vector<json> for_speeds = speed_generations(setup);
  REQUIRE(for_speeds.size() >= 2);
  const auto& first = for_speeds.front();
  CHECK(first["resume_step"].get<int>() > 3);
  CHECK(first["resume_step"].get<int>() <= 12);
  CHECK(first["speed_choice"]["chosen"] == "resplit");
  CHECK(first["speed_choice"]["speeds"]["node1"].get<double>() < 0.6);
  CHECK(first["speed_choice"]["resplit_ms"].get<double>() < first["speed_choice"]["keep_ms"].get<double>());
  CHECK(first["microbatches"][1].get<int>() < first["microbatches"][0].get<int>());
  CHECK(first["microbatches"][1].get<int>() < first["microbatches"][2].get<int>());
  const auto& last = for_speeds.back();
  CHECK(last["resume_step"].get<int>() > 12);
  CHECK(last["microbatches"] == json::array({2, 2, 2}));
  // Each weighing is in the metrics, including those that kept the plan;
  // the last one found every node back at full speed.
  const auto weighed = setup.of_kind("live.jsonl", "speeds");
  CHECK(weighed.size() >= for_speeds.size());
  CHECK(weighed.back()["speeds"].empty());
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("stragglers: a slow node dropped as a spare, taken back after its probation, bit for bit") {
  // Three one-node pipelines, f = 1, so that two are enough: node1 slowed to
  // 0.25 is dropped (its pipeline's microbatches go to the other two, no
  // state moves), sits out a probation of 4 steps as a spare that trains
  // nothing, and is then readmitted as a join: the whole model copied to
  // it from a replica, and every pipeline its full share again.
  LiveSetup setup(LiveSetup::SetUp{"mini", one_node_pipelines(1)});
  const auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 3);
  REQUIRE(plan["pipelines"][1]["nodes"] == json::array({"node1"}));
  setup.s.write("inject.csv", "step:3,slow,node1,0.25\nstep:9,slow,node1,1\n");
  const int steps = 22;
  const auto run = setup.live(steps, 3, "live.jsonl",
                              "--inject " + setup.s.str("inject.csv") +
                                  " --stragglers drop --straggler-thresholds 0.6,0.75 --straggler-probation 4");
  INFO(run.err);
  REQUIRE(run.status == 0);
  (void)checked_steps(setup, steps, 3);
  const std::vector<json> for_speeds = speed_generations(setup);
  REQUIRE(for_speeds.size() == 2);
  const auto& drop = for_speeds[0];
  CHECK(drop["speed_choice"]["chosen"] == "drop");
  CHECK(drop["speed_choice"]["dropped"] == json::array({"node1"}));
  CHECK(drop["speed_choice"]["drop_ms"].get<double>() < drop["speed_choice"]["keep_ms"].get<double>());
  CHECK(drop["pipelines"] == json::array({json::array({"node0"}), json::array({"node2"})}));
  CHECK(drop["microbatches"] == json::array({3, 3}));
  CHECK(drop["spare_nodes"] == json::array({"node1"}));
  CHECK(drop["copy_bytes"] == 0);  // each node of a one-node pipeline holds the whole model
  const auto& readmit = for_speeds[1];
  CHECK(readmit["speed_choice"]["chosen"] == "readmit");
  CHECK(readmit["speed_choice"]["readmitted"] == json::array({"node1"}));
  CHECK(readmit["resume_step"].get<int>() >= drop["resume_step"].get<int>() + 4);  // the probation
  CHECK(readmit["microbatches"] == json::array({2, 2, 2}));
  CHECK(readmit["spare_nodes"].empty());
  CHECK(readmit["copy_bytes"].get<double>() > 0);  // the model, copied back to node1
  CHECK(setup.s.processes_left() == 0);
}
