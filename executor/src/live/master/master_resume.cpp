// The state a master keeps for a master restarted after it
// (master_state.h), and how that one takes the job over: the agents and
// workers of the dead master, holding their training state, reconnect to
// the same address and port; once every node is back (or is late, and
// lost), the controller starts a generation where the state is
// (MasterRestarted): the same plan when nothing was lost, no state read
// from disk, the step that was in flight trained again.
#include <cstdio>
#include <filesystem>

#include "master.h"
#include "oobleck/common/files.h"

namespace oobleck::executor {
namespace {

// How long a restarted master waits for a node's agent and workers to
// reconnect. They retry every few tens of milliseconds from the moment the
// master listens, so this is about processes that are gone.
Milliseconds reconnect_window_ms(Milliseconds heartbeat_timeout_ms) {
  return std::max(10000.0, 3 * heartbeat_timeout_ms);
}

}  // namespace

void Master::keep_state(bool finished) {
  const Milliseconds start = now_ms();
  state_changed_ = false;
  MasterState s;
  s.options = with_absolute_paths(o_);
  s.options.injections.clear();
  s.options.chaos = ChaosOptions();
  s.options.launcher = in_.launcher;
  s.options.program.clear();
  s.options.resume_master_dir.clear();
  s.token = token_;
  s.master_addr = in_.master_addr;
  s.control_port = server_.port();
  s.wire = wire_;
  s.rollbacks = rollbacks_;
  s.training_start_unix_ms = training_start_unix_ms_;
  for (const auto& [name, p] : processes_.nodes()) {
    s.nodes.push_back({name, p.alive, p.local, static_cast<std::int64_t>(p.agent_pid)});
  }
  s.controller = controller_.state();
  for (const auto& [holder, k] : snapshots_.entries()) {
    s.snapshots.push_back(
        {holder, k.owner, k.gpu, k.step, k.layer_begin, k.layer_end, k.degree, k.shard, k.mirrored});
  }
  s.snapshot_pin = snapshots_.pinned();
  s.last_step_record = last_step_record_;
  s.finished = finished;
  write_master_state(state_dir_, s, in_.profile, controller_.templates());
  kept_ms_ += now_ms() - start;
  ++times_kept_;
}

void Master::end_kept_state() {
  try {
    if (default_state_dir_) {
      remove_tree(state_dir_);
    } else if (std::filesystem::exists(std::filesystem::path(state_dir_) / "state.json")) {
      keep_state(true);  // nothing left to resume
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oobleck-run: warning: %s\n", e.what());
  }
}

void Master::adopt_kept_nodes() {
  phase_ = Phase::resuming;
  const Milliseconds now = now_ms();
  int waiting = 0;
  for (const auto& n : kept_->nodes) {
    if (n.alive) {
      processes_.adopt(n.name, n.local, static_cast<pid_t>(n.agent_pid), now,
                       now + reconnect_window_ms(o_.heartbeat_timeout_ms));
      ++waiting;
    } else {
      processes_.remember_lost(n.name, n.local);
    }
  }
  if (training_start_unix_ms_ <= 0) training_start_unix_ms_ = unix_now_ms();
  std::fprintf(stderr,
               "oobleck-run: resuming the job kept in %s after step %d: waiting up to %.0f s for its %d nodes to "
               "reconnect\n",
               state_dir_.c_str(), controller_.committed_step(), reconnect_window_ms(o_.heartbeat_timeout_ms) / 1000,
               waiting);
}

// A worker of a node whose layers the state counts on must still hold them:
// one that started afresh while the master was away (its agent restarted
// it) holds nothing, and its node is lost.
void Master::check_reconnected_worker(const std::string& node, const protocol::Hello& hello) {
  if (hello.generation == 0 && controller_.committed_step() >= 0 && controller_.counts_state_on(node)) {
    lose(node, "its worker of GPU " + std::to_string(hello.gpu) +
                   " started afresh while the master was away: it holds no training state");
  }
}

void Master::resume_when_reconnected() {
  for (const auto& [name, p] : processes_.nodes()) {
    if (p.alive && !(p.agent_connected && p.all_workers_connected())) return;  // (late ones are lost by overdue())
  }
  const Milliseconds now = now_ms();
  phase_ = Phase::training;
  training_start_ms_ = now - (unix_now_ms() - training_start_unix_ms_);
  reporter_.master_restarted(now - training_start_ms_, controller_.committed_step(), state_dir_, unix_now_ms());
  std::fprintf(stderr, "oobleck-run: %zu nodes reconnected in %.0f ms; resuming at step %d\n",
               processes_.nodes().size() - lost_now_.size(), now - started_ms_, controller_.committed_step() + 1);
  if (controller_.committed_step() >= o_.steps - 1) {
    // Training was over: the workers still waiting are told so.
    phase_ = Phase::finishing;
    finish_deadline_ms_ = now + 30000;
    for (const auto& [name, p] : processes_.nodes()) {
      if (p.alive) server_.send(name, protocol::Role::worker, protocol::Finish{});
    }
    return;
  }
  // What the agents hold, before a rollback chooses from it.
  snapshots_changed_ = false;
  decide(recovery::SnapshotsHeld{snapshots_.complete(cost_.layers()), now});
  chain_failure_ms_ = -1;
  chain_detected_ms_ = started_ms_;
  std::vector<std::string> lost = std::move(lost_now_);
  lost_now_.clear();
  decide(recovery::MasterRestarted{std::move(lost), now});
  assign_mirrors();
}

}  // namespace oobleck::executor
