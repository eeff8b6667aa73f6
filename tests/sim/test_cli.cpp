// oobleck-sim as a user runs it: exit codes, messages, files.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scratch.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kSource = OOBLECK_SOURCE_DIR;
const std::string kSim = OOBLECK_SIM_BINARY;
// oobleck-plan sits beside oobleck-sim.
const std::string kPlan = (fs::path(OOBLECK_SIM_BINARY).parent_path() / "oobleck-plan").string();

using oobleck::test::Run;
using oobleck::test::Scratch;

const std::string kProfile = (kSource / "profiles/gpt3-1.3b-a100.handwritten.json").string();
const std::string kP3 = (kSource / "traces/p3-trace.csv").string();

}  // namespace

TEST_CASE("cli: iteration of a plan from oobleck-plan, with a Chrome trace") {
  Scratch s(kSim);
  REQUIRE(s.run_program(kPlan, "instantiate --profile " + kProfile +
                           " --nodes 6 --fault-tolerance 1 --global-microbatches 32 --json " + s.str("plan.json"))
              .status == 0);
  const Run r = s.run("iteration --plan " + s.str("plan.json") + " --profile " + kProfile + " --json " +
                      s.str("it.json") + " --chrome-trace " + s.str("trace.json"));
  REQUIRE(r.status == 0);
  const json it = json::parse(s.read("it.json"));
  const json plan = json::parse(s.read("plan.json"));
  CHECK(it["format"] == "oobleck.iteration.v1");
  CHECK(it["iteration_ms"].get<double>() > 0);
  CHECK(it["planner_iteration_ms"] == plan["iteration_ms"]);
  for (const auto& stage : it["stages"]) {
    CHECK(stage["busy_ms"].get<double>() + stage["idle_ms"].get<double>() ==
          doctest::Approx(it["iteration_ms"].get<double>()));
  }
  const json trace = json::parse(s.read("trace.json"));
  CHECK(trace["traceEvents"].size() > 10);
  // Byte-identical on a second run.
  const std::string first = s.read("it.json"), first_trace = s.read("trace.json");
  REQUIRE(s.run("iteration --plan " + s.str("plan.json") + " --profile " + kProfile + " --json " + s.str("it.json") +
                " --chrome-trace " + s.str("trace.json"))
              .status == 0);
  CHECK(s.read("it.json") == first);
  CHECK(s.read("trace.json") == first_trace);
  // The human summary.
  const Run human = s.run("iteration --plan " + s.str("plan.json") + " --profile " + kProfile);
  CHECK(human.status == 0);
  CHECK(human.out.find("simulated op by op") != std::string::npos);

  // A distant node: later, never sooner; bad delays named, exit 2.
  const std::string node = plan["pipelines"][0]["nodes"][0].get<std::string>();
  REQUIRE(s.run("iteration --plan " + s.str("plan.json") + " --profile " + kProfile + " --gradient-norm " +
                "--node-delay-ms " + node + "=50 --json " + s.str("far.json"))
              .status == 0);
  CHECK(json::parse(s.read("far.json"))["iteration_ms"].get<double>() >= it["iteration_ms"].get<double>() + 50);
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"nowhere=5", "node nowhere is not in the plan"},
           {node + "=-1", "expected milliseconds from 0"},
           {node + "=x", "expected milliseconds from 0"},
           {node, "expected NODE=MS"},
           {node + "=1 --node-delay-ms " + node + "=2", "given twice"}}) {
    const Run bad = s.run("iteration --plan " + s.str("plan.json") + " --profile " + kProfile + " --node-delay-ms " + flag);
    const std::string& delay_flag = flag;  // (clang 14's lambdas capture no structured binding)
    CAPTURE(delay_flag);
    CHECK(bad.status == 2);
    CHECK(bad.err.find(message) != std::string::npos);
  }
}

