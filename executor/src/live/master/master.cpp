// The master of a live run: one thread, one event loop. What happens (a
// message, a closed connection, a missed heartbeat, an injection) goes to
// the recovery controller (recovery/controller.h), which alone decides
// which steps are committed and which generation comes next; the master
// carries its decisions out over the control channel. The parts: the
// process table (processes), the control server (connections), the
// protocol (messages), checkpoints, the injector (scripted and random
// failures) and the reporter (metrics and summaries). This file holds the
// loop and what comes in; master_decisions.cpp carries the controller's
// decisions out.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <utility>

#include "last_step.h"
#include "master.h"

#include "comm/store_server.h"
#include "oobleck/common/files.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {
namespace {

using protocol::Role;

std::string new_token() {
  std::random_device entropy;
  char token[33];
  std::snprintf(token, sizeof token, "%08x%08x%08x%08x", entropy(), entropy(), entropy(), entropy());
  return token;
}

recovery::ControllerOptions controller_options(const MasterOptions& o, const JobInputs& in,
                                               const std::optional<MasterState>& kept) {
  recovery::ControllerOptions c;
  c.fault_tolerance = in.initial_plan.fault_tolerance;
  c.global_microbatches = in.initial_plan.global_microbatches;
  c.initial_plan = in.initial_plan;
  c.first_source = in.resume ? recovery::StateSource::checkpoint : recovery::StateSource::initial;
  c.first_step = in.resume ? in.resume->step + 1 : 0;
  c.last_step = o.steps - 1;
  // Past f, back to the newest checkpoint; without one, exit 3.
  c.when_no_plan = recovery::ControllerOptions::WhenNoPlan::restart_from_checkpoint;
  c.saves_reported = true;
  c.communication_grace_ms = o.heartbeat_timeout_ms;
  using S = MasterOptions::Stragglers;
  c.speeds_may_resplit = o.stragglers == S::mitigate || o.stragglers == S::resplit;
  c.speeds_may_replan = o.stragglers == S::mitigate || o.stragglers == S::replan;
  c.speeds_may_drop = o.stragglers == S::mitigate || o.stragglers == S::drop;
  if (kept) c.resumed = kept->controller;
  return c;
}

// A restarted master's options are its predecessor's, reached where it was.
MasterOptions options_of(const MasterOptions& given, const std::optional<MasterState>& kept) {
  if (!kept) return given;
  MasterOptions o = kept->options;
  o.master_addr = kept->master_addr;
  o.program = given.program;
  return o;
}

}  // namespace

