// Oobleck: templates and the planner. The recovery controller decides, in
// simulated time, exactly what it decides for a live run
// (recovery/controller.h): a loss re-plans the survivors from the last
// committed plan and copies missing layers from replicas; joins enter at the
// next step boundary; when the replicas no longer cover a layer, the job
// restarts from the checkpoint. This model charges each decision its time:
// detection, the planner's copies and the communicators for a
// reconfiguration; detection, a restart, the communicators and the
// checkpoint's load for a restart.
#include "oobleck_policy.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::sim::detail {

using recovery::Actions;

recovery::ControllerOptions OobleckPolicy::controller_options(const Job& job) {
  recovery::ControllerOptions options;
  options.fault_tolerance = job.options.fault_tolerance;
  options.global_microbatches = job.options.global_microbatches;
  options.when_no_plan = recovery::ControllerOptions::WhenNoPlan::restart_from_checkpoint;
  return options;
}

OobleckPolicy::OobleckPolicy(const Job& job) : OobleckPolicy(job, Policy::oobleck, controller_options(job)) {}

OobleckPolicy::OobleckPolicy(const Job& job, Policy policy, const recovery::ControllerOptions& options)
    : PolicyModel(job, policy) {
  if (!job.peak_plan_problem.empty()) {
    result_.runnable = false;
    result_.reason = job.peak_plan_problem;
    return;
  }
  // A fall-back to the checkpoint takes f+1 losses at once.
  choose_checkpoint_interval(iteration_ms(job.cluster.plan), job.options.fault_tolerance + 1);
  controller_.emplace(*job.cost, job.cluster.templates, options);
}

void OobleckPolicy::on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) {
  for (const auto& node : lost) result_.failures += controller_->trains(node) ? 1 : 0;
  note_step_in_flight(lost);
  before_change(lost);
  carry_out(controller_->handle(recovery::NodesChanged{lost, added, engine_.now()}));
  if (activity_ == Activity::training) in_flight_.reset();  // the loss changed no pipeline: the step goes on
  after_change();
  // (During a save, the boundary is its end; while down, the next start
  // takes the joins in.)
  if (controller_->commit_wanted()) commit_at_next_iteration();
}

double OobleckPolicy::straggler_slowdown() const {
  if (!controller_ || !controller_->current()) return 1;
  return plan_slowdown(controller_->current()->plan, slow_nodes());
}

// The speeds go to the controller, which weighs them at the next step
// boundary (a live run's detector says them after a few steps).
void OobleckPolicy::on_stragglers_detected() {
  (void)controller_->handle(recovery::NodeSpeedsMeasured{slow_nodes(), engine_.now()});
  if (activity_ == Activity::training || activity_ == Activity::checkpoint) commit_at_next_iteration();
}

void OobleckPolicy::carry_out(const Actions& actions) {
  for (const auto& action : actions) {
    if (const auto* weighed = std::get_if<recovery::SpeedsWeighed>(&action)) {
      if (job_.options.record_decisions) {
        result_.decisions.push_back(recovery::speeds_record(*weighed, engine_.now()));
      }
    } else if (const auto* start = std::get_if<recovery::StartGeneration>(&action)) {
      begin(*start->generation);
    } else if (const auto* wait = std::get_if<recovery::WaitForNodes>(&action)) {
      interrupt();
      in_flight_.reset();
      if (wait->rolled_back) fall_back(nullptr);
      enter(Activity::waiting);
    } else if (std::holds_alternative<recovery::GiveUp>(action)) {
      throw std::logic_error(std::string(policy_name(result_.policy)) +
                             " policy: the controller gave up, but it restarts from checkpoints");
    }
  }
}

void OobleckPolicy::fall_back(const recovery::Generation*) {
  ++result_.unrecoverable;
  roll_back_to_checkpoint();
}

Milliseconds OobleckPolicy::restore_ms(const recovery::Generation&) {
  return iterations_done_ > 0 ? checkpoint_load_ms_ : 0;
}

void OobleckPolicy::begin(const recovery::Generation& g) {
  interrupt();
  if (g.rolled_back) {
    in_flight_.reset();
    fall_back(&g);
  }
  generation_begins(g);
  if (job_.options.record_decisions) {
    result_.decisions.push_back(recovery::generation_record(as_played(g), engine_.now()));
  }
  const Cluster& c = job_.scenario.cluster;
  const Milliseconds detection = g.cause == recovery::Cause::loss ? c.detection_ms : 0;
  const int number = g.number;
  if (g.source == recovery::StateSource::replicas) {
    ++result_.reconfigurations;
    const Milliseconds held = carry_step_in_flight(g, detection);
    const Milliseconds copy = overrides_.oobleck_copy_ms.value_or(g.copy_ms + kept_sums_ms_);
    down_for(Activity::reconfiguration, detection + held + copy + c.communicator_ms,
             [this, number] { resume(number); });
    return;
  }
  in_flight_.reset();
  resumed_.reset();
  ++result_.restarts;
  down_for(Activity::restart, detection + c.restart_ms + c.communicator_ms + restore_ms(g),
           [this, number] { resume(number); });
}

