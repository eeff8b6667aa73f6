// The master's decisions carried out: the controller's actions turned into
// generations sent to the workers, commits, waits for nodes, giving up, and
// the run's end (master.cpp holds the loop and what comes in).
#include <cstdio>
#include <utility>

#include "last_step.h"
#include "master.h"

#include "oobleck/common/files.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

using protocol::Role;

void Master::decide(const recovery::Event& event) {
  const Milliseconds start = now_ms();
  // What the kept state holds changes with these (commits and generations
  // are kept before they are sent).
  if (std::holds_alternative<recovery::NodesChanged>(event) || std::holds_alternative<recovery::GenerationReady>(event) ||
      std::holds_alternative<recovery::StateSaved>(event)) {
    state_changed_ = true;
  }
  const recovery::Actions actions = controller_.handle(event);
  const Milliseconds plan_ms = now_ms() - start;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (const auto* c = std::get_if<recovery::CommitStep>(&actions[i])) {
      const bool pause = i + 1 < actions.size() && std::holds_alternative<recovery::StartGeneration>(actions[i + 1]);
      commit(*c, pause);
    } else if (const auto* s = std::get_if<recovery::StartGeneration>(&actions[i])) {
      start_generation(*s->generation, s->base.get(), plan_ms);
    } else if (const auto* r = std::get_if<recovery::RestartInPlace>(&actions[i])) {
      restart_in_place(*r);
    } else if (const auto* w = std::get_if<recovery::SpeedsWeighed>(&actions[i])) {
      speeds_weighed(*w);
    } else if (const auto* g = std::get_if<recovery::GiveUp>(&actions[i])) {
      give_up(*g);
    } else {
      wait_for_nodes(std::get<recovery::WaitForNodes>(actions[i]));
    }
  }
}

void Master::start_generation(const recovery::Generation& g, const Plan* base, Milliseconds plan_ms) {
  const Milliseconds now = now_ms();
  if (generation_ && generation_->number > 1 && !established_) reporter_.reconfiguration(timing_, true, now);
  if (phase_ == Phase::starting) {
    phase_ = Phase::training;
    training_start_ms_ = now;
    training_start_unix_ms_ = unix_now_ms();
  }
  if (g.cause == recovery::Cause::join || g.cause == recovery::Cause::speeds) {
    chain_failure_ms_ = -1, chain_detected_ms_ = now;
  }
  work_ms_.clear();
  node_work_ms_.clear();
  if (g.cause == recovery::Cause::communication) {
    std::fprintf(stderr, "oobleck-run: communication failed without a lost node (%s); restarting the step\n",
                 last_comm_error_.c_str());
    chain_failure_ms_ = chain_detected_ms_ = now;
  }
  wait_deadline_ms_ = -1;
  if (g.cause != recovery::Cause::start && g.cause != recovery::Cause::communication &&
      g.cause != recovery::Cause::master_restart) {
    ++recoveries_;
  }
  if (g.rolled_back_from >= 0) {
    ++rollbacks_;
    // The steps after the save are trained again; saves of them in the
    // making are moot.
    checkpoints_.forget_after(g.resume_step - 1);
    snapshots_.forget_after(g.resume_step - 1);
    snapshots_changed_ = true;
    samples_ = samples_before(g.resume_step);
  }
  generation_ = std::make_shared<const recovery::Generation>(g);
  ++wire_;
  restarts_.clear();
  restarting_.clear();
  unrestored_.clear();
  ranks_ = recovery::ranked_nodes(g.plan);
  established_ = false;
  timing_ = RecoveryTiming();
  timing_.generation = g.number;
  timing_.lost = g.lost;
  timing_.added = g.added;
  timing_.resume_step = g.resume_step;
  timing_.pipelines = recovery::pipeline_shape(g.plan);
  timing_.failure_ms = chain_failure_ms_;
  timing_.detected_ms = chain_detected_ms_;
  timing_.planned_ms = now;
  timing_.plan_ms = plan_ms;
  for (const auto& n : g.lost) timing_.reasons[n] = loss_reasons_[n];
  keep_state();  // its wire number, before any worker sees it
  const std::shared_ptr<const Plan> kept_base = base ? std::make_shared<const Plan>(*base) : nullptr;
  dispatch([this, g, kept_base](const CarriedStep& carried) { send_generation(g, kept_base.get(), carried); }, g.plan,
           g.resume_step, g.source == recovery::StateSource::replicas && !g.rolled_back);
  assign_mirrors();
  ledger_.clear();
  ready_workers_.clear();
  step_start_ms_ = now;
  reporter_.generation_started(g, now - training_start_ms_);
}

