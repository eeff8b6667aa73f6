// Activation recomputation in live runs: a stage the plan makes recompute
// keeps only its layers' inputs in the forward and runs each layer's
// forward again in the backward. The same operations on the same inputs,
// so the losses are bit for bit those of the same plan without it.
#include "torch_doctest.h"

#include <nlohmann/json.hpp>

#include "live_setup.h"

namespace {

using nlohmann::json;
using oobleck::test::LiveSetup;

std::vector<double> losses(const std::vector<json>& steps) {
  std::vector<double> out;
  for (const auto& s : steps) out.push_back(s["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("recompute: stages that recompute train the single process's losses bit for bit, beside ones that do not") {
  LiveSetup setup(4, 1, 8);
  auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 2);
  for (const auto& p : plan["pipelines"]) REQUIRE(p["stages"].size() == 2);
  // The first stage of one pipeline and the last of the other: gradients
  // leave a recomputing stage, and the loss is recomputed in one.
  plan["pipelines"][0]["stages"][0]["recompute"] = "full";
  plan["pipelines"][1]["stages"][1]["recompute"] = "full";
  setup.s.write("plan.json", plan.dump());
  const auto run = setup.live(8, 3, "live.jsonl");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const auto steps = setup.steps("live.jsonl");
  const auto reference = setup.reference_losses(8, 3);
  REQUIRE(steps.size() == reference.size());
  CHECK(losses(steps) == reference);  // bit for bit
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("recompute: a plan from oobleck-plan --recompute full trains, and a node lost copies its layers") {
  LiveSetup setup(4, 1, 8);
  const std::string bin = std::filesystem::path(OOBLECK_RUN_BINARY).parent_path().string();
  REQUIRE(setup.s.run_program(bin + "/oobleck-plan", "instantiate --profile " + setup.s.str("profile.json") +
                                                         " --nodes 4 --fault-tolerance 1 --global-microbatches 8 "
                                                         "--recompute full --json " + setup.s.str("plan.json"))
              .status == 0);
  const json plan = setup.plan();
  CHECK(plan["recompute"] == "full");
  for (const auto& p : plan["pipelines"]) {
    for (const auto& st : p["stages"]) CHECK(st["recompute"] == "full");
  }
  setup.s.write("inject.csv", "step:3,remove,node1\n");
  const auto run = setup.live(6, 3, "live.jsonl", "--inject " + setup.s.str("inject.csv") +
                                                      " --heartbeat-timeout-ms 5000");
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(losses(setup.steps("live.jsonl")) == setup.reference_losses(6, 3));
  CHECK(setup.reconfigurations("live.jsonl").size() == 1);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("recompute: a degree-2 stage recomputing (its all-reduces again) trains what the same plan trains without") {
  LiveSetup setup(3, 1, 12, 2);
  auto plan = setup.plan();
  plan["pipelines"] = oobleck::test::tensor_parallel_pipelines();
  setup.s.write("plan.json", plan.dump());
  REQUIRE(setup.live(6, 3, "plain.jsonl", "--learning-rate 1e-3").status == 0);
  plan["pipelines"][0]["stages"][0]["recompute"] = "full";
  plan["pipelines"][0]["stages"][2]["recompute"] = "full";
  plan["pipelines"][1]["stages"][0]["recompute"] = "full";
  setup.s.write("plan.json", plan.dump());
  const auto run = setup.live(6, 3, "recomputed.jsonl", "--learning-rate 1e-3");
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(losses(setup.steps("recomputed.jsonl")) == losses(setup.steps("plain.jsonl")));  // bit for bit
  CHECK(setup.s.processes_left() == 0);
}