// The controller counts the steps it was told of; the simulator plays
// them in bulk and knows which one comes next.
recovery::Generation OobleckPolicy::as_played(const recovery::Generation& g) const {
  recovery::Generation played = g;
  played.resume_step = static_cast<int>(iterations_done_);
  return played;
}

// The generation has its state and communicators: it trains. Nodes that
// joined meanwhile enter at its first step boundary.
void OobleckPolicy::resume(int generation) {
  (void)controller_->handle(recovery::GenerationReady{generation, engine_.now()});
  const Plan& plan = controller_->current()->plan;
  start_training(iteration_ms(plan), static_cast<int>(plan.pipelines.size()), stall_ms(plan));
  in_flight_.reset();  // trained from here on: no worker holds the old step's sums
  if (resumed_) {
    shorten_first_iteration(resumed_->iteration_ms);
    resumed_->end_ms = next_iteration_boundary();
  }
  if (controller_->commit_wanted()) commit_at_next_iteration();
}

void OobleckPolicy::commit_at_next_iteration() {
  at_next_iteration([this] {
    before_commit();
    const Actions actions = controller_->handle(
        recovery::StepCompleted{controller_->current()->number, step_of(iterations_done_), engine_.now()});
    const bool regenerates = std::any_of(actions.begin(), actions.end(), [](const auto& a) {
      return std::holds_alternative<recovery::StartGeneration>(a);
    });
    if (regenerates) {
      engine_.cancel(checkpoint_event_);
    } else {
      activity_ = Activity::training;
      schedule_checkpoint();
    }
    carry_out(actions);
    if (controller_->commit_wanted()) commit_at_next_iteration();
  });
}

constexpr Milliseconds kNever = std::numeric_limits<Milliseconds>::infinity();  // a pipeline that will not pass

// A loss while training: every pipeline that lost no node passes the step
// (its passes need nothing of the others) and then holds its share. A loss
// while the next generation is being made: what that generation let its
// workers keep, less the lost. Otherwise no step is in flight (a save or a
// restart stopped at a boundary).
void OobleckPolicy::note_step_in_flight(const std::vector<std::string>& lost) {
  if (lost.empty()) return;
  const std::set<std::string> gone(lost.begin(), lost.end());
  const auto loses_a_node = [&](const Pipeline& pipeline) {
    return std::any_of(pipeline.nodes.begin(), pipeline.nodes.end(),
                       [&](const std::string& node) { return gone.count(node) > 0; });
  };
  if (activity_ == Activity::reconfiguration && in_flight_) {
    for (std::size_t p = 0; p < in_flight_->plan.pipelines.size(); ++p) {
      if (loses_a_node(in_flight_->plan.pipelines[p])) in_flight_->passes_end_ms[p] = kNever;
    }
    return;
  }
  in_flight_.reset();
  if (activity_ != Activity::training || !controller_->current()) return;
  StepInFlight step{controller_->current()->plan, {}, {}, true, current_iteration_ms_};
  // The passes' ends as the iteration model plays them, stretched to the
  // iteration being trained (stragglers, or a scenario's iteration time).
  // In a resumed step, each pipeline holds its kept and trained lists.
  const bool resuming = resumed_ && engine_.now() < resumed_->end_ms;
  step.shares = resuming ? resumed_->shares : recovery::plan_shares(step.plan, 0);
  const Plan& trained = resuming ? resumed_->played : step.plan;
  if (resuming) step.iteration_ms = full_speed_iteration_ms_ * straggler_slowdown();  // (a whole step)
  const Milliseconds played = played_iteration_ms(trained);
  const double stretch = played > 0 ? current_iteration_ms_ / played : 1;
  const Milliseconds start = iteration_start_ms();
  for (const Milliseconds end : passes_end_ms(trained)) step.passes_end_ms.push_back(start + end * stretch);
  for (std::size_t p = 0; p < step.plan.pipelines.size(); ++p) {
    if (loses_a_node(step.plan.pipelines[p])) step.passes_end_ms[p] = kNever;
  }
  in_flight_ = std::move(step);
}

