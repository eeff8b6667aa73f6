// The books every policy keeps: which activity the time since the last
// change belongs to, whole iterations trained (the unfinished one is lost),
// checkpoints, rollbacks, and the timeline. Training between events is
// accounted analytically, so days of training cost a handful of events.
//
// Cost of a replay: the trace is read by a cursor (nothing queued per event)
// and each event updates the nodes present in O(log n) (present_nodes.h), so
// the trace itself costs O(events log nodes) time and O(events) memory. On
// top, each millisecond with changes costs what the policy does about them:
// planning, which depends on the plan (at most B pipelines of the largest
// template), not on how many nodes wait as spares.
#include "policy_model.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

namespace oobleck::sim::detail {

// ---------------------------------------------------------------- shared job

Job::Job(const Profile& profile_in, const Trace& trace_in, const ReplayOptions& options_in, const Scenario& scenario_in,
         const Progress& progress_in)
    : profile(profile_in), trace(trace_in), options(options_in), scenario(scenario_in), progress(progress_in) {
  profile.hardware.memory_bytes_per_s = device_memory_bytes_per_s(scenario.cluster, profile_in.hardware);
  if (trace.events.size() >= kNoEvent) throw InputError(trace.origin + ": too many events to replay");
  node_of_event.reserve(trace.events.size());
  std::unordered_map<std::string_view, std::uint32_t> number;  // views into the trace, which outlives the job
  for (const TraceEvent& e : trace.events) {
    node_of_event.push_back(number.try_emplace(e.node, static_cast<std::uint32_t>(number.size())).first->second);
  }
  node_count = number.size();
  // Templates for the most nodes the trace ever has, as the planner would
  // make them for that cluster; every policy plans with them.
  const int peak = std::max(1, trace.peak_nodes());
  std::vector<std::string> names;
  for (int i = 0; i < peak; ++i) names.push_back("node" + std::to_string(i));
  const auto plan_with = [&](int pipelines_per_node, int interleave, ClusterPlan& out_cluster,
                             std::optional<CostModel>& out_cost) {
    try {
      out_cluster = plan_cluster(profile, names, options.fault_tolerance, options.global_microbatches, 0, progress_in,
                                 options.recompute, options.gradient_sync, options.gradient_bucket_bytes,
                                 options.tensor_parallel_nodes, pipelines_per_node, interleave);
    } catch (const NoPlanError& e) {
      peak_plan_problem = "no plan with f = " + std::to_string(options.fault_tolerance) +
                          " even on the trace's peak of " + std::to_string(peak) + " nodes: " + e.what();
      if (options.fault_tolerance == 0) throw NoPlanError(peak_plan_problem);
      out_cluster = plan_cluster(profile, names, 0, options.global_microbatches, 0, progress_in, options.recompute,
                                 options.gradient_sync, options.gradient_bucket_bytes, options.tensor_parallel_nodes,
                                 pipelines_per_node, interleave);
    }
    out_cost.emplace(profile, out_cluster.templates.microbatches);
    out_cost->set_recompute(options.recompute);  // as the templates were made
    out_cost->set_tensor_parallel_nodes(options.tensor_parallel_nodes);
    out_cost->set_gradient_sync(options.gradient_sync);
    out_cost->set_gradient_bucket_bytes(options.gradient_bucket_bytes);
    // Where interleaving plays faster the templates interleave, and re-plans
    // (templates grown for more nodes among them) may too; where pipelines
    // share nodes, every plan has them do so.
    out_cost->set_interleave(out_cluster.plan.interleave);
    out_cost->set_pipelines_per_node(out_cluster.plan.pipelines_per_node);
  };
  plan_with(options.pipelines_per_node, options.interleave, cluster, cost);
  if (cluster.plan.pipelines_per_node > 1 || cluster.plan.interleave > 1) {
    const std::string problem = peak_plan_problem;  // (the oobleck policies', of `cluster`)
    try {
      plan_with(1, 1, plain.emplace(), plain_cost);
    } catch (const NoPlanError& e) {
      plain.reset();
      plain_cost.reset();
      plain_plan_problem = e.what();
    }
    peak_plan_problem = problem;
  }
  // (The cost model prices optimizer steps at the profile's rate, set above,
  // as simulate_iteration plays them.)
  samples_per_iteration = options.global_microbatches * profile.microbatch_size;
  for (int l = 0; l < static_cast<int>(profile.layers.size()); ++l) model_state_bytes += cost->layer_state_bytes(l);
}

Milliseconds Job::mean_time_between_bursts(int losses, bool slowdowns_lose) const {
  // Bursts of `losses` removals within one recovery window (detection and
  // restart), counted without overlap.
  const Cluster& c = scenario.cluster;
  const Milliseconds window = c.detection_ms + c.restart_ms + c.communicator_ms;
  std::vector<Milliseconds> removals;
  for (const auto& e : trace.events) {
    if (e.change == NodeChange::remove || (slowdowns_lose && e.change == NodeChange::slow && e.factor < 1)) {
      removals.push_back(e.time_ms);
    }
  }
  if (removals.empty()) return 0;
  int bursts = 0;
  const std::size_t k = static_cast<std::size_t>(std::max(1, losses));
  for (std::size_t i = 0; i + k - 1 < removals.size();) {
    if (removals[i + k - 1] - removals[i] <= window) {
      ++bursts;
      const Milliseconds until = removals[i] + window;
      while (i < removals.size() && removals[i] <= until) ++i;
    } else {
      ++i;
    }
  }
  // None seen: plan for one in a trace's length rather than none at all.
  return trace.duration_ms() / std::max(1, bursts);
}

// ---------------------------------------------------------------- base model

PolicyModel::PolicyModel(const Job& job, Policy policy)
    : job_(job),
      cost_(&*job.cost),
      overrides_(job.scenario.overrides_for(policy)),
      present_(job.trace.events, job.node_count),
      batch_slot_(job.node_count, kNoEvent),
      evicted_(job.node_count, 0) {
  result_.policy = policy;
  const Cluster& c = job.scenario.cluster;
  const Overrides& o = overrides_;
  checkpoint_save_ms_ =
      o.checkpoint_save_ms.value_or(static_cast<double>(job.model_state_bytes) / c.storage_bytes_per_s * 1000.0);
  checkpoint_load_ms_ = o.checkpoint_load_ms.value_or(checkpoint_save_ms_);
}

void PolicyModel::choose_checkpoint_interval(Milliseconds iteration, int fatal_losses) {
  const auto& given = overrides_.checkpoint_interval_iterations;
  checkpoint_basis_.emplace(iteration, fatal_losses);
  const Milliseconds mtbf = job_.mean_time_between_bursts(fatal_losses, stragglers_ == StragglerHandling::evict);
  if (given) {
    result_.checkpoint_interval_iterations = *given;
  } else if (mtbf > 0 && iteration > 0) {
    // Young/Daly: the interval sqrt(2 C MTBF) balances checkpoint cost
    // against expected lost work; MTBF counts only the losses that need the
    // checkpoint.
    const double interval_ms = std::sqrt(2.0 * checkpoint_save_ms_ * mtbf);
    result_.checkpoint_interval_iterations =
        static_cast<int>(std::clamp(std::round(interval_ms / iteration), 1.0, 1e9));
  } else {
    result_.checkpoint_interval_iterations = 0;
  }
  result_.checkpoint_save_ms = result_.checkpoint_interval_iterations > 0 ? checkpoint_save_ms_ : 0;
}

PolicyResult PolicyModel::run(StragglerHandling stragglers) {
  stragglers_ = stragglers;
  result_.stragglers = stragglers;
  if (stragglers == StragglerHandling::evict && checkpoint_basis_) {
    choose_checkpoint_interval(checkpoint_basis_->first, checkpoint_basis_->second);
  }
  if (!result_.runnable) {
    result_.time.waiting_ms = job_.trace.duration_ms();
    return result_;
  }
  // The trace's events are not queued on the engine, where a long trace
  // would sit whole in every policy's queue: at each time of the trace the
  // engine runs what lies before it, then the trace's events there apply,
  // ahead of the engine's own events at that time, as if queued first.
  const auto& events = job_.trace.events;
  for (std::size_t i = 0; i < events.size();) {
    const Milliseconds at = events[i].time_ms;
    engine_.run_before(at);
    for (; i < events.size() && events[i].time_ms == at; ++i) apply_trace_event(static_cast<std::uint32_t>(i));
  }
  engine_.run_until(job_.trace.duration_ms());
  // Close the books at the end of the trace; work not yet checkpointed
  // still counts: the job could save it now.
  leave_activity();
  PolicyResult out = result_;
  const double duration_s = job_.trace.duration_ms() / 1000.0;
  out.samples = static_cast<double>(iterations_done_) * job_.samples_per_iteration;
  out.samples_per_s = duration_s > 0 ? out.samples / duration_s : 0;
  out.goodput = job_.trace.duration_ms() > 0 ? out.time.training_ms / job_.trace.duration_ms() : 0;
  return out;
}

void PolicyModel::apply_trace_event(std::uint32_t event) {
  const TraceEvent& e = job_.trace.events[event];
  if (job_.progress && job_.trace.duration_ms() > 0) {
    const int tenth = static_cast<int>(10 * e.time_ms / job_.trace.duration_ms());
    if (tenth > reported_tenths_) {
      reported_tenths_ = tenth;
      job_.progress(std::string(policy_name(result_.policy)) + ": " + std::to_string(10 * tenth) +
                    "% of the trace replayed");
    }
  }
  const std::uint32_t node = job_.node_of_event[event];
  if (e.change == NodeChange::slow) {
    if (!apply_slow(event)) return;
  } else if (e.change == NodeChange::add) {
    present_.add(node, event);
    batch_slot_[node] = static_cast<std::uint32_t>(batch_added_.size());
    batch_added_.push_back(event);
  } else {
    // Its removal ends a slowdown; an evicted node is out of the job already.
    if (slow_.erase(e.node) > 0) reprice_at_next_iteration();
    if (evicted_[node]) {
      evicted_[node] = 0;
      return;
    }
    present_.remove(node);
    if (const std::uint32_t slot = batch_slot_[node]; slot != kNoEvent) {
      batch_added_[slot] = kNoEvent;  // came and went within the batch: neither added nor lost
      batch_slot_[node] = kNoEvent;
    } else {
      batch_lost_.push_back(event);
    }
  }
  if (!batch_pending_) {
    // Runs after every trace event of this millisecond: they all apply
    // before the engine runs anything at this time.
    batch_pending_ = true;
    engine_.schedule_after(0, [this] { end_batch(); });
  }
}

void PolicyModel::end_batch() {
  batch_pending_ = false;
  const auto& events = job_.trace.events;
  std::vector<std::string> added, lost;
  added.reserve(batch_added_.size());
  lost.reserve(batch_lost_.size());
  for (const std::uint32_t event : batch_added_) {
    if (event == kNoEvent) continue;
    added.push_back(events[event].node);
    batch_slot_[job_.node_of_event[event]] = kNoEvent;
  }
  for (const std::uint32_t event : batch_lost_) lost.push_back(events[event].node);
  batch_added_.clear();
  batch_lost_.clear();
  record_point();
  on_change(added, lost);
}

std::int64_t whole_cycles(Milliseconds since, Milliseconds now, Milliseconds cycle_ms) {
  const Milliseconds slack = 1e-12 * (std::abs(now) + std::abs(since) + cycle_ms);
  return static_cast<std::int64_t>(std::min(std::floor((now - since + slack) / cycle_ms), 4e18));
}

// Accounting. Time since `since_` belongs to the current activity; training
// counts whole iterations (plus their in-memory save share), the unfinished
// one is lost.
void PolicyModel::leave_activity() {
  const Milliseconds now = engine_.now();
  const Milliseconds elapsed = now - since_;
  switch (activity_) {
    case Activity::waiting:
      result_.time.waiting_ms += elapsed;
      break;
    case Activity::reconfiguration:
      result_.time.reconfiguration_ms += elapsed;
      break;
    case Activity::restart:
      result_.time.restart_ms += elapsed;
      break;
    case Activity::checkpoint:
      result_.time.checkpoint_ms += elapsed;
      break;
    case Activity::training: {
      const Milliseconds cycle = current_iteration_ms_ + per_iteration_save_ms_;
      const std::int64_t done = whole_cycles(since_, now, cycle);
      const Milliseconds useful = static_cast<double>(done) * current_iteration_ms_;
      const Milliseconds saving = static_cast<double>(done) * per_iteration_save_ms_;
      result_.time.training_ms += useful;
      result_.time.checkpoint_ms += saving;
      result_.time.lost_work_ms += std::max(0.0, elapsed - useful - saving);
      iterations_done_ += done;
      training_ms_since_checkpoint_ += useful;
      iterations_since_checkpoint_ += done;
      if (per_iteration_save_ms_ > 0 && done > 0) {
        // Each finished iteration is in host memory.
        memory_iterations_ = iterations_done_;
      }
      break;
    }
  }
  since_ = now;
}

void PolicyModel::enter(Activity activity) {
  leave_activity();
  activity_ = activity;
  record_point();
}

void PolicyModel::start_training(Milliseconds iteration, int pipelines, Milliseconds per_iteration_save) {
  engine_.cancel(reprice_event_);
  full_speed_iteration_ms_ = iteration;
  current_iteration_ms_ = iteration * straggler_slowdown();
  current_pipelines_ = pipelines;
  per_iteration_save_ms_ = per_iteration_save;
  enter(Activity::training);
  schedule_checkpoint();
}

Milliseconds PolicyModel::next_iteration_boundary() const {
  return iteration_start_ms() + current_iteration_ms_ + per_iteration_save_ms_;
}

Milliseconds PolicyModel::iteration_start_ms() const {
  const Milliseconds cycle = current_iteration_ms_ + per_iteration_save_ms_;
  return since_ + static_cast<double>(whole_cycles(since_, engine_.now(), cycle)) * cycle;
}

void PolicyModel::shorten_first_iteration(Milliseconds iteration) {
  current_iteration_ms_ = iteration * straggler_slowdown();
  record_point();
  schedule_checkpoint();
  reprice_at_next_iteration();
}

void PolicyModel::schedule_checkpoint() {
  engine_.cancel(checkpoint_event_);
  const int k = result_.checkpoint_interval_iterations;
  if (k <= 0 || !blocking_checkpoints_ || activity_ != Activity::training) return;
  const std::int64_t left = std::max<std::int64_t>(1, k - iterations_since_checkpoint_);
  const Milliseconds at = since_ + static_cast<double>(left) * (current_iteration_ms_ + per_iteration_save_ms_);
  checkpoint_event_ = engine_.schedule_at(at, [this] {
    enter(Activity::checkpoint);
    checkpoint_event_ = engine_.schedule_after(checkpoint_save_ms_, [this] {
      leave_activity();
      checkpoint_iterations_ = iterations_done_;
      training_ms_since_checkpoint_ = 0;
      iterations_since_checkpoint_ = 0;
      activity_ = Activity::training;
      current_iteration_ms_ = full_speed_iteration_ms_ * straggler_slowdown();  // speeds changed during the save
      record_point();
      on_checkpoint_saved();
      // A change that waited for an iteration boundary during the save: the
      // end of the save is one.
      if (activity_ == Activity::training && deferred_) {
        auto action = std::move(deferred_);
        deferred_ = nullptr;
        action();
      }
      if (activity_ == Activity::training) schedule_checkpoint();
    });
  });
}

// Interrupts whatever runs now (the unfinished iteration or checkpoint is lost).
void PolicyModel::interrupt() {
  engine_.cancel(reprice_event_);
  engine_.cancel(checkpoint_event_);
  engine_.cancel(activity_end_);
  engine_.cancel(boundary_event_);
  deferred_ = nullptr;
  leave_activity();
}

void PolicyModel::roll_back_to(std::int64_t iterations) {
  const std::int64_t lost = iterations_done_ - iterations;
  if (lost <= 0) return;
  // The iterations since the checkpoint were trained at possibly different
  // speeds; their training time is tracked since the checkpoint.
  const Milliseconds lost_ms = iterations == checkpoint_iterations_
                                   ? training_ms_since_checkpoint_
                                   : training_ms_since_checkpoint_ * static_cast<double>(lost) /
                                         static_cast<double>(std::max<std::int64_t>(1, iterations_since_checkpoint_));
  result_.time.training_ms -= lost_ms;
  result_.time.lost_work_ms += lost_ms;
  iterations_done_ = iterations;
  training_ms_since_checkpoint_ -= lost_ms;
  iterations_since_checkpoint_ = std::max<std::int64_t>(0, iterations_since_checkpoint_ - lost);
}

void PolicyModel::roll_back_to_checkpoint() {
  roll_back_to(checkpoint_iterations_);
  training_ms_since_checkpoint_ = 0;
  iterations_since_checkpoint_ = 0;
}

void PolicyModel::down_for(Activity activity, Milliseconds duration, std::function<void()> then) {
  // No checkpoint or boundary action of the run that stops here.
  engine_.cancel(reprice_event_);
  engine_.cancel(checkpoint_event_);
  engine_.cancel(boundary_event_);
  deferred_ = nullptr;
  enter(activity);
  activity_end_ = engine_.schedule_after(duration, [then = std::move(then)] { then(); });
}

void PolicyModel::at_next_iteration(std::function<void()> action) {
  // One pending action at most: the newest, which sees all state.
  engine_.cancel(boundary_event_);
  if (activity_ == Activity::checkpoint) {
    deferred_ = std::move(action);
    return;
  }
  if (activity_ != Activity::training) return;  // the next start takes the change in
  boundary_event_ = engine_.schedule_at(next_iteration_boundary(), [this, action = std::move(action)]() mutable {
    if (activity_ == Activity::checkpoint) {  // a save began at this very boundary
      deferred_ = std::move(action);
      return;
    }
    leave_activity();
    action();
  });
}

void PolicyModel::record_point() {
  TimelinePoint point;
  point.time_ms = engine_.now();
  point.nodes = static_cast<int>(present_.size());
  if (activity_ == Activity::training) {
    point.pipelines = current_pipelines_;
    point.samples_per_s = job_.samples_per_iteration / (current_iteration_ms_ + per_iteration_save_ms_) * 1000.0;
  }
  auto& timeline = result_.timeline;
  if (!timeline.empty() && timeline.back().time_ms == point.time_ms) {
    timeline.back() = point;
  } else if (timeline.empty() || timeline.back().nodes != point.nodes || timeline.back().pipelines != point.pipelines ||
             timeline.back().samples_per_s != point.samples_per_s) {
    timeline.push_back(point);
  }
}

Bytes largest_node_state(const CostModel& cost, const Plan& plan) {
  Bytes most = 0;
  for (const auto& p : plan.pipelines) {
    std::map<int, Bytes> per_node;
    for (const auto& s : p.stages) {
      for (int n = s.node; n < s.node + s.node_span; ++n) {
        per_node[n] += cost.state_bytes(s.layer_begin, s.layer_end) / s.node_span;
      }
    }
    for (const auto& [node, bytes] : per_node) most = std::max(most, bytes);
  }
  return most;
}

}  // namespace oobleck::sim::detail