TEST_CASE("cli: replay writes JSON, timeline and plot; same inputs give the same bytes") {
  Scratch s(kSim);
  const std::string args = "replay --trace " + kP3 + " --profile " + kProfile +
                           " --fault-tolerance 1 --global-microbatches 64 --policy all";
  const Run r = s.run(args + " --json " + s.str("r.json") + " --timeline " + s.str("t.csv") + " --plot " +
                      s.str("p.svg"));
  REQUIRE(r.status == 0);
  const json doc = json::parse(s.read("r.json"));
  CHECK(doc["format"] == "oobleck.replay.v1");
  const double duration = doc["duration_s"];
  CHECK(duration == doctest::Approx(40920.0));
  for (const char* name : {"oobleck", "checkpoint", "inmemory", "bamboo", "oobleck-snapshots"}) {
    CAPTURE(name);
    const json& p = doc["policies"][name];
    double total = 0;
    for (const char* part : {"training", "reconfiguration", "restart", "checkpoint", "lost_work", "waiting"}) {
      total += p["time_s"][part].get<double>();
    }
    CHECK(total == doctest::Approx(duration).epsilon(1e-9));
    for (const char* field : {"samples", "samples_per_s", "goodput", "failures", "reconfigurations", "restarts",
                              "unrecoverable"}) {
      CHECK(p.contains(field));
    }
  }
  const std::string csv = s.read("t.csv");
  CHECK(csv.rfind("policy,time_s,nodes,pipelines,samples_per_s\n", 0) == 0);
  CHECK(s.read("p.svg").find("<svg") == 0);
  const std::string json_bytes = s.read("r.json");
  REQUIRE(s.run(args + " --json " + s.str("r.json") + " --timeline " + s.str("t.csv")).status == 0);
  CHECK(s.read("r.json") == json_bytes);
  CHECK(s.read("t.csv") == csv);
  // Human summary on stdout without --json.
  const Run human = s.run(args);
  CHECK(human.status == 0);
  CHECK(human.out.find("oobleck") != std::string::npos);
  CHECK(human.out.find("goodput") != std::string::npos);
}

TEST_CASE("cli: replay --policy oobleck-snapshots, alone and in all") {
  Scratch s(kSim);
  const std::string args = "replay --trace " + kP3 + " --profile " + kProfile +
                           " --fault-tolerance 1 --global-microbatches 64";
  const Run one = s.run(args + " --policy oobleck-snapshots --json " + s.str("one.json") + " --decisions " +
                        s.str("d.jsonl"));
  REQUIRE(one.status == 0);
  const json doc = json::parse(s.read("one.json"));
  REQUIRE(doc["policies"].size() == 1);
  const json& p = doc["policies"]["oobleck-snapshots"];
  CHECK(p["runnable"] == true);
  CHECK(p["samples"].get<double>() > 0);
  CHECK(p["snapshot_every_iterations"] == 1);
  CHECK(p["mirror_every_iterations"] == 4);
  for (const char* source : {"memory", "mirror", "checkpoint"}) CHECK(p["rollbacks"].contains(source));
  // Its decisions, one generation record a line.
  std::istringstream lines(s.read("d.jsonl"));
  int generations = 0;
  for (std::string line; std::getline(lines, line); ++generations) CHECK(json::parse(line)["kind"] == "generation");
  CHECK(generations == p["restarts"].get<int>() + p["reconfigurations"].get<int>());

  const Run all = s.run(args + " --policy all");
  REQUIRE(all.status == 0);
  CHECK(all.out.find("\noobleck-snapshots ") != std::string::npos);
  CHECK(all.out.find("oobleck-snapshots: snapshots every 1 iterations, mirrored every 4") != std::string::npos);

  s.write("s.json", R"({"overrides": {"snapshot_every_iterations": 2, "mirror_every_iterations": 5}})");
  const Run bad = s.run(args + " --policy oobleck-snapshots --scenario " + s.str("s.json"));
  CHECK(bad.status == 2);
  CHECK(bad.err.find("s.json: overrides.mirror_every_iterations") != std::string::npos);
  const Run no_decisions = s.run(args + " --policy checkpoint --decisions " + s.str("d2.jsonl"));
  CHECK(no_decisions.status == 2);
  CHECK(no_decisions.err.find("--decisions") != std::string::npos);
}

