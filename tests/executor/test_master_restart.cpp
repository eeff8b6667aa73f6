// A master that dies is restarted with --resume-master: its agents and
// workers, still holding their training state, reconnect, training resumes
// after the last committed step, and the metrics file goes on. Every step
// is committed once and its loss is the single-process run's, bit for bit,
// whatever the moment of the death: mid-step, between keeping a commit and
// sending it, during a recovery, or with a node lost while no master ran.
// The master is killed by an injection (SIGKILL, from itself) at a step,
// never at a time.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <functional>

#include "live_setup.h"

namespace {

using nlohmann::json;
using oobleck::test::LiveSetup;

// Steps 0..steps-1, each once and in order, with the reference's loss to
// the bit and the whole batch.
void check_every_step_once(const std::vector<json>& steps, const std::vector<double>& reference, int batch) {
  REQUIRE(steps.size() == reference.size());
  for (std::size_t k = 0; k < steps.size(); ++k) {
    CAPTURE(k);
    CHECK(steps[k]["step"] == static_cast<int>(k));
    CHECK(steps[k]["loss"].get<double>() == reference[k]);
    CHECK(steps[k]["step_samples"] == batch);
    CHECK(steps[k]["samples"] == static_cast<int>(k + 1) * batch);
  }
}

struct Restarted {
  std::vector<json> before;  // the metrics when the first master died
  json restart;              // the master_restart record
  std::vector<json> generations_after;
  int status = -1;
  std::string err;
};

// Trains `steps` with `inject` (which kills the master), then resumes it;
// `meanwhile` runs between the two.
Restarted kill_and_resume(LiveSetup& setup, int steps, const std::string& inject, const std::string& extra = "",
                          const std::function<void()>& meanwhile = {}) {
  setup.s.write("inject.csv", inject);
  const auto first = setup.live(steps, 3, "live.jsonl",
                                "--state-dir " + setup.s.str("state") + " --inject " + setup.s.str("inject.csv") +
                                    " --heartbeat-timeout-ms 5000 " + extra);
  INFO(first.err);
  REQUIRE(first.status != 0);  // killed
  REQUIRE(first.err.find("killing the master (SIGKILL)") != std::string::npos);
  Restarted r;
  r.before = setup.lines("live.jsonl");
  if (meanwhile) meanwhile();
  const auto resumed = setup.s.run("--resume-master " + setup.s.str("state"));
  r.status = resumed.status;
  r.err = resumed.err;
  bool after = false;
  for (const auto& line : setup.lines("live.jsonl")) {
    if (line["kind"] == "master_restart") {
      r.restart = line;
      after = true;
    } else if (after && line["kind"] == "generation") {
      r.generations_after.push_back(line);
    }
  }
  return r;
}

int committed_in(const std::vector<json>& lines) {
  int last = -1;
  for (const auto& line : lines) {
    if (line["kind"] == "step") last = line["step"].get<int>();
  }
  return last;
}

}  // namespace