Master::Master(const MasterOptions& options, std::optional<MasterState> kept)
    : o_(options_of(options, kept)),
      kept_(std::move(kept)),
      in_(load_job_inputs(o_)),
      cost_(in_.profile, in_.initial_plan.template_microbatches),
      gpus_(in_.profile.hardware.gpus_per_node),
      token_(kept_ ? kept_->token : new_token()),
      server_(in_.master_addr, token_, kept_ ? kept_->control_port : 0),
      processes_(LaunchSettings{o_.program, in_.master_addr, token_, server_.port(), o_.heartbeat_timeout_ms, 120000,
                                gpus_, in_.hosts, in_.slurm, o_.master_wait_s * 1000, o_.node_cpus,
                                o_.standby_workers}),
      controller_(cost_, no_templates_, controller_options(o_, in_, kept_)),
      reporter_(o_.metrics_path, kept_ ? std::optional<std::string>(kept_->last_step_record) : std::nullopt),
      checkpoints_(o_.checkpoint_dir, o_.checkpoint_every, in_.profile, o_.seed),
      injector_(o_.injections, o_.chaos),
      ledger_(samples_before(1)) {
  stragglers_ = recovery::StragglerDetector({o_.straggler_slow_below, o_.straggler_recovered_above});
  // Recoveries plan as the plan's templates could: recomputing where it chose to.
  cost_.set_recompute(in_.initial_plan.recompute);
  cost_.set_tensor_parallel_nodes(in_.initial_plan.tensor_parallel_nodes);
  cost_.set_gradient_sync(in_.initial_plan.gradient_sync);
  cost_.set_gradient_bucket_bytes(in_.initial_plan.gradient_bucket_bytes);
  if (const int r = in_.initial_plan.pipelines_per_node; r > 1) {
    // Pipelines sharing nodes re-plan with the one template on G / r GPUs
    // (the controller grows no templates for them).
    cost_.set_pipelines_per_node(r);
    if (auto shared = build_shared_node_template(cost_, gpus_ / r)) {
      no_templates_.templates = {std::move(*shared)};
      no_templates_.max_nodes = 1;
      no_templates_.microbatches = cost_.microbatches();
    }
  }
  // Gloo on CPU nodes: the all-reduces are the nodes' own work, at their speed.
  cost_.set_collectives_at_node_speed(o_.device == "cpu");
  if (in_.resume && !kept_) (void)controller_.handle(recovery::StateSaved{in_.resume->step, 0});
  samples_ = samples_before(controller_.committed_step() + 1);
  store_ = serve_store(in_.master_addr, token_,
                             std::chrono::milliseconds(static_cast<std::int64_t>(o_.comm_timeout_s * 1000)));
  welcome_ = {profile_to_json(in_.profile),
              o_.profile_path,
              std::filesystem::absolute(o_.data_path).string(),
              o_.device,
              o_.steps,
              o_.threads,
              store_.port(),
              o_.seed,
              static_cast<std::int64_t>(o_.comm_timeout_s * 1000),
              o_.learning_rate,
              o_.snapshot_every,
              o_.deterministic};
  // (o_.state_dir stays as the job was started: empty for the default
  // folder, which goes when the job ends by itself, whichever master ends it.)
  state_dir_ = kept_ ? options.resume_master_dir : o_.state_dir;
  default_state_dir_ = o_.state_dir.empty();
  if (state_dir_.empty()) {
    state_dir_ = (std::filesystem::current_path() / ("oobleck-state-" + std::to_string(::getpid()))).string();
  }
  if (kept_) {
    wire_ = kept_->wire;
    rollbacks_ = kept_->rollbacks;
    last_step_record_ = kept_->last_step_record;
    snapshots_.pin(kept_->snapshot_pin);
    // Until each agent says what it holds now (its hello).
    for (const auto& k : kept_->snapshots) {
      snapshots_.stored(k.holder, {k.owner, k.gpu, k.step, k.layer_begin, k.layer_end, k.degree, k.shard, k.mirrored});
    }
    training_start_unix_ms_ = kept_->training_start_unix_ms;
  }
}

Master::~Master() {
  if (!ended_by_itself_) {
    // An error ends the job: agents elsewhere would wait for a restarted
    // master, and none comes. (Local ones go with the process table.)
    for (const auto& [name, p] : processes_.nodes()) {
      if (p.alive && !p.local) server_.send(name, Role::agent, protocol::Kill{});
    }
  }
  end_kept_state();
}

// ---------------------------------------------------------------- the loop