TEST_CASE("cli: generated traces, seeds and sweeps") {
  Scratch s(kSim);
  REQUIRE(s.run("trace --generate poisson --nodes 16 --failure-rate 0.01 --mttr 2h --duration 3d --seed 5 --out " +
                s.str("g.csv"))
              .status == 0);
  const std::string generated = s.read("g.csv");
  REQUIRE(s.run("trace --generate poisson --nodes 16 --failure-rate 0.01 --mttr 2h --duration 3d --seed 5 --out " +
                s.str("g.csv"))
              .status == 0);
  CHECK(s.read("g.csv") == generated);
  CHECK(s.run("replay --trace " + s.str("g.csv") + " --profile " + kProfile +
              " --fault-tolerance 1 --global-microbatches 32 --json " + s.str("g.json"))
            .status == 0);

  const Run seeds = s.run("replay --generate poisson --nodes 16 --preset llama3-405b --mttr 3h --duration 10d --seeds 4 "
                          "--profile " + kProfile + " --fault-tolerance 1 --global-microbatches 32 --json " +
                          s.str("seeds.json"));
  REQUIRE(seeds.status == 0);
  const json doc = json::parse(s.read("seeds.json"));
  CHECK(doc["seeds"] == 4);
  for (const auto& [name, p] : doc["policies"].items()) {
    const std::string& policy = name;  // (clang 14's lambdas capture no structured binding)
    CAPTURE(policy);
    CHECK(p["samples_per_s"]["p5"].get<double>() <= p["samples_per_s"]["median"].get<double>());
    CHECK(p["samples_per_s"]["median"].get<double>() <= p["samples_per_s"]["p95"].get<double>());
  }

  const Run sweep = s.run("sweep --trace " + kP3 + " --profile " + kProfile +
                          " --global-microbatches 64 --fault-tolerance 0,1,2 --checkpoint-interval auto,100 --json " +
                          s.str("sweep.json"));
  REQUIRE(sweep.status == 0);
  const json sw = json::parse(s.read("sweep.json"));
  CHECK(sw["runs"].size() == 5);
  const int f = sw["recommended"]["fault_tolerance"];
  CHECK((f >= 0 && f <= 2));
  // The recommendation is the best oobleck run.
  double best = 0;
  for (const auto& row : sw["runs"]) {
    if (row["policy"] == "oobleck") best = std::max(best, row["samples_per_s"].get<double>());
  }
  for (const auto& row : sw["runs"]) {
    if (row["policy"] == "oobleck" && row["fault_tolerance"] == f) CHECK(row["samples_per_s"].get<double>() == best);
  }
}

TEST_CASE("cli: bad input gets a clear message, exit 2 and no output file") {
  Scratch s(kSim);
  const std::string tail = " --profile " + kProfile + " --fault-tolerance 1 --global-microbatches 64 --json " +
                           s.str("out.json");
  SUBCASE("missing trace") {
    const Run r = s.run("replay --trace " + s.str("nope.csv") + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("nope.csv") != std::string::npos);
  }
  SUBCASE("malformed trace line") {
    s.write("bad.csv", "0,add,node1\r\n0,add,node2\r\n5,explode,node1\r\n");
    const Run r = s.run("replay --trace " + s.str("bad.csv") + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("bad.csv:3") != std::string::npos);
  }
  SUBCASE("bad scenario") {
    s.write("s.json", R"({"cluster": {"restart_ms": -1}})");
    const Run r = s.run("replay --trace " + kP3 + " --scenario " + s.str("s.json") + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("s.json: cluster.restart_ms") != std::string::npos);
  }
  SUBCASE("unknown policy") {
    const Run r = s.run("replay --trace " + kP3 + " --policy oobleck,varuna" + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("varuna") != std::string::npos);
  }
  SUBCASE("unknown straggler handling") {
    const Run r = s.run("replay --trace " + kP3 + " --stragglers ignore,shoot" + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("--stragglers: unknown handling \"shoot\"") != std::string::npos);
  }
  SUBCASE("bad straggler generation") {
    for (const std::string flags : {" --straggler-preset falcon --stragglers-per-node-hour 0.1",
                                     " --straggler-preset slow", " --stragglers-per-node-hour 0.1 --straggler-factors 0.9,0.5",
                                     " --stragglers-per-node-hour 0.1 --straggler-mean 3w"}) {
      CAPTURE(flags);
      const Run r = s.run("trace --generate poisson --nodes 4 --failure-rate 0.1 --duration 1d" + flags + " --out " +
                          s.str("out.csv"));
      CHECK(r.status == 2);
      CHECK(r.err.find("--straggler") != std::string::npos);
      CHECK_FALSE(fs::exists(s.str("out.csv")));
    }
  }
  SUBCASE("seeds need a generator") {
    const Run r = s.run("replay --trace " + kP3 + " --seeds 3" + tail);
    CHECK(r.status == 2);
    CHECK(r.err.find("--seeds") != std::string::npos);
  }
  SUBCASE("bad duration") {
    const Run r = s.run("trace --generate poisson --nodes 4 --failure-rate 0.1 --duration 3 weeks --out " +
                        s.str("out.json"));
    CHECK(r.status == 2);
  }
  SUBCASE("an output folder that does not exist: nothing is written") {
    const Run r = s.run("replay --trace " + kP3 + " --timeline " + s.str("t.csv") + " --plot " + s.str("p.svg") +
                        " --profile " + kProfile + " --fault-tolerance 1 --global-microbatches 64 --json " +
                        s.str("missing/out.json"));
    CHECK(r.status == 2);
    CHECK(r.err.find("missing") != std::string::npos);
    CHECK_FALSE(fs::exists(s.str("t.csv")));
    CHECK_FALSE(fs::exists(s.str("p.svg")));
  }
  CHECK_FALSE(fs::exists(s.str("out.json")));
}