// To each worker: the generation, what it holds of the base plan's state,
// and every shard copy (each worker picks out its own).
void Master::dispatch(std::function<void(const CarriedStep&)> send, const Plan& next, int resume_step,
                      bool may_keep) {
  held_generation_.reset();
  const Milliseconds now = now_ms();
  // (The last step begins with a barrier of every trainer, which a lost
  // one never passes.)
  bool may_wait = running_trains_ && resume_step < o_.steps - 1 && may_keep;
  if (o_.wait_for_passes == MasterOptions::WaitForPasses::never) may_wait = false;
  if (may_wait && o_.wait_for_passes == MasterOptions::WaitForPasses::automatic) {
    may_wait = waiting_saves_time(next, now);
  }
  held_generation_ = HeldGeneration{std::move(send), next, may_keep ? resume_step : -1, now,
                                    now + std::max<Milliseconds>(o_.heartbeat_timeout_ms, 3 * last_iteration_ms_),
                                    may_wait};
  send_held(!may_wait);
}

bool Master::waiting_saves_time(const Plan& next, Milliseconds now) const {
  if (shares_.step < 0) return false;
  const CarriedStep carried = recovery::carry_step(running_plan_, held_sums_, settled_, next, gpus_);
  // Until the last awaited pipeline passes (as long as in the last step;
  // unmeasured, a whole step), and what its workers hold then.
  Milliseconds remaining = 0;
  HeldSums passed = held_sums_;
  for (const auto& worker : carried.awaited) {
    const auto pipeline = running_pipeline_.find(worker);
    if (pipeline == running_pipeline_.end()) continue;
    const auto known = last_pass_ms_.find(pipeline->second);
    const Milliseconds expected = known != last_pass_ms_.end() ? known->second : last_iteration_ms_;
    remaining = std::max(remaining, expected - (now - step_start_ms_));
    passed[worker] = shares_.microbatches.at(static_cast<std::size_t>(pipeline->second));
  }
  const CarriedStep waited = recovery::carry_step(running_plan_, passed, settled_, next, gpus_);
  return recovery::worth_waiting(cost_, next, carried, waited, remaining, last_iteration_ms_);
}

// Sends the held generation once nothing it would keep is awaited, or
// anyway (`waited_out`), keeping what is past its passes by then.
void Master::send_held(bool waited_out) {
  if (!held_generation_) return;
  HeldGeneration& h = *held_generation_;
  CarriedStep carried;
  if (h.resume_step >= 0 && h.resume_step == shares_.step) {
    carried = recovery::carry_step(running_plan_, held_sums_, settled_, h.next, gpus_);
  }
  if (!carried.awaited.empty() && !waited_out) return;
  const HeldGeneration sent = std::move(h);
  held_generation_.reset();
  const bool listed = carried.kept_count() > 0;
  if (!listed) carried = CarriedStep();
  timing_.held_ms = now_ms() - sent.since_ms;
  // (A generation that did not wait went without nothing it waited for:
  // after a step that never trained, a kept pipeline holds nothing.)
  timing_.held_timed_out = sent.waits && !carried.awaited.empty();
  timing_.kept_microbatches = carried.kept_count();
  sent.send(carried);
  running_plan_ = sent.next;
  running_wire_ = wire_;
  running_trains_ = false;
  listed_step_ = listed ? sent.resume_step : -1;
  shares_ = listed ? recovery::resumed_shares(carried, sent.resume_step)
                   : recovery::plan_shares(sent.next, sent.resume_step);
  // The kept hold theirs until they train again.
  held_sums_.clear();
  settled_.clear();
  running_pipeline_.clear();
  passing_ms_.clear();
  last_pass_ms_.clear();
  for (const auto& [worker, seat] : recovery::seats_by_node(sent.next, gpus_)) {
    running_pipeline_[worker] = seat.pipeline;
    if (listed && !carried.kept[static_cast<std::size_t>(seat.pipeline)].empty()) {
      held_sums_[worker] = carried.kept[static_cast<std::size_t>(seat.pipeline)];
    }
  }
}