int Master::run() {
  started_ms_ = now_ms();
  if (kept_) {
    adopt_kept_nodes();
  } else {
    const auto nodes = recovery::ranked_nodes(in_.initial_plan);
    for (const auto& node : nodes) processes_.start(node, started_ms_);
    std::fprintf(stderr, "oobleck-run: %zu nodes (%zu pipelines), one agent and %d worker%s each, steps %d..%d\n",
                 nodes.size(), in_.initial_plan.pipelines.size(), gpus_, gpus_ == 1 ? "" : "s",
                 controller_.committed_step() + 1, o_.steps - 1);
    reporter_.run_started(o_.plan_path, o_.profile_path, o_.steps, o_.seed, static_cast<int>(nodes.size()));
    keep_state();
    std::fprintf(stderr, "oobleck-run: the job's state is kept in %s (oobleck-run --resume-master %s goes on with it "
                 "if this master dies)\n", state_dir_.c_str(), state_dir_.c_str());
  }
  const auto admit = [this](const protocol::Hello& hello) {
    const NodeProcess* p = processes_.find(hello.node);
    return p != nullptr && p->alive;
  };
  while (!done_) {
    const Milliseconds wait = phase_ == Phase::training ? inject(50) : 50;
    for (const auto& in : server_.poll(wait, admit)) handle(in);
    processes_.reap();
    for (const auto& [node, reason] : processes_.ended_agents()) lose(node, reason);
    for (const auto& [node, reason] : processes_.overdue(now_ms())) lose(node, reason);
    for (const auto& [node, deadline] : std::map(worker_gone_)) {
      if (now_ms() > deadline) lose(node, "its worker's connection closed and its agent said nothing of it");
    }
    for (const auto& [worker, deadline] : std::map(unannounced_hellos_)) {
      if (now_ms() > deadline) lose(worker.first, "its worker restarted after a new generation began");
    }
    // Before this look's losses: a rollback they cause restores from these.
    if (snapshots_changed_) {
      snapshots_changed_ = false;
      decide(recovery::SnapshotsHeld{snapshots_.complete(cost_.layers()), now_ms()});
    }
    // A worker restarting in place has no state for a new plan to count on.
    if (!lost_now_.empty()) for (const auto& n : unrestored_nodes()) lose(n, "it was restarting a worker in place");
    if (phase_ == Phase::resuming) resume_when_reconnected();
    if (phase_ != Phase::resuming && (!lost_now_.empty() || !joined_now_.empty())) {
      recovery::NodesChanged changed{std::move(lost_now_), std::move(joined_now_), now_ms()};
      lost_now_.clear();
      joined_now_.clear();
      decide(changed);
      assign_mirrors();
    }
    if (held_generation_ && now_ms() > held_generation_->deadline_ms) send_held(true);
    if (phase_ == Phase::training) decide(recovery::Timer{now_ms()});
    advance();
    if (state_changed_) keep_state();
  }
  std::fprintf(stderr, "oobleck-run: %d steps done, %d generations; the job's state kept %d times (%.2f ms each)\n",
               controller_.committed_step() + 1, generation_ ? generation_->number : 0, times_kept_,
               times_kept_ > 0 ? kept_ms_ / times_kept_ : 0.0);
  ended_by_itself_ = true;
  return kExitSuccess;
}

void Master::advance() {
  const Milliseconds now = now_ms();
  if (phase_ == Phase::starting && now - started_ms_ > 120000) {
    throw std::runtime_error("the workers did not all connect within 120 s");
  }
  if (wait_deadline_ms_ >= 0 && now > wait_deadline_ms_) {
    throw NoPlanError("no plan for the nodes left (" + wait_why_ + "), and no node joined within " +
                      std::to_string(static_cast<int>(o_.wait_for_nodes_s)) + " s (--wait-for-nodes-s)");
  }
  if (phase_ != Phase::finishing) return;
  bool all = true;
  for (int r = 0; r < static_cast<int>(ranks_.size()) * gpus_; ++r) {
    const NodeProcess* p = processes_.find(ranks_[static_cast<std::size_t>(r / gpus_)]);
    all = all && (done_ranks_.count(r) || p == nullptr || !p->alive);
  }
  if (all || now > finish_deadline_ms_) {
    finish();
    done_ = true;
  }
}

// ---------------------------------------------------------------- what comes in

