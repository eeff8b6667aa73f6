// A small live-run setup for the executor's end-to-end tests: GPT-tiny on
// CPU-like nodes with too little memory for the whole model on one node, a
// plan from oobleck-plan, the bundled corpus as tokens (all made by
// tools/cluster-setup.sh, as for the scripts), and the single-process
// reference to compare with.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "scratch.h"

namespace oobleck::test {

inline const std::string kSource = OOBLECK_SOURCE_DIR;
// This build's programs (oobleck-run's folder).
inline const std::string kBin = std::filesystem::path(OOBLECK_RUN_BINARY).parent_path().string();

class LiveSetup {
 public:
  // The GPT-tiny (or `model`: llama-tiny) cluster of tools/cluster-setup.sh,
  // with this build's programs.
  LiveSetup(int nodes, int fault_tolerance, int global_microbatches, int gpus_per_node = 1,
            const std::string& model = "gpt-tiny")
      : LiveSetup(SetUp{"tiny", "--nodes " + std::to_string(nodes) + " --fault-tolerance " +
                                    std::to_string(fault_tolerance) + " --global-microbatches " +
                                    std::to_string(global_microbatches) + " --gpus-per-node " +
                                    std::to_string(gpus_per_node) + " --model " + model}) {}
  // Any set-up of tools/cluster-setup.sh (tiny or mini) with its flags.
  struct SetUp {
    std::string kind, flags;
  };
  explicit LiveSetup(const SetUp& set_up) : s(OOBLECK_RUN_BINARY) {
    const auto setup = s.run_program("/usr/bin/env", "OOBLECK_BIN=" + kBin + " " + kSource + "/tools/cluster-setup.sh " +
                                                         set_up.kind + " " + s.str("") + " " + set_up.flags);
    INFO(setup.err);
    REQUIRE(setup.status == 0);
  }

  [[nodiscard]] nlohmann::json plan() const { return nlohmann::json::parse(s.read("plan.json")); }

  // The profile with memory for the whole model on one GPU, so that
  // pipelines can share a node.
  void give_whole_model_memory() const {
    auto profile = nlohmann::json::parse(s.read("profile.json"));
    profile["hardware"]["gpu_memory_bytes"] = 1e9;
    s.write("profile.json", profile.dump());
  }
  // plan.json made again by oobleck-plan with two pipelines on every node.
  void plan_two_pipelines_a_node(int nodes, int fault_tolerance, int global_microbatches) const {
    const auto planned = s.run_program(
        kBin + "/oobleck-plan", "instantiate --profile " + s.str("profile.json") + " --nodes " + std::to_string(nodes) +
                                   " --fault-tolerance " + std::to_string(fault_tolerance) +
                                   " --global-microbatches " + std::to_string(global_microbatches) +
                                   " --pipelines-per-node 2 --json " + s.str("plan.json"));
    INFO(planned.err);
    REQUIRE(planned.status == 0);
  }

  // oobleck-run on the plan; `extra` adds flags.
  // Unless a test sets --heartbeat-timeout-ms, a generous one: a node is
  // found lost by its closed connections, not by a heartbeat that a loaded
  // machine delayed.
  Run live(int steps, int seed, const std::string& metrics, const std::string& extra = "") const {
    const std::string heartbeat =
        extra.find("--heartbeat-timeout-ms") == std::string::npos ? " --heartbeat-timeout-ms 10000" : "";
    return s.run(common(steps, seed) + " --metrics " + s.str(metrics) + heartbeat + " " + extra);
  }
  // The same model trained by one process on the same global batches.
  [[nodiscard]] std::vector<double> reference_losses(int steps, int seed, const std::string& extra = "") const {
    REQUIRE(s.run(common(steps, seed) + " --single-process --metrics " + s.str("reference.jsonl") + " " + extra)
                .status == 0);
    std::vector<double> out;
    for (const auto& line : of_kind("reference.jsonl", "step")) out.push_back(line["loss"].get<double>());
    return out;
  }

  // A JSON-lines file, line by line.
  [[nodiscard]] std::vector<nlohmann::json> lines(const std::string& name) const {
    std::vector<nlohmann::json> out;
    std::stringstream in(s.read(name));
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  // The lines of one kind of a live run's metrics: steps, generations,
  // reconfigurations, no_plan.
  [[nodiscard]] std::vector<nlohmann::json> of_kind(const std::string& name, const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (auto& line : lines(name)) {
      if (line.at("kind") == kind) out.push_back(std::move(line));
    }
    return out;
  }
  [[nodiscard]] std::vector<nlohmann::json> steps(const std::string& name) const { return of_kind(name, "step"); }
  [[nodiscard]] std::vector<nlohmann::json> reconfigurations(const std::string& name) const {
    return of_kind(name, "reconfiguration");
  }

  Scratch s;

 private:
  [[nodiscard]] std::string common(int steps, int seed) const {
    return "--plan " + s.str("plan.json") + " --profile " + s.str("profile.json") + " --data " + s.str("tokens.bin") +
           " --steps " + std::to_string(steps) + " --seed " + std::to_string(seed);
  }
};

// For 3 nodes of 2 GPUs: pipeline 0 on node0 and node1, layers 0-2 as one
// stage of degree 2 on node0, node1 holding two stages, layers 3-4 and
// layer 5; pipeline 1 on node2: two stages of degree 1. Layers 1-2 are held
// at degree 2 by one pipeline and at degree 1 by the other.
inline nlohmann::json tensor_parallel_pipelines() {
  return nlohmann::json::parse(R"([
    {"iteration_ms": 0, "microbatches": 6, "nodes": ["node0", "node1"], "template_nodes": 2,
     "stages": [{"gpus": 2, "layers": [0, 3], "node": 0}, {"gpus": 1, "layers": [3, 5], "node": 1},
                {"gpus": 1, "layers": [5, 6], "node": 1}]},
    {"iteration_ms": 0, "microbatches": 6, "nodes": ["node2"], "template_nodes": 1,
     "stages": [{"gpus": 1, "layers": [0, 3], "node": 0}, {"gpus": 1, "layers": [3, 6], "node": 0}]}])");
}

// Every step's loss equals the reference's within `tolerance` (relative).
inline void check_losses_equal(const std::vector<nlohmann::json>& steps, const std::vector<double>& reference,
                               double tolerance = 1e-4) {
  REQUIRE(steps.size() == reference.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i);
    CHECK(steps[i]["step"].get<int>() == static_cast<int>(i));
    CHECK(std::abs(steps[i]["loss"].get<double>() - reference[i]) <= tolerance * std::abs(reference[i]));
  }
}

}  // namespace oobleck::test
