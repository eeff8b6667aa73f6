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
  before_change(lost);
  carry_out(controller_->handle(recovery::NodesChanged{lost, added, engine_.now()}));
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
  if (g.rolled_back) fall_back(&g);
  generation_begins(g);
  if (job_.options.record_decisions) {
    result_.decisions.push_back(recovery::generation_record(as_played(g), engine_.now()));
  }
  const Cluster& c = job_.scenario.cluster;
  const Milliseconds detection = g.cause == recovery::Cause::loss ? c.detection_ms : 0;
  const int number = g.number;
  if (g.source == recovery::StateSource::replicas) {
    ++result_.reconfigurations;
    const Milliseconds copy = overrides_.oobleck_copy_ms.value_or(g.copy_ms);
    down_for(Activity::reconfiguration, detection + copy + c.communicator_ms, [this, number] { resume(number); });
    return;
  }
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

PolicyResult run_oobleck(const Job& job, StragglerHandling stragglers) { return OobleckPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