void Master::handle(const ControlServer::Inbound& in) {
  if (std::holds_alternative<ControlServer::Closed>(in.what)) {
    const NodeProcess* p = processes_.find(in.node);
    if (const auto expected = closes_expected_.find({in.node, in.gpu});
        in.role == Role::worker && expected != closes_expected_.end() && expected->second > 0) {
      if (--expected->second == 0) closes_expected_.erase(expected);
      return;
    }
    // A worker that said it is done goes: its node's other workers may
    // still be saving the last checkpoint, which its loss would void.
    if (in.role == Role::worker && phase_ == Phase::finishing && done_ranks_.count(worker_rank(in.node, in.gpu))) {
      return;
    }
    if (in.role == Role::worker && phase_ == Phase::training && p != nullptr && p->alive && p->agent_connected) {
      // A worker alone: its agent says whether it restarts it (a crash) or
      // the node leaves; its heartbeat says whether it is there to say so.
      worker_gone_.try_emplace(in.node, now_ms() + o_.heartbeat_timeout_ms);
      return;
    }
    lose(in.node, std::string("its ") + (in.role == Role::agent ? "agent" : "worker") + "'s connection closed");
  } else if (const auto* bad = std::get_if<ControlServer::Malformed>(&in.what)) {
    std::fprintf(stderr, "oobleck-run: a malformed control message (%s)\n", bad->what.c_str());
    lose(in.node, "it sent a malformed control message");
  } else {
    const auto& message = std::get<ControlServer::Arrived>(in.what).message;
    in.role == Role::agent ? from_agent(in.node, message) : from_worker(in.node, in.gpu, message);
  }
}

void Master::from_agent(const std::string& node, const protocol::Message& m) {
  NodeProcess* p = processes_.find(node);
  if (p == nullptr || !p->alive) return;
  p->last_heartbeat_ms = now_ms();
  if (const auto* hello = std::get_if<protocol::Hello>(&m)) {
    p->agent_connected = true;
    p->worker_pids.assign(hello->worker_pids.begin(), hello->worker_pids.end());
    p->snapshot_port = hello->snapshot_port;
    processes_.confirm_agent(node, static_cast<pid_t>(hello->pid));
    // A restarted master hears what the agent holds now: that replaces what
    // its predecessor kept of it.
    if (phase_ == Phase::resuming) snapshots_.forget_holder(node);
    for (const auto& s : hello->snapshots) on_snapshot_stored(node, s);
  } else if (const auto* stored = std::get_if<protocol::SnapshotStored>(&m)) {
    on_snapshot_stored(node, *stored);
  } else if (const auto* restarted = std::get_if<protocol::WorkerRestarted>(&m)) {
    on_worker_restarted(node, *restarted);
  } else if (const auto* exit = std::get_if<protocol::WorkerExit>(&m); exit && exit->status != 0) {
    lose(node, "its worker of GPU " + std::to_string(exit->gpu) + " exited with status " +
                   std::to_string(exit->status));
  }
}