TEST_CASE("cli: hostile scenarios exit 2 with a short message naming the file and where, and write nothing") {
  Scratch s(kSim);
  const std::string tail =
      " --profile " + kProfile + " --fault-tolerance 1 --global-microbatches 64 --json " + s.str("out.json");
  const std::string megabyte(1 << 20, 'z');
  const auto nested = [](std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  struct Case {
    const char* name;
    std::string text, message;  // the message after the file's path
  };
  const Case cases[] = {
      // The scenario that once overflowed the stack, and one ten times shallower.
      {"deep.json", R"({"cluster": {"detection_ms": )" + nested(100000) + "}}",
       ":1:92: arrays and objects nested deeper than 64 levels; expected at most 64"},
      {"deep10k.json", R"({"cluster": {"detection_ms": )" + nested(10000) + "}}",
       ":1:92: arrays and objects nested deeper than 64 levels; expected at most 64"},
      {"twice.json", "{\"cluster\": {\"detection_ms\": 1,\n \"detection_ms\": 2}}",
       ":2:2: cluster: key \"detection_ms\" appears twice in one object; expected each key once"},
      {"long-value.json", R"({"cluster": {"detection_ms": ")" + megabyte + "\"}}",
       ": cluster.detection_ms: expected a number, got \"zzzz"},
      {"long-key.json", R"({"cluster": {")" + megabyte + "\": 1}}", ": cluster.zzzz"},
      {"wraps.json", R"({"overrides": {"snapshot_every_iterations": 18446744073709551615}})",
       ": overrides.snapshot_every_iterations: expected a non-negative integer of at most 1000000000, got "
       "18446744073709551615"},
      {"infinite.json", R"({"overrides": {"snapshot_stall_ms": -1e999}})",
       ":1:37: overrides.snapshot_stall_ms: expected a number between -1.8e308 and 1.8e308, got -1e999"},
      {"digits.json", R"({"overrides": {"iteration_ms": )" + std::string(400, '9') + "}}",
       ":1:32: overrides.iteration_ms: expected a number between -1.8e308 and 1.8e308, got 9999"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    s.write(c.name, c.text);
    const Run r = s.run("replay --trace " + kP3 + " --scenario " + s.str(c.name) + tail);
    CHECK(r.status == 2);
    CHECK(r.err.rfind("oobleck-sim: error: " + s.str(c.name) + c.message, 0) == 0);
    CHECK(r.err.size() < 400 + s.str(c.name).size());
    CHECK_FALSE(fs::exists(s.path("out.json")));
  }
}

TEST_CASE("cli: replay --recompute: recomputing templates keep f + 1 pipelines where none fit without") {
  Scratch s(kSim);
  // GPT-3 175B needs 6 A100 nodes a pipeline without recomputation and 5 with
  // it: 12 nodes less 2 hold two pipelines only when stages may recompute.
  std::string trace;
  for (int n = 0; n < 12; ++n) trace += "0,add,n" + std::to_string(n) + "\n";
  trace += "3600000,remove,n3\n3600000,remove,n4\n";
  s.write("t.csv", trace);
  const auto pipelines_after_loss = [&](const std::string& recompute) {
    const Run r = s.run("replay --trace " + s.str("t.csv") + " --profile " +
                        (kSource / "profiles/gpt3-175b-a100.analytic.json").string() +
                        " --fault-tolerance 1 --global-microbatches 64 --policy oobleck --recompute " + recompute +
                        " --decisions " + s.str("d.jsonl"));
    REQUIRE(r.status == 0);
    std::istringstream lines(s.read("d.jsonl"));
    json last;
    for (std::string line; std::getline(lines, line);) last = json::parse(line);
    CHECK(last["cause"] == "loss");
    return last["pipelines"].size();
  };
  CHECK(pipelines_after_loss("none") == 1);
  CHECK(pipelines_after_loss("auto") == 2);
  CHECK(pipelines_after_loss("selective") == 2);  // the attention cores alone free enough
  const Run bad = s.run("replay --trace " + s.str("t.csv") + " --profile " + kProfile + " --recompute half");
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--recompute") != std::string::npos);
}