void Master::on_passed(const std::string& node, int gpu, const protocol::Passed& m) {
  const auto pipeline = running_pipeline_.find({node, gpu});
  if (m.generation != running_wire_ || m.step != shares_.step || pipeline == running_pipeline_.end()) return;
  held_sums_[{node, gpu}] = shares_.microbatches.at(static_cast<std::size_t>(pipeline->second));
  if (m.step != listed_step_) {
    Milliseconds& passed = passing_ms_[pipeline->second];
    passed = std::max(passed, now_ms() - step_start_ms_);
  }
  send_held(false);
}

void Master::send_generation(const recovery::Generation& g, const Plan* base, const CarriedStep& carried) {
  protocol::NewGeneration message;
  message.generation = wire_;
  message.plan = plan_to_json(g.plan, controller_.templates(), in_.profile);
  message.ranks = ranks_;
  message.resume_step = g.resume_step;
  std::map<std::pair<std::string, int>, recovery::WorkerSeat> holdings;
  if (g.source == recovery::StateSource::replicas) {
    holdings = recovery::seats_by_node(*base, gpus_);
    for (const auto& c : recovery::shard_copies(*base, g.plan, g.transfers, gpus_)) {
      message.copies.push_back({c.layer, c.from, c.to, c.from_degree, c.from_shard});
    }
  }
  if (g.source == recovery::StateSource::checkpoint) {
    // The newest save, which the controller resumes after.
    const int step = g.resume_step - 1;
    message.checkpoint_folder = in_.resume && in_.resume->step == step ? in_.resume->folder : checkpoints_.folder(step);
  }
  if (g.source == recovery::StateSource::memory || g.source == recovery::StateSource::mirror) {
    add_snapshot_sources(message, g.resume_step - 1, g.source == recovery::StateSource::mirror);
    snapshots_.pin(g.resume_step - 1);  // a loss before it trains may choose it again
  }
  message.discard_held = g.rolled_back;
  message.step_listed = !carried.train.empty();
  if (message.step_listed) {
    // (running_plan_ is still the plan the sums were made in.)
    for (const auto& c : recovery::kept_sum_copies(running_plan_, g.plan, carried, gpus_)) {
      message.sum_copies.push_back(
          {c.layer, worker_rank(c.from.first, c.from.second), worker_rank(c.to.first, c.to.second)});
    }
  }
  const auto seats = recovery::seats_by_node(g.plan, gpus_);
  for (const auto& node : ranks_) {
    for (int gpu = 0; gpu < gpus_; ++gpu) {
      message.step_microbatches.clear();
      message.kept_microbatches.clear();
      if (const auto seat = seats.find({node, gpu}); message.step_listed && seat != seats.end()) {
        message.step_microbatches = carried.train.at(static_cast<std::size_t>(seat->second.pipeline));
        message.kept_microbatches = carried.kept.at(static_cast<std::size_t>(seat->second.pipeline));
      }
      const auto held = holdings.find({node, gpu});
      message.holds_begin = message.holds_end = 0;
      message.holds_degree = 1;
      message.holds_shard = 0;
      if (held != holdings.end()) {
        const recovery::WorkerSeat& s = held->second;
        message.holds_begin = s.layer_begin;
        message.holds_end = s.layer_end;
        message.holds_degree = s.degree;
        message.holds_shard = s.shard;
      }
      send_to_worker(node, gpu, message);
    }
  }
}

void Master::send_to_worker(const std::string& node, int gpu, const protocol::NewGeneration& m) {
  const auto r = restarting_.find({node, gpu});
  if (r == restarting_.end() || r->second.connected) {
    server_.send_to_worker(node, gpu, m);
    if (r != restarting_.end()) restarting_.erase(r);
  } else {
    r->second.held = m;
  }
}

