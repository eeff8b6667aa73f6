// The master's side of snapshots: the ledger of what the agents hold, the
// mirrors it assigns, the crashes it injects and the restarts in place it
// carries out.
#include <signal.h>

#include <cstdio>

#include "master.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

using protocol::Role;

void Master::on_snapshot_stored(const std::string& holder, const protocol::SnapshotStored& s) {
  snapshots_.stored(holder, s);
  snapshots_changed_ = true;  // told to the controller once this look is read
  fire_due_step_events();
}

std::string Master::snapshot_host(const std::string& node) const {
  const auto it = processes_.nodes().find(node);
  return it == processes_.nodes().end() || it->second.local ? std::string("127.0.0.1") : node;
}

// Each node of the generation mirrors to the next one in rank order: never
// itself, and a neighbour in its pipeline holds other layers, so that the
// loss of every replica of a layer leaves its mirrors.
void Master::assign_mirrors() {
  if (o_.snapshot_every == 0) return;
  std::vector<std::string> nodes;
  for (const auto& n : ranks_) {
    if (const NodeProcess* p = processes_.find(n); p != nullptr && p->alive && p->agent_connected) nodes.push_back(n);
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string mirror = nodes.size() > 1 ? nodes[(i + 1) % nodes.size()] : std::string();
    auto& current = mirror_of_[nodes[i]];
    if (current == mirror) continue;
    current = mirror;
    const NodeProcess* m = mirror.empty() ? nullptr : processes_.find(mirror);
    server_.send(nodes[i], Role::agent,
                 protocol::MirrorTo{mirror.empty() ? "" : snapshot_host(mirror), m ? m->snapshot_port : 0,
                                    o_.mirror_every});
  }
}

void Master::add_snapshot_sources(protocol::NewGeneration& message, int step, bool with_mirrors) {
  for (const auto& snapshot : snapshots_.complete(cost_.layers())) {
    if (snapshot.step != step) continue;
    const auto pieces = recovery::choose_pieces(snapshot, cost_.layers(), ranks_, with_mirrors);
    if (!pieces) break;
    message.snapshot_step = step;
    for (const auto& p : *pieces) {
      message.snapshot.push_back({p.layer, p.degree, p.shard, snapshots_.owner_of(p.holder, step, p),
                                  snapshot_host(p.holder), processes_.find(p.holder)->snapshot_port});
    }
    return;
  }
  throw std::logic_error("the snapshot after step " + std::to_string(step) + " is not complete on the nodes left");
}

// A rollback's worker found a piece of the snapshot missing at its holder:
// the ledger forgets what that holder had of the step, and the controller,
// told at once, chooses again when the generation starts over.
void Master::forget_missing_snapshot(int step, int port) {
  for (const auto& [node, p] : processes_.nodes()) {
    if (p.alive && p.snapshot_port == port) snapshots_.forget(node, step);
  }
  decide(recovery::SnapshotsHeld{snapshots_.complete(cost_.layers()), now_ms()});
}

// ---------------------------------------------------------------- crashes

void Master::crash_worker(const std::string& node, const std::string& why) {
  NodeProcess* p = processes_.find(node);
  if (p == nullptr || !p->alive || p->worker_pids.empty()) {
    std::fprintf(stderr, "oobleck-run: %s: node %s is not running; nothing to crash\n", why.c_str(), node.c_str());
    return;
  }
  std::fprintf(stderr, "oobleck-run: %s: crashing the worker of GPU 0 of node %s\n", why.c_str(), node.c_str());
  p->crashed_ms = now_ms();
  if (p->local) {
    ::kill(static_cast<pid_t>(p->worker_pids[0]), SIGKILL);
  } else {
    server_.send(node, Role::agent, protocol::Crash{0});
  }
}