// As the live master decides (master_decisions.cpp), once the loss is
// detected: pipelines past their passes are kept; keepable ones still in
// them are waited for only where worth_waiting says so (never while the
// step's generation did not train).
Milliseconds OobleckPolicy::carry_step_in_flight(const recovery::Generation& g, Milliseconds detection) {
  resumed_.reset();
  kept_sums_ms_ = 0;
  if (!in_flight_ || g.cause != recovery::Cause::loss) {
    in_flight_.reset();
    return 0;
  }
  const StepInFlight& step = *in_flight_;
  const int gpus = job_.profile.hardware.gpus_per_node;
  const Milliseconds decided = engine_.now() + detection;
  // A pipeline's workers pass together: which have passed by a given time.
  const auto passed_by = [&](Milliseconds when) {
    std::vector<bool> passed(step.passes_end_ms.size());
    for (std::size_t p = 0; p < passed.size(); ++p) passed[p] = step.passes_end_ms[p] <= when;
    return passed;
  };
  recovery::CarriedStep carried =
      recovery::carry_step_by_pipeline(step.plan, step.shares, passed_by(decided), g.plan, gpus);
  Milliseconds hold = 0;
  if (!carried.awaited.empty() && step.trains) {
    // One worker of a pipeline says whether it is awaited.
    const auto nodes = recovery::trainer_nodes(step.plan);
    const auto seats = recovery::worker_seats(step.plan, gpus);
    const auto G = static_cast<std::size_t>(gpus);
    std::vector<std::size_t> first_rank(step.plan.pipelines.size(), seats.size());
    for (std::size_t r = seats.size(); r-- > 0;) first_rank[static_cast<std::size_t>(seats[r].pipeline)] = r;
    Milliseconds last = decided;
    for (std::size_t p = 0; p < first_rank.size(); ++p) {
      const std::size_t r = first_rank[p];
      if (r < seats.size() && carried.awaited.count({nodes[r / G], seats[r].gpu}) > 0) {
        last = std::max(last, step.passes_end_ms[p]);
      }
    }
    recovery::CarriedStep waited =
        recovery::carry_step_by_pipeline(step.plan, step.shares, passed_by(last), g.plan, gpus);
    if (recovery::worth_waiting(cost(), g.plan, carried, waited, last - decided, step.iteration_ms)) {
      hold = last - decided;
      carried = std::move(waited);
    }
  }
  const int kept = carried.kept_count();
  if (kept == 0) {
    in_flight_.reset();
    return 0;
  }
  result_.kept_microbatches += kept;
  kept_sums_ms_ = kept_sums_copy_ms(step.plan, g.plan, carried);
  // The resumed step: each pipeline trains what it is given (none for a
  // kept one), priced against the whole step as the iteration model plays
  // both, so that a scenario's iteration time scales alike.
  ResumedStep resumed{recovery::resumed_plan(g.plan, carried), recovery::resumed_shares(carried, 0), 0, 0};
  const Milliseconds whole = played_iteration_ms(g.plan);
  resumed.iteration_ms = whole > 0 ? iteration_ms(g.plan) * played_iteration_ms(resumed.played) / whole : 0;
  resumed_ = std::move(resumed);
  // A loss before this generation trains carries from it: its kept
  // pipelines hold their kept lists, the others nothing.
  StepInFlight next{g.plan, {0, carried.kept}, std::vector<Milliseconds>(g.plan.pipelines.size(), 0), false, 0};
  for (std::size_t p = 0; p < g.plan.pipelines.size(); ++p) {
    if (carried.kept[p].empty()) next.passes_end_ms[p] = kNever;
  }
  in_flight_ = std::move(next);
  return hold;
}

// As the executor sends them after the layers' state: float64 sums, twice
// each shard's fp32 weights; the busiest node's bytes over its link, as the
// planner prices the state copy (copies within a node cost nothing here).
Milliseconds OobleckPolicy::kept_sums_copy_ms(const Plan& running, const Plan& next,
                                              const recovery::CarriedStep& carried) const {
  const int gpus = job_.profile.hardware.gpus_per_node;
  const auto copies = recovery::kept_sum_copies(running, next, carried, gpus);
  if (copies.empty()) return 0;
  std::map<std::string, double> sent, received;
  for (const auto& c : copies) {
    if (c.from.first == c.to.first) continue;
    const double bytes =
        2.0 * static_cast<double>(job_.profile.layers.at(static_cast<std::size_t>(c.layer)).param_bytes) / c.degree;
    sent[c.from.first] += bytes;
    received[c.to.first] += bytes;
  }
  double busiest = 0;
  for (const auto* side : {&sent, &received}) {
    for (const auto& [node, bytes] : *side) busiest = std::max(busiest, bytes);
  }
  const auto& hw = job_.profile.hardware;
  return busiest > 0 ? busiest / hw.inter_node_bytes_per_s * 1000.0 + hw.latency_ms : 0;
}

PolicyResult run_oobleck(const Job& job, StragglerHandling stragglers) { return OobleckPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
