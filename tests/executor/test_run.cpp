// oobleck-run end to end: two pipelines of different sizes as separate
// processes train exactly what one process trains.
#include "torch_doctest.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "scratch.h"

namespace {

const std::string kSource = OOBLECK_SOURCE_DIR;

std::vector<double> losses(const std::string& jsonl) {
  std::vector<double> out;
  std::stringstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("run: pipelines of 3 and 2 nodes train what one process trains") {
  oobleck::test::Scratch s(OOBLECK_RUN_BINARY);
  // CPU-like nodes, one worker each, with too little memory for the whole
  // model on one node: the planner makes pipelines of 3 and 2 nodes.
  s.write("hw.json", R"({"name": "test nodes", "gpus_per_node": 1, "gpu_memory_bytes": 4e6,
    "peak_fp32_flops_per_s": 1e11, "memory_bytes_per_s": 2e10, "intra_node_bytes_per_s": 2e9,
    "inter_node_bytes_per_s": 2e9, "latency_ms": 0.05})");
  REQUIRE(s.run_program(OOBLECK_PROFILE_BINARY, "analytic --model gpt-tiny --hardware " + s.str("hw.json") +
                                                    " --microbatch-size 2 --seq-len 32 --dtype fp32 --out " +
                                                    s.str("profile.json"))
              .status == 0);
  REQUIRE(s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + s.str("profile.json") +
                                                 " --nodes 5 --fault-tolerance 1 --global-microbatches 8 --json " +
                                                 s.str("plan.json"))
              .status == 0);
  const auto plan = nlohmann::json::parse(s.read("plan.json"));
  REQUIRE(plan["pipelines"].size() == 2);
  std::multiset<std::size_t> sizes = {plan["pipelines"][0]["nodes"].size(), plan["pipelines"][1]["nodes"].size()};
  REQUIRE(sizes == std::multiset<std::size_t>{2, 3});

  REQUIRE(s.run("tokenize --text " + kSource + "/executor/data/corpus.txt --out " + s.str("tokens.bin")).status == 0);
  const std::string common = " --plan " + s.str("plan.json") + " --profile " + s.str("profile.json") + " --data " +
                             s.str("tokens.bin") + " --steps 12 --seed 3";
  const auto live = s.run(common + " --metrics " + s.str("live.jsonl"));
  REQUIRE(live.status == 0);
  const auto single = s.run(common + " --single-process --metrics " + s.str("single.jsonl"));
  REQUIRE(single.status == 0);
  const auto a = losses(s.read("live.jsonl")), b = losses(s.read("single.jsonl"));
  REQUIRE(a.size() == 12);
  REQUIRE(b.size() == 12);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(a[i] - b[i]) <= 1e-4 * std::abs(b[i]));
  }
  CHECK(a.back() < a.front() - 1.0);  // it learns
  // Every worker is gone.
  CHECK(s.run_program("pgrep", "-f 'oobleck-run [w]orker'").status == 1);
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
}

TEST_CASE("run: when the master dies, its workers go too") {
  oobleck::test::Scratch s(OOBLECK_RUN_BINARY);
  REQUIRE(s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + kSource +
                                                 "/profiles/gpt-mini-cpu.measured.json --nodes 2 --fault-tolerance 1 "
                                                 "--global-microbatches 2 --json " + s.str("plan.json"))
              .status == 0);
  REQUIRE(s.run("tokenize --text " + kSource + "/executor/data/corpus.txt --out " + s.str("tokens.bin")).status == 0);
  // Start a long run, wait (bounded) until its workers are up, kill the
  // master with SIGKILL (no clean-up of its own), then every worker must be
  // gone within the bound.
  // The master's children are the agents; theirs, the workers.
  const std::string script =
      std::string(OOBLECK_RUN_BINARY) + " --plan " + s.str("plan.json") + " --profile " + kSource +
      "/profiles/gpt-mini-cpu.measured.json --data " + s.str("tokens.bin") + " --steps 100000 >/dev/null 2>&1 & "
      "master=$!; "
      "workers() { for a in $(pgrep -P $master); do pgrep -P $a; done; }; "
      "for i in $(seq 600); do [ $(workers | wc -l) -ge 2 ] && break; sleep 0.1; done; "
      "found=$(workers | tr '\\n' ' '); "
      "[ $(echo $found | wc -w) -ge 2 ] || { kill -9 $master; exit 3; }; "
      "kill -9 $master; "
      "for i in $(seq 600); do alive=0; for w in $found; do kill -0 $w 2>/dev/null && alive=1; done; "
      "[ $alive = 0 ] && exit 0; sleep 0.1; done; exit 4";
  s.write("kill.sh", script);
  const auto r = s.run_program("bash", s.str("kill.sh"));
  CHECK(r.status == 0);
}