void Master::from_worker(const std::string& node, int gpu, const protocol::Message& m) {
  if (std::holds_alternative<protocol::Hello>(m)) {
    server_.send_to_worker(node, gpu, welcome_);
    if (const auto r = restarting_.find({node, gpu}); r != restarting_.end()) {
      // Restarted in place: it enters the generation of the restart.
      r->second.connected = true;
      for (auto& restart : restarts_) {
        if (restart.node == node && restart.gpu == gpu) restart.hello_ms = now_ms();
      }
      if (r->second.held) server_.send_to_worker(node, gpu, *r->second.held);
      if (r->second.held) restarting_.erase(r);
      return;
    }
    NodeProcess* p = processes_.find(node);
    if (phase_ == Phase::resuming) check_reconnected_worker(node, std::get<protocol::Hello>(m));
    if (!p->alive) return;
    // A worker restarted in place: its agent's word decides (it may come
    // after the hello), or its absence by the deadline (the restart was
    // overtaken by a new generation).
    if (p->all_workers_connected()) {
      unannounced_hellos_.try_emplace({node, gpu}, now_ms() + o_.heartbeat_timeout_ms);
      return;
    }
    ++p->workers_connected;
    // A node takes part once every one of its GPUs has a worker.
    if (phase_ != Phase::finishing && p->all_workers_connected()) joined_now_.push_back(node);
  } else if (const auto* saved = std::get_if<protocol::Saved>(&m)) {  // whatever generation it is in now
    if (checkpoints_.saved(saved->step, worker_name(node, gpu))) decide(recovery::StateSaved{saved->step, now_ms()});
  } else if (const auto* done = std::get_if<protocol::Done>(&m)) {
    const int rank = worker_rank(node, gpu);
    done_ranks_.insert(rank);
    if (done->timeline) timelines_[rank] = *done->timeline;
  }
  // Messages about a generation that is over are moot, and so is every one
  // a resumed master gets before it issues a generation of its own: the
  // workers are still in its predecessor's (whose number it kept), which it
  // replaces as soon as every node is back.
  const int current = generation_ ? wire_ : -1;
  if (const auto* passed = std::get_if<protocol::Passed>(&m)) {
    on_passed(node, gpu, *passed);
  } else if (const auto* f = std::get_if<protocol::CommunicationFailed>(&m); f && f->generation == running_wire_) {
    // It gets no further: a generation held back for it goes without its pipeline's sums.
    if (f->sums_lost) held_sums_.erase({node, gpu});
    settled_.insert({node, gpu});
    send_held(false);
  }
  if (const auto* r = std::get_if<protocol::Ready>(&m); r && r->generation == current) {
    on_ready(node, gpu, *r);
  } else if (const auto* s = std::get_if<protocol::Started>(&m); s && s->generation == current) {
    for (const auto& e : injector_.at_step(s->step)) fire(e);
  } else if (const auto* g = std::get_if<protocol::Recovering>(&m); g && g->generation == current) {
    on_recovering();
  } else if (const auto* d = std::get_if<protocol::Recovered>(&m); d && d->generation == current) {
    on_recovered(node, gpu, *d);
  } else if (const auto* failed = std::get_if<protocol::RestoreFailed>(&m); failed && failed->generation == current) {
    throw InputError("the checkpoint cannot be restored: " + failed->what);
  } else if (const auto* f = std::get_if<protocol::CommunicationFailed>(&m); f && f->generation == current) {
    last_comm_error_ = node + ": " + f->what;
    if (f->missing_snapshot_step >= 0) forget_missing_snapshot(f->missing_snapshot_step, f->missing_snapshot_port);
    decide(recovery::CommunicationFailed{generation_->number, now_ms()});  // (f: the wire number)
  }
}

// A node has finished a step once all its workers have.
void Master::on_ready(const std::string& node, int gpu, const protocol::Ready& m) {
  if (std::any_of(pending_step_events_.begin(), pending_step_events_.end(),
                  [&](const PendingStepEvent& e) {
                    return e.event.index <= m.step && (established_ || e.event.action != Injection::Action::Crash);
                  })) {
    held_ready_.emplace_back(node, gpu, m);
    return;
  }
  ledger_.add(m.step, worker_rank(node, gpu), m);
  auto& work = node_work_ms_[{m.step, node}];
  work.compute_ms = std::max(work.compute_ms, m.compute_ms);
  work.optimizer_ms = std::max(work.optimizer_ms, m.optimizer_ms);
  if (++ready_workers_[{m.step, node}] < gpus_) return;
  ready_workers_.erase({m.step, node});
  measure_work(m.step, node, work);
  node_work_ms_.erase({m.step, node});
  decide(recovery::StepReported{generation_->number, m.step, node, now_ms()});
}

// The first worker of a recovery started rebuilding: injections aimed at it
// are due (a step restarted after a communication failure goes on with the
// recovery it interrupted, if any).
void Master::on_recovering() {
  if (generation_->number < 2 || timing_.recovered > 0) return;
  if (recoveries_ > 0) {
    for (const auto& e : injector_.at_recovery(recoveries_)) fire(e);
  }
  if (generation_->rolled_back_from >= 0) {
    for (const auto& e : injector_.at_rollback(rollbacks_)) fire(e);
  }
  if (auto victim = injector_.chaos_victim_in_recovery(chaos_view()))
    kill_node(*victim, "chaos, during a recovery", false);
}