TEST_CASE("master restart: killed mid-step, resumed: the same plan, nothing copied or read from disk, every step "
          "once with the reference's loss") {
  LiveSetup setup(4, 1, 8);
  const auto r = kill_and_resume(setup, 10, "step:5,kill-master,master\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(committed_in(r.before) == 4);  // step 5 was in flight
  CHECK(r.restart["resumed_after_step"] == 4);
  REQUIRE(r.generations_after.size() == 1);
  const json& g = r.generations_after[0];
  CHECK(g["cause"] == "master_restart");
  CHECK(g["source"] == "replicas");
  CHECK(g["resume_step"] == 5);
  CHECK(g["copy_bytes"] == 0);
  CHECK(g["lost"].empty());
  json planned = json::array();
  const json plan = setup.plan();
  for (const auto& p : plan["pipelines"]) planned.push_back(p["nodes"]);
  CHECK(g["pipelines"] == planned);
  check_every_step_once(setup.steps("live.jsonl"), setup.reference_losses(10, 3), 16);
  CHECK(setup.s.processes_left() == 0);
  // The state says the job is over: resuming it again is refused.
  const auto again = setup.s.run("--resume-master " + setup.s.str("state"));
  CHECK(again.status == 2);
  CHECK(again.err.find("nothing to resume") != std::string::npos);
}

TEST_CASE("master restart: killed after keeping a commit and before sending it: the workers apply the step they "
          "hold, and its record is written once") {
  LiveSetup setup(4, 1, 8);
  const auto r = kill_and_resume(setup, 8, "commit:3,kill-master,master\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(committed_in(r.before) == 2);  // the record of step 3 was not written yet
  CHECK(r.restart["resumed_after_step"] == 3);  // but its commit was kept
  REQUIRE(r.generations_after.size() == 1);
  CHECK(r.generations_after[0]["resume_step"] == 4);
  check_every_step_once(setup.steps("live.jsonl"), setup.reference_losses(8, 3), 16);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("master restart: killed during a recovery: the resumed master plans from the same base again") {
  LiveSetup setup(4, 1, 8);
  const auto r = kill_and_resume(setup, 9, "step:3,remove,node1\nrecovery:1,kill-master,master\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(committed_in(r.before) == 2);
  REQUIRE(r.generations_after.size() == 1);
  const json& g = r.generations_after[0];
  CHECK(g["cause"] == "master_restart");
  CHECK(g["source"] == "replicas");
  CHECK(g["base_generation"] == 1);  // the unfinished recovery never became the base
  CHECK(g["lost"] == json::array({"node1"}));
  CHECK(g["resume_step"] == 3);
  check_every_step_once(setup.steps("live.jsonl"), setup.reference_losses(9, 3), 16);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("master restart: killed during a rollback past f: the resumed master chooses again from what the "
          "agents hold") {
  LiveSetup setup(6, 2, 12);
  // The first stage of every pipeline lost during step 5: the mirrors'
  // snapshot of step 3 is the newest state (as in test_recovery.cpp); the
  // master dies while the workers restore it, and the agents tell the
  // restarted one what they hold.
  const auto r = kill_and_resume(
      setup, 9, "step:5,remove,node0\nstep:5,remove,node2\nstep:5,remove,node4\nrollback:1,kill-master,master\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  REQUIRE(r.generations_after.size() == 1);
  const json& g = r.generations_after[0];
  CHECK(g["cause"] == "master_restart");
  CHECK(g["source"] == "mirror");
  CHECK(g["rolled_back"] == true);
  CHECK(g["rolled_back_from"] == 4);
  CHECK(g["resume_step"] == 4);
  std::vector<int> order;
  const auto reference = setup.reference_losses(9, 3);
  for (const auto& step : setup.steps("live.jsonl")) {
    const int k = step["step"].get<int>();
    order.push_back(k);
    CAPTURE(k);
    CHECK(step["loss"].get<double>() == reference[static_cast<std::size_t>(k)]);
    CHECK(step["step_samples"] == 24);
  }
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 4, 5, 6, 7, 8});  // step 4 trained again, once
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("master restart: a node lost while no master ran is left out; the others' state stands") {
  LiveSetup setup(4, 1, 8);
  const auto kill_node2 = [&] {
    const json state = json::parse(setup.s.read("state/state.json"));
    for (const auto& n : state["nodes"]) {
      if (n["name"] == "node2") REQUIRE(::kill(n["agent_pid"].get<pid_t>(), SIGKILL) == 0);  // its worker follows
    }
  };
  const auto r = kill_and_resume(setup, 9, "step:4,kill-master,master\n", "", kill_node2);
  INFO(r.err);
  REQUIRE(r.status == 0);
  REQUIRE(r.generations_after.size() == 1);
  const json& g = r.generations_after[0];
  CHECK(g["cause"] == "master_restart");
  CHECK(g["lost"] == json::array({"node2"}));
  CHECK(g["resume_step"] == 4);
  CHECK(g["copy_bytes"].get<std::int64_t>() > 0);  // node2's layers, from the other pipeline
  CHECK(r.err.find("node node2 lost: its agent process ended while the master was away") != std::string::npos);
  check_every_step_once(setup.steps("live.jsonl"), setup.reference_losses(9, 3), 16);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("master restart: bad input names what is wrong and exits 2") {
  LiveSetup setup(2, 0, 2);
  const auto missing = setup.s.run("--resume-master " + setup.s.str("nowhere"));
  CHECK(missing.status == 2);
  CHECK(missing.err.find("no state.json there") != std::string::npos);
  const auto with_more = setup.s.run("--resume-master " + setup.s.str("nowhere") + " --steps 3");
  CHECK(with_more.status == 2);
  CHECK(with_more.err.find("--resume-master") != std::string::npos);
  std::filesystem::create_directories(setup.s.path("bad"));
  setup.s.write("bad/state.json", "{\"format\": \"oobleck.master-state.v1\", \"finished\": \"no\"}");
  const auto bad = setup.s.run("--resume-master " + setup.s.str("bad"));
  CHECK(bad.status == 2);
  CHECK(bad.err.find("state.json: finished: expected true or false") != std::string::npos);
  setup.s.write("bad/state.json", "{\"format\": \"oobleck.plan.v1\"}");
  CHECK(setup.s.run("--resume-master " + setup.s.str("bad")).status == 2);
}

TEST_CASE("master restart: the state folder is the job's alone, and the default one goes when the run ends") {
  LiveSetup setup(2, 0, 2);
  const auto run = setup.live(2, 3, "live.jsonl", "--state-dir " + setup.s.str("kept"));
  INFO(run.err);
  REQUIRE(run.status == 0);
  const auto mode = [](const std::filesystem::path& p) {
    return std::filesystem::status(p).permissions() & std::filesystem::perms::all;
  };
  CHECK(mode(setup.s.path("kept")) == std::filesystem::perms::owner_all);
  CHECK(mode(setup.s.path("kept/token")) == (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(mode(setup.s.path("kept/state.json")) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  const json state = json::parse(setup.s.read("kept/state.json"));
  CHECK(state["finished"] == true);
  CHECK(state["controller"]["committed"] == 1);
  // The default folder, named on stderr, is gone after a run that ended by itself.
  const auto by_default = setup.live(2, 3, "live2.jsonl");
  REQUIRE(by_default.status == 0);
  const auto at = by_default.err.find("the job's state is kept in ");
  REQUIRE(at != std::string::npos);
  const std::string folder = by_default.err.substr(at + 27, by_default.err.find(' ', at + 27) - at - 27);
  CHECK(folder.find("oobleck-state-") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(folder));
}

TEST_CASE("master restart: pipelines sharing nodes, killed during a recovery: the resumed master re-plans them on "
          "part of each node") {
  // Two one-GPU pipelines on each of four 2-GPU nodes, the model on one GPU.
  LiveSetup setup(4, 1, 8, 2);
  setup.give_whole_model_memory();
  setup.plan_two_pipelines_a_node(4, 1, 8);
  REQUIRE(setup.plan()["pipelines"].size() == 8);
  const auto r = kill_and_resume(setup, 9, "step:3,remove,node1\nrecovery:1,kill-master,master\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  REQUIRE(r.generations_after.size() == 1);
  const json& g = r.generations_after[0];
  CHECK(g["cause"] == "master_restart");
  CHECK(g["lost"] == json::array({"node1"}));
  CHECK(g["pipelines"].size() == 6);  // two on each of the three nodes left
  check_every_step_once(setup.steps("live.jsonl"), setup.reference_losses(9, 3), 16);
  CHECK(setup.s.processes_left() == 0);
}