// Every trainer's own snapshot of the newest snapshot step before `step`,
// and its mirror's copy of the newest mirrored step, are reported (steps
// the current generation trained only: earlier plans' snapshots may never
// be complete on its nodes).
bool Master::snapshots_caught_up(int step) const {
  const int first = generation_ ? generation_->resume_step : 0;
  const auto newest = [&](int every) {
    const int s = ((step) / every) * every - 1;  // the newest s < step with (s + 1) % every == 0
    return s >= first ? s : -1;
  };
  const int own = newest(o_.snapshot_every), mirrored = newest(o_.mirror_every);
  for (const auto& node : ranks_) {
    if (!controller_.trains(node)) continue;
    const auto mirror = mirror_of_.find(node);
    for (int gpu = 0; gpu < gpus_; ++gpu) {
      if (own >= 0 && !snapshots_.holds_own(node, gpu, own)) return false;
      if (mirrored >= 0 && mirror != mirror_of_.end() && !mirror->second.empty() &&
          !snapshots_.holds(mirror->second, node, gpu, mirrored))
        return false;
    }
  }
  return true;
}

// What a failure during `step` may need is where it goes: the snapshots and
// the checkpoint saves due before it (both written in the background).
bool Master::state_caught_up(int step) const {
  return (o_.snapshot_every <= 0 || snapshots_caught_up(step)) && !checkpoints_.saving_before(step);
}

void Master::fire_due_step_events() {
  // A snapshot that never comes (an agent failing) holds nothing up for long.
  const Milliseconds now = now_ms();
  for (std::size_t i = 0; i < pending_step_events_.size(); ++i) {
    auto& e = pending_step_events_[i];
    // A crash restarts in place only in a generation that trains: one due
    // before it did strikes during the step after its first commit.
    if (e.event.action == Injection::Action::Crash && !e.struck) {
      if (!established_) continue;
      e.event.index = std::max(e.event.index, controller_.committed_step() + 1);
    }
    if (e.struck || !(state_caught_up(e.event.index) || now - e.since_ms > 10000)) continue;
    e.struck = true;
    const NodeProcess* p = processes_.find(e.event.node);
    if (p != nullptr && p->alive) {
      const auto event = e.event;  // (striking may change the list)
      const std::string why = e.why;
      strike(event, why);
    } else {
      pending_step_events_.erase(pending_step_events_.begin() + static_cast<std::ptrdiff_t>(i--));
    }
  }
  if (!pending_step_events_.empty() || held_ready_.empty()) return;
  auto held = std::move(held_ready_);
  held_ready_.clear();
  for (const auto& [node, gpu, m] : held) {
    const NodeProcess* p = processes_.find(node);
    if (m.generation == wire_ && p != nullptr && p->alive) on_ready(node, gpu, m);
  }
}

// ---------------------------------------------------------------- restarts

// The agent restarted a worker that died. In place when the generation has
// committed a step and the node's agent holds the worker's snapshot of the
// last one; otherwise the node is lost, as before.
void Master::on_worker_restarted(const std::string& node, const protocol::WorkerRestarted& m) {
  NodeProcess* p = processes_.find(node);
  // The dead worker's connection may close after its agent's word: that
  // close is no news.
  if (worker_gone_.erase(node) == 0) ++closes_expected_[{node, m.gpu}];
  std::erase_if(pending_step_events_, [&](const PendingStepEvent& e) { return e.struck && e.event.node == node; });
  if (m.gpu >= 0 && m.gpu < static_cast<int>(p->worker_pids.size())) p->worker_pids[m.gpu] = m.pid;
  if (phase_ == Phase::finishing) return;
  const int committed = controller_.committed_step();
  const bool member = std::find(ranks_.begin(), ranks_.end(), node) != ranks_.end();
  const bool trains = controller_.trains(node);
  const std::string why = "its worker of GPU " + std::to_string(m.gpu) + " died (status " + std::to_string(m.status) +
                          ")";
  if (phase_ != Phase::training || !established_ || !member || restarting_.count({node, m.gpu}) ||
      (trains && !snapshots_.holds_own(node, m.gpu, committed))) {
    lose(node, why + (established_ && member && trains
                          ? " and its agent does not hold its snapshot of step " + std::to_string(committed)
                          : ""));
    return;
  }
  std::fprintf(stderr, "oobleck-run: node %s: %s; restarting it in place from its snapshot of step %d\n",
               node.c_str(), why.c_str(), committed);
  restarting_[{node, m.gpu}] = Restarting{unannounced_hellos_.erase({node, m.gpu}) > 0, std::nullopt};
  unrestored_.insert({node, m.gpu});
  held_sums_.erase({node, m.gpu});  // (a new process: whatever its sums held is gone)
  settled_.insert({node, m.gpu});
  RestartTiming timing;
  timing.node = node;
  timing.gpu = m.gpu;
  timing.crash_ms = p->crashed_ms;
  timing.detected_ms = now_ms();
  timing.standby = m.standby;
  if (restarting_[{node, m.gpu}].connected) timing.hello_ms = timing.detected_ms;  // its hello came first
  p->crashed_ms = -1;
  restarts_.push_back(timing);
  decide(recovery::WorkerRestarted{node, now_ms()});
}

