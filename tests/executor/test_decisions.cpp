// One recovery rule: the live master and the simulator's oobleck policy
// both drive the recovery controller, so on the same sequence of losses and
// joins they start the same generations, with the same plans. The live run
// goes first (with a loss during a recovery, a join and a later loss); its
// metrics say what it saw, including losses an injection did not plan (a
// peer dying mid-rendezvous can take another process with it). That
// sequence becomes a trace for oobleck-sim replay, timed so that each loss
// falls inside or outside the simulated recovery exactly as it did live;
// the simulator's decisions (--decisions) must equal the master's.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "live_setup.h"

namespace {

using nlohmann::json;
using oobleck::test::LiveSetup;

std::vector<std::string> minus(const std::vector<std::string>& all, const std::vector<std::string>& some) {
  std::vector<std::string> out;
  for (const auto& n : all) {
    if (std::find(some.begin(), some.end(), n) == some.end()) out.push_back(n);
  }
  return out;
}

// The trace the live run's generations imply: the first generation's nodes
// at 0; then each generation's new losses and joins. A generation planned
// from the same base as the one before it came from losses while that one
// was recovering: they fall 1 s after it (the simulated recovery takes 10 s
// of detection and 5 s of communicators). Otherwise, 10 minutes later, when
// the simulated one trains.
std::string trace_of(const std::vector<json>& generations) {
  std::string csv;
  const auto first = generations.front();
  for (const auto& p : first["pipelines"]) {
    for (const auto& n : p) csv += "0," + std::string("add,") + n.get<std::string>() + "\n";
  }
  for (const auto& n : first["spare_nodes"]) csv += "0,add," + n.get<std::string>() + "\n";
  long long t = 0;
  for (std::size_t k = 1; k < generations.size(); ++k) {
    const json& g = generations[k];
    const json& before = generations[k - 1];
    const bool during = g["base_generation"] == before["base_generation"];
    const auto lost = g["lost"].get<std::vector<std::string>>(), added = g["added"].get<std::vector<std::string>>();
    const auto new_lost = during ? minus(lost, before["lost"].get<std::vector<std::string>>()) : lost;
    const auto new_added = during ? minus(added, before["added"].get<std::vector<std::string>>()) : added;
    t += during ? 1000 : 600000;
    for (const auto& n : new_lost) csv += std::to_string(t) + ",remove," + n + "\n";
    for (const auto& n : new_added) csv += std::to_string(t) + ",add," + n + "\n";
  }
  csv += std::to_string(t + 600000) + ",add,late-node\n";  // the trace ends well after the last decision
  return csv;
}

// What both must agree on: everything but times and step numbers.
json decision(const json& g) {
  return {{"generation", g["generation"]},   {"cause", g["cause"]},           {"source", g["source"]},
          {"base", g["base_generation"]},    {"lost", g["lost"]},             {"added", g["added"]},
          {"pipelines", g["pipelines"]},     {"spare_nodes", g["spare_nodes"]}, {"copy_bytes", g["copy_bytes"]}};
}

}  // namespace

TEST_CASE("recovery: the live master and the simulator's oobleck policy make the same decisions") {
  LiveSetup setup(6, 2, 12);
  setup.s.write("inject.csv", "step:2,remove,node1\nrecovery:1,remove,node2\nstep:5,add,node6\nstep:8,remove,node4\n");
  const auto run = setup.live(10, 4, "live.jsonl", "--inject " + setup.s.str("inject.csv") +
                                                       " --heartbeat-timeout-ms 5000");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const auto live = setup.of_kind("live.jsonl", "generation");
  REQUIRE(live.size() >= 5);  // start, loss, loss during that recovery, join, loss
  CHECK(live[2]["base_generation"] == 1);  // planned from the plan before the first loss
  std::set<std::string> causes;
  for (const auto& g : live) causes.insert(g["cause"].get<std::string>());
  CHECK(causes == std::set<std::string>{"start", "loss", "join"});

  setup.s.write("trace.csv", trace_of(live));
  const auto plan = setup.plan();
  const auto sim = setup.s.run_program(
      OOBLECK_SIM_BINARY, "replay --trace " + setup.s.str("trace.csv") + " --profile " + setup.s.str("profile.json") +
                              " --fault-tolerance " + std::to_string(plan["fault_tolerance"].get<int>()) +
                              " --global-microbatches " + std::to_string(plan["global_microbatches"].get<int>()) +
                              " --policy oobleck --decisions " + setup.s.str("sim.jsonl"));
  INFO(sim.err);
  REQUIRE(sim.status == 0);
  const auto simulated = setup.of_kind("sim.jsonl", "generation");
  INFO("trace:\n" << setup.s.read("trace.csv"));
  REQUIRE(simulated.size() == live.size());
  for (std::size_t k = 0; k < live.size(); ++k) {
    CAPTURE(k);
    CHECK(decision(simulated[k]) == decision(live[k]));
  }
}