void Master::commit(const recovery::CommitStep& c, bool pause) {
  const StepLedger::Total total = ledger_.total(c.step);
  const Milliseconds now = now_ms();
  samples_ += total.samples;
  // (The controller may be in the next generation already: the commit is
  // this one's.)
  const std::vector<std::string> trainer_nodes = recovery::trainer_nodes(generation_->plan);
  std::vector<std::string> savers;
  for (const auto& node : trainer_nodes) {
    for (int gpu = 0; gpu < gpus_; ++gpu) savers.push_back(worker_name(node, gpu));
  }
  const protocol::Commit message{wire_, c.step, pause, c.finish, checkpoints_.save_for(c.step, c.finish, savers)};
  last_iteration_ms_ = now - step_start_ms_;
  step_start_ms_ = now;
  StepReport report{c.step, c.generation, total.loss, samples_, total.samples, last_iteration_ms_,
                    now - training_start_ms_, {}, -1};
  if (const auto measured = measured_steps_.find(c.step); measured != measured_steps_.end()) {
    report.node_speeds = std::move(measured->second.speeds);
    report.predicted_ms = measured->second.predicted_ms;
    measured_steps_.erase(measured_steps_.begin(), std::next(measured));
  }
  // Kept before any worker applies it: a restarted master commits no less.
  last_step_record_ = Reporter::step_record(report);
  keep_state();
  for (const auto& e : injector_.at_commit(c.step)) fire(e);
  for (const auto& node : trainer_nodes) server_.send(node, Role::worker, message);
  // The next step is in flight unless a generation follows at this boundary.
  shares_ = pause || c.finish ? StepShares() : recovery::plan_shares(running_plan_, c.step + 1);
  for (const auto& [pipeline, passed] : std::exchange(passing_ms_, {})) last_pass_ms_[pipeline] = passed;
  held_sums_.clear();
  settled_.clear();
  reporter_.step(report);
  unrestored_.clear();
  for (const auto& r : std::exchange(restarts_, {})) reporter_.restart(r, now);
  if (c.establishes) {
    established_ = true;
    snapshots_.pin(std::nullopt);
    if (c.generation > 1) {
      reporter_.reconfiguration(timing_, false, now);
      chain_failure_ms_ = chain_detected_ms_ = -1;
    }
  }
  if (!c.finish) {
    retry_dropped_nodes(c.step);
    return;
  }
  phase_ = Phase::finishing;
  finish_deadline_ms_ = now + 30000;
  for (const auto& [name, p] : processes_.nodes()) {
    if (p.alive) server_.send(name, Role::worker, protocol::Finish{});
  }
}

void Master::give_up(const recovery::GiveUp& g) {
  if (g.reason == recovery::GiveUp::Reason::no_progress) throw std::runtime_error(g.why + ": " + last_comm_error_);
  throw NoPlanError(reporter_.no_plan((generation_ ? generation_->number : 0) + 1, g, cost_.layers(),
                                      cost_.state_bytes(0, cost_.layers()), o_.seed));
}

void Master::wait_for_nodes(const recovery::WaitForNodes& w) {
  wait_deadline_ms_ = now_ms() + o_.wait_for_nodes_s * 1000;
  wait_why_ = w.why;
  // What the nodes that join will start from, past f: it stays named.
  if (w.rolled_back) snapshots_.pin(controller_.committed_step());
  std::fprintf(stderr, "oobleck-run: no plan for the nodes left (%s); waiting up to %.0f s for nodes to join\n",
               w.why.c_str(), o_.wait_for_nodes_s);
}

void Master::finish() {
  if (checkpoints_.enabled() && checkpoints_.last_complete() != controller_.committed_step()) {
    std::fprintf(stderr,
                 "oobleck-run: warning: the checkpoint after step %d is incomplete (a node was lost while saving); "
                 "the latest complete one is after step %d\n",
                 controller_.committed_step(), checkpoints_.last_complete());
  }
  if (generation_ && (!o_.chrome_trace_path.empty() || !timelines_.empty())) {
    const LastStepReport report = last_step_report(generation_->plan, gpus_, timelines_, last_iteration_ms_);
    if (!o_.chrome_trace_path.empty()) write_file_atomically(o_.chrome_trace_path, report.chrome_trace);
    std::fputs(report.stage_summary.c_str(), stdout);
  }
  processes_.wait_for_agents(now_ms() + 10000);
}

}  // namespace oobleck::executor