TEST_CASE("cli: replay --gradient-sync: every policy plans and plays its iterations with it") {
  Scratch s(kSim);
  // 512 A100 nodes of GPT-3 1.3B for an hour, one loss: the gradients'
  // all-reduces among hundreds of replicas are much of an iteration.
  std::string trace;
  for (int n = 0; n < 512; ++n) trace += "0,add,n" + std::to_string(n) + "\n";
  trace += "1800000,remove,n7\n3600000,add,n7\n";
  s.write("t.csv", trace);
  const auto samples = [&](const std::string& sync) {
    const Run r = s.run("replay --trace " + s.str("t.csv") + " --profile " +
                        (kSource / "profiles/gpt3-1.3b-a100.analytic.json").string() +
                        " --fault-tolerance 1 --global-microbatches 4096 --policy oobleck,checkpoint --gradient-sync " +
                        sync + " --json " + s.str("r.json"));
    REQUIRE(r.status == 0);
    const json doc = json::parse(s.read("r.json"));
    return std::pair{doc["policies"]["oobleck"]["samples"].get<double>(),
                     doc["policies"]["checkpoint"]["samples"].get<double>()};
  };
  const auto per_layer = samples("per-layer"), after = samples("after-backward");
  const auto whole = samples("buckets --gradient-bucket-mb 100000");
  // Nothing overlapping the backward trains less; one all-reduce a stage
  // (the ring's latency once) trains more than one a layer.
  CHECK(after.first < per_layer.first);
  CHECK(after.second < per_layer.second);
  CHECK(whole.first > per_layer.first);
  CHECK(whole.second > per_layer.second);
  const Run bad = s.run("replay --trace " + s.str("t.csv") + " --profile " + kProfile + " --gradient-sync never");
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--gradient-sync") != std::string::npos);
}

TEST_CASE("cli: a generated trace with stragglers is written and replays under each handling") {
  Scratch s(kSim);
  const Run made = s.run("trace --generate poisson --nodes 8 --failure-rate 0.001 --duration 1d --seed 3"
                         " --stragglers-per-node-hour 0.05 --straggler-mean 1h --out " + s.str("t.csv"));
  INFO(made.err);
  REQUIRE(made.status == 0);
  CHECK(made.out.find("slowdowns") != std::string::npos);
  CHECK(s.read("t.csv").find(",slow,") != std::string::npos);
  // The trace replayed with `flags`, its JSON written to `out`.
  const auto replay_trace = [&](const std::string& flags, const std::string& out) {
    return s.run("replay --trace " + s.str("t.csv") + " --profile " + kProfile +
                 " --fault-tolerance 1 --global-microbatches 64 " + flags + " --json " + s.str(out));
  };
  const Run replayed = replay_trace("--policy oobleck,checkpoint", "r.json");
  INFO(replayed.err);
  REQUIRE(replayed.status == 0);
  const json result = json::parse(s.read("r.json"));
  for (const char* name : {"oobleck", "oobleck+evict", "oobleck+mitigate", "checkpoint", "checkpoint+evict"}) {
    CAPTURE(name);
    CHECK(result["policies"].contains(name));
  }
  CHECK_FALSE(result["policies"].contains("checkpoint+mitigate"));
  // With --interleave or --pipelines-per-node every handling is replayed
  // too (mitigating by keeping or dropping slow nodes).
  for (const std::string flag : {"--interleave 2", "--pipelines-per-node 2"}) {
    CAPTURE(flag);
    const Run ran = replay_trace("--policy oobleck " + flag, "i.json");
    INFO(ran.err);
    REQUIRE(ran.status == 0);
    const json doc = json::parse(s.read("i.json"));
    for (const char* name : {"oobleck", "oobleck+evict", "oobleck+mitigate"}) {
      CAPTURE(name);
      CHECK(doc["policies"].contains(name));
    }
  }
  // R must divide the GPUs per node.
  const Run odd = replay_trace("--pipelines-per-node 3", "o.json");
  CHECK(odd.status == 2);
  CHECK(odd.err.find("--pipelines-per-node \"3\": expected auto or a divisor") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("o.json")));
}
