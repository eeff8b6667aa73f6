// oobleck-run on input a user or a stranger hands over: checkpoint
// manifests, flags that mean nothing to --single-process, token files, and
// hosts that cannot be reached. Each is refused with a message naming what
// is wrong, before any worker starts.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "live_setup.h"

namespace {

using oobleck::test::LiveSetup;

std::string resume_args(const LiveSetup& live, const std::string& folder) {
  return "--plan " + live.s.str("plan.json") + " --profile " + live.s.str("profile.json") + " --data " +
         live.s.str("tokens.bin") + " --steps 4 --seed 1 --resume " + live.s.str(folder);
}

// oobleck-run on `plan`, written as `name`: exit 2 with `message`, no process left.
void refused_plan(const LiveSetup& live, const std::string& name, const nlohmann::json& plan,
                  const std::string& message) {
  live.s.write(name, plan.dump());
  const auto run = live.s.run("--plan " + live.s.str(name) + " --profile " + live.s.str("profile.json") + " --data " +
                              live.s.str("tokens.bin") + " --steps 2 --seed 1");
  CHECK(run.status == 2);
  CHECK(run.err.find(message) != std::string::npos);
  CHECK(live.s.processes_left() == 0);
}

}  // namespace

TEST_CASE("run: a checkpoint manifest is checked field by field, and a bad one exits 2 naming the field") {
  const LiveSetup live(3, 0, 4);
  const int layers = static_cast<int>(nlohmann::json::parse(live.s.read("profile.json"))["layers"].size());
  const auto manifest = [&](const std::string& step, const std::string& folder, const std::string& extra = "") {
    return "{\"format\": \"oobleck.checkpoint.v1\", \"step\": " + step + ", \"folder\": " + folder +
           ", \"layers\": " + std::to_string(layers) + ", \"seed\": 1" + extra + "}";
  };
  struct Case {
    std::string what, text, field;
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<Case> cases = {
      {"a negative step", manifest("-5", "\"step--5\""), "step"},
      {"a step that wraps an int", manifest("2147483648", "\"step-2147483648\""), "step"},
      {"a step of the wrong type", manifest("\"3\"", "\"step-3\""), "step"},
      {"a folder out of the checkpoint", manifest("3", "\"../../etc\""), "folder"},
      {"layers of the wrong type", "{\"format\": \"oobleck.checkpoint.v1\", \"step\": 3, \"folder\": \"step-3\", "
                                   "\"layers\": \"ten\", \"seed\": 1}", "layers"},
      {"a negative seed", "{\"format\": \"oobleck.checkpoint.v1\", \"step\": 3, \"folder\": \"step-3\", "
                          "\"layers\": " + std::to_string(layers) + ", \"seed\": -1}", "seed"},
      {"a key twice", manifest("3", "\"step-3\"", ", \"step\": 4"), "step"},
      {"100,000 nested arrays", manifest(deep, "\"step-3\""), "latest.json"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    std::filesystem::create_directories(live.s.path("ckpt"));
    live.s.write("ckpt/latest.json", c.text);
    const auto run = live.s.run(resume_args(live, "ckpt"));
    CHECK(run.status == 2);
    CHECK(run.err.find("latest.json") != std::string::npos);
    CHECK(run.err.find(c.field) != std::string::npos);
    CHECK(run.err.size() < 1000);  // a short message, whatever the input
    CHECK(live.s.processes_left() == 0);
  }
  const auto missing = live.s.run(resume_args(live, "no-such-folder"));
  CHECK(missing.status == 2);
  CHECK(missing.err.find("no-such-folder") != std::string::npos);
}

TEST_CASE("run: --single-process refuses a live run's flags, and tokens outside the model's vocabulary") {
  const LiveSetup live(3, 0, 4);
  const std::string common = "--plan " + live.s.str("plan.json") + " --profile " + live.s.str("profile.json") +
                             " --steps 2 --single-process";
  const std::vector<std::string> live_flags = {"--resume " + live.s.str("x"), "--checkpoint-every 2",
                                               "--snapshot-every 2", "--hostfile " + live.s.str("hosts"),
                                               "--inject " + live.s.str("inject.csv")};
  for (const std::string& flag : live_flags) {
    CAPTURE(flag);
    const auto run = live.s.run(common + " --data " + live.s.str("tokens.bin") + " " + flag);
    CHECK(run.status == 2);
    CHECK(run.err.find(flag.substr(0, flag.find(' '))) != std::string::npos);
  }
  // Token 300 in a byte-level (256-token) model's data.
  std::string bytes;
  for (int i = 0; i < 4096; ++i) bytes += i == 1000 ? std::string("\x2c\x01", 2) : std::string("a\0", 2);
  live.s.write("wide.bin", bytes);
  const auto wide = live.s.run(common + " --data " + live.s.str("wide.bin"));
  CHECK(wide.status == 2);
  CHECK(wide.err.find("wide.bin: token 300 is outside the model's vocabulary") != std::string::npos);
  CHECK(wide.err.find("internal error") == std::string::npos);
}

TEST_CASE("run: an agent whose ssh fails is reported as it fails, naming the node") {
  if (!std::filesystem::exists("/usr/bin/ssh")) {
    MESSAGE("SKIPPED: no ssh client (/usr/bin/ssh)");
    return;
  }
  const LiveSetup live(3, 0, 4);
  // The plan's nodes as hosts: none resolves, so every ssh ends at once.
  live.s.write("hosts", "node0 slots=1\nnode1 slots=1\nnode2 slots=1\n");
  const auto run = live.s.run("--plan " + live.s.str("plan.json") + " --profile " + live.s.str("profile.json") +
                              " --data " + live.s.str("tokens.bin") + " --steps 2 --hostfile " + live.s.str("hosts") +
                              " --master-addr 127.0.0.1");
  CHECK(run.status == 1);
  CHECK(run.err.find("failed before training started (the ssh starting its agent exited with status 255 before the "
                     "agent connected)") != std::string::npos);
  CHECK(run.err.find("internal error") == std::string::npos);
  CHECK(live.s.processes_left() == 0);
}

TEST_CASE("run: an interleaved plan is refused, naming the pipeline, before any worker starts") {
  const LiveSetup live(2, 0, 4);
  nlohmann::json plan = live.plan();
  const int layers = static_cast<int>(nlohmann::json::parse(live.s.read("profile.json"))["layers"].size());
  REQUIRE(layers >= 4);
  // One pipeline on both nodes, each holding two chunks.
  plan["interleave"] = 2;
  plan["spare_nodes"] = nlohmann::json::array();
  plan["pipelines"] = {{{"template_nodes", 2},
                        {"nodes", {"node0", "node1"}},
                        {"microbatches", 4},
                        {"interleave", 2},
                        {"stages",
                         {{{"layers", {0, 1}}, {"gpus", 1}, {"node", 0}},
                          {{"layers", {1, 2}}, {"gpus", 1}, {"node", 1}},
                          {{"layers", {2, 3}}, {"gpus", 1}, {"node", 0}},
                          {{"layers", {3, layers}}, {"gpus", 1}, {"node", 1}}}}}};
  refused_plan(live, "interleaved.json", plan,
               "interleaved.json: pipeline 0: interleave 2: interleaved pipelines are planned and simulated but not "
               "run live");
}