void Master::on_recovered(const std::string& node, int gpu, const protocol::Recovered& m) {
  ++timing_.recovered;
  for (auto& r : restarts_) {
    if (r.node == node && r.gpu == gpu) r.communicators_ms = m.rebuild_ms, r.read_ms = m.copy_ms;
  }
  timing_.rebuild_ms = std::max(timing_.rebuild_ms, m.rebuild_ms);
  timing_.copy_ms = std::max(timing_.copy_ms, m.copy_ms);
  timing_.copy_bytes += m.copy_bytes;
  if (timing_.recovered < static_cast<int>(ranks_.size()) * gpus_) return;
  running_trains_ = true;
  step_start_ms_ = now_ms();
  for (auto& r : restarts_) r.restored_ms = step_start_ms_;
  decide(recovery::GenerationReady{generation_->number, step_start_ms_});
}

int Master::rank_of(const std::string& node) const {
  return static_cast<int>(std::find(ranks_.begin(), ranks_.end(), node) - ranks_.begin());
}

// A node is gone: fence it (kill what is left of it, close its channels),
// and let the controller decide with the rest of this look's changes.
void Master::lose(const std::string& node, const std::string& reason) {
  NodeProcess* p = processes_.find(node);
  worker_gone_.erase(node);
  std::erase_if(unannounced_hellos_, [&](const auto& h) { return h.first.first == node; });
  if (p == nullptr || !p->alive) return;
  checkpoints_.saver_lost(node);
  state_changed_ = true;
  const bool was_flagged = stragglers_.flagged().count(node) > 0;
  stragglers_.forget(node);
  dropped_until_step_.erase(node);
  if (was_flagged && o_.stragglers != MasterOptions::Stragglers::keep) {
    (void)controller_.handle(recovery::NodeSpeedsMeasured{stragglers_.flagged(), now_ms()});  // (no action)
  }
  const Milliseconds failed = p->killed_ms >= 0 ? p->killed_ms : p->last_heartbeat_ms;
  if (!processes_.fence(node)) server_.send(node, Role::agent, protocol::Kill{});
  server_.disconnect(node);
  p->agent_connected = false;
  p->workers_connected = 0;
  if (phase_ == Phase::finishing) return;
  if (phase_ == Phase::starting)
    throw NodeStartError("node " + node + " failed before training started (" + reason + ")");
  std::fprintf(stderr, "oobleck-run: node %s lost: %s\n", node.c_str(), reason.c_str());
  loss_reasons_[node] = reason;
  snapshots_.forget_holder(node);
  snapshots_changed_ = true;
  std::erase_if(restarting_, [&](const auto& r) { return r.first.first == node; });
  std::erase_if(pending_step_events_, [&](const PendingStepEvent& e) { return e.event.node == node; });
  std::erase_if(closes_expected_, [&](const auto& c) { return c.first.first == node; });
  lost_now_.push_back(node);
  if (std::find(ranks_.begin(), ranks_.end(), node) != ranks_.end()) {
    if (chain_failure_ms_ < 0 || failed < chain_failure_ms_) chain_failure_ms_ = failed;
    if (chain_detected_ms_ < 0) chain_detected_ms_ = now_ms();
  }
}

int run_master(const MasterOptions& options) {
  if (options.resume_master_dir.empty()) {
    Master master(options);
    return master.run();
  }
  MasterState kept = read_master_state(options.resume_master_dir);
  if (kept.finished) {
    throw InputError("--resume-master " + options.resume_master_dir +
                     ": the job kept there ended (its master finished it, or gave it up): nothing to resume");
  }
  Master master(options, std::move(kept));
  return master.run();
}

}  // namespace oobleck::executor