std::vector<std::string> Master::unrestored_nodes() const {
  std::vector<std::string> nodes;
  for (const auto& worker : unrestored_) {
    if (nodes.empty() || nodes.back() != worker.first) nodes.push_back(worker.first);
  }
  return nodes;
}

// The same plan, ranks and state: every worker starts the communicators
// over (a new wire number) and trains the step in flight again; the
// restarted ones read their layers from their own agent's memory.
void Master::restart_in_place(const recovery::RestartInPlace& r) {
  send_held(true);  // (a generation held back goes first: this one restarts it)
  ++wire_;
  keep_state();  // its wire number, before any worker sees it
  dispatch([this, r](const CarriedStep& carried) { send_restart(r, carried); }, generation_->plan, r.resume_step, true);
  for (auto& restart : restarts_) {  // (concurrent restarts redo the same step)
    restart.generation = generation_->number;
    restart.resume_step = r.resume_step;
  }
  ledger_.clear();
  ready_workers_.clear();
  timing_.recovered = 0;
  step_start_ms_ = now_ms();
}

void Master::send_restart(const recovery::RestartInPlace& r, const CarriedStep& carried) {
  const recovery::Generation& g = *generation_;
  protocol::NewGeneration message;
  message.generation = wire_;
  message.plan = plan_to_json(g.plan, controller_.templates(), in_.profile);
  message.ranks = ranks_;
  message.resume_step = r.resume_step;
  const int step = r.resume_step - 1;
  const auto holdings = recovery::seats_by_node(g.plan, gpus_);
  message.snapshot_step = step;
  for (const auto& [worker, seat] : holdings) {
    if (!unrestored_.count(worker)) continue;
    for (int l = seat.layer_begin; l < seat.layer_end; ++l) {
      message.snapshot.push_back({l, seat.degree, seat.shard, worker.first, snapshot_host(worker.first),
                                  processes_.find(worker.first)->snapshot_port});
    }
  }
  message.step_listed = !carried.train.empty();
  for (const auto& node : ranks_) {
    for (int gpu = 0; gpu < gpus_; ++gpu) {
      const auto held = holdings.find({node, gpu});
      protocol::NewGeneration m = message;
      if (message.step_listed && held != holdings.end()) {
        m.step_microbatches = carried.train.at(static_cast<std::size_t>(held->second.pipeline));
        m.kept_microbatches = carried.kept.at(static_cast<std::size_t>(held->second.pipeline));
      }
      if (held != holdings.end() && !unrestored_.count({node, gpu})) {
        m.holds_begin = held->second.layer_begin;
        m.holds_end = held->second.layer_end;
        m.holds_degree = held->second.degree;
        m.holds_shard = held->second.shard;
      }
      send_to_worker(node, gpu, m);
    }
  }
}

}  // namespace oobleck::executor
