// oobleck-run end to end: two pipelines of different sizes as separate
// processes train exactly what one process trains.
#include <doctest/doctest.h>

#include <torch/cuda.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "live_setup.h"

using oobleck::test::kSource;

TEST_CASE("run: pipelines of 3 and 2 nodes train what one process trains") {
  oobleck::test::LiveSetup setup(5, 1, 8);
  const auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 2);
  std::multiset<std::size_t> sizes = {plan["pipelines"][0]["nodes"].size(), plan["pipelines"][1]["nodes"].size()};
  REQUIRE(sizes == std::multiset<std::size_t>{2, 3});

  // --deterministic reaches every worker (on the CPU, whose kernels are
  // deterministic already, it changes nothing).
  const auto live = setup.live(12, 3, "live.jsonl", "--deterministic");
  INFO(live.err);
  REQUIRE(live.status == 0);
  const auto steps = setup.steps("live.jsonl");
  oobleck::test::check_losses_equal(steps, setup.reference_losses(12, 3));
  CHECK(steps.back()["loss"].get<double>() < steps.front()["loss"].get<double>() - 1.0);  // it learns
  for (const auto& step : steps) CHECK(step["step_samples"] == 16);  // 8 microbatches of 2, each once
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("run: a Llama-style model trains what one process trains, bit for bit, through a lost and a new node") {
  oobleck::test::LiveSetup setup(6, 2, 12, 1, "llama-tiny");
  REQUIRE(setup.plan()["pipelines"].size() == 3);
  setup.s.write("inject.csv", "step:3,remove,node1\nstep:6,add,node6\n");
  const auto live = setup.live(10, 3, "live.jsonl", "--inject " + setup.s.str("inject.csv") +
                                                        " --heartbeat-timeout-ms 5000");
  INFO(live.err);
  REQUIRE(live.status == 0);
  const auto steps = setup.steps("live.jsonl");
  oobleck::test::check_losses_equal(steps, setup.reference_losses(10, 3), 0.0);
  CHECK(steps.back()["loss"].get<double>() < steps.front()["loss"].get<double>() - 0.5);  // it learns
  for (const auto& step : steps) CHECK(step["step_samples"] == 24);  // 12 microbatches of 2, each once
  CHECK(setup.of_kind("live.jsonl", "generation").size() >= 3);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("run: bad input is refused before any worker starts") {
  oobleck::test::Scratch s(OOBLECK_RUN_BINARY);
  REQUIRE(s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + kSource +
                                                 "/profiles/gpt-mini-cpu.measured.json --nodes 3 --fault-tolerance 0 "
                                                 "--global-microbatches 4 --json " + s.str("plan.json"))
              .status == 0);
  s.write("odd.bin", "abc");
  const auto odd = s.run("--plan " + s.str("plan.json") + " --profile " + kSource +
                         "/profiles/gpt-mini-cpu.measured.json --data " + s.str("odd.bin"));
  CHECK(odd.status == 2);
  CHECK(odd.err.find("odd.bin") != std::string::npos);
  // A plan made from another profile: the layer counts differ.
  const auto other = s.run("--plan " + s.str("plan.json") + " --profile " + kSource +
                           "/profiles/gpt3-1.3b-a100.analytic.json --data " + s.str("odd.bin"));
  CHECK(other.status == 2);
  // A hostfile that does not list the plan's nodes.
  s.write("hosts", "gpu-a slots=1\ngpu-b slots=1\n");
  REQUIRE(s.run("tokenize --text " + kSource + "/executor/data/corpus.txt --out " + s.str("tokens.bin")).status == 0);
  const auto hosts = s.run("--plan " + s.str("plan.json") + " --profile " + kSource +
                           "/profiles/gpt-mini-cpu.measured.json --data " + s.str("tokens.bin") + " --hostfile " +
                           s.str("hosts"));
  CHECK(hosts.status == 2);
  CHECK(hosts.err.find("node0 is not listed") != std::string::npos);
  const auto missing = s.run("--plan " + s.str("plan.json"));
  CHECK(missing.status == 2);
  CHECK(missing.err.find("--profile") != std::string::npos);
  // A GPU where libtorch sees none: refused before any worker starts.
  if (!torch::cuda::is_available()) {
    const auto no_gpu = s.run("--plan " + s.str("plan.json") + " --profile " + kSource +
                              "/profiles/gpt-mini-cpu.measured.json --data " + s.str("tokens.bin") +
                              " --device cuda --steps 2");
    CHECK(no_gpu.status == 2);
    CHECK(no_gpu.err.find("--device cuda") != std::string::npos);
    CHECK(s.processes_left() == 0);
  }
  CHECK(s.run("--plan " + s.str("plan.json") + " --device tpu").status == 2);
}

TEST_CASE("run: when the master dies and none comes back within --master-wait-s, its agents and workers go") {
  oobleck::test::Scratch s(OOBLECK_RUN_BINARY);
  REQUIRE(s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + kSource +
                                                 "/profiles/gpt-mini-cpu.measured.json --nodes 2 --fault-tolerance 1 "
                                                 "--global-microbatches 2 --json " + s.str("plan.json"))
              .status == 0);
  REQUIRE(s.run("tokenize --text " + kSource + "/executor/data/corpus.txt --out " + s.str("tokens.bin")).status == 0);
  // Start a long run, wait (bounded) until it has committed a step, kill
  // the master with SIGKILL (no clean-up of its own), then every agent and
  // worker must be gone within the bound, once the 1 s they wait for a
  // restarted master has passed.
  // The master's children are the agents; theirs, the workers.
  const std::string script =
      std::string(OOBLECK_RUN_BINARY) + " --plan " + s.str("plan.json") + " --profile " + kSource +
      "/profiles/gpt-mini-cpu.measured.json --data " + s.str("tokens.bin") + " --steps 100000 --master-wait-s 1 "
      "--state-dir " + s.str("state") + " --metrics " + s.str("live.jsonl") + " >/dev/null 2>&1 & "
      "master=$!; "
      "for i in $(seq 600); do grep -q '\"kind\":\"step\"' " + s.str("live.jsonl") + " 2>/dev/null && break; "
      "sleep 0.1; done; "
      "agents=$(pgrep -P $master | tr '\n' ' '); "
      "found=\"$agents $(for a in $agents; do pgrep -P $a; done | tr '\n' ' ')\"; "
      "[ $(echo $found | wc -w) -ge 4 ] || { kill -9 $master; exit 3; }; "
      "kill -9 $master; "
      "for i in $(seq 600); do alive=0; for p in $found; do kill -0 $p 2>/dev/null && alive=1; done; "
      "[ $alive = 0 ] && exit 0; sleep 0.1; done; exit 4";
  s.write("kill.sh", script);
  const auto r = s.run_program("bash", s.str("kill.sh"));
  CHECK(r.status == 0);
  CHECK(s.processes_left() == 0);
}
