// Stragglers in the books every policy keeps: a trace's slow events set
// present nodes' speeds, the training in progress is priced anew at its
// next iteration boundary, and under evict or mitigate the slow nodes are
// acted on once detected (policy_model.h).
#include <algorithm>

#include "policy_model.h"

namespace oobleck::sim::detail {

// A slow event: the node's speed (the training is priced anew at the next
// iteration boundary, and a handling other than ignore reacts once it is
// detected); for an evicted node that recovers, its return to the job.
// True when it joins the batch of this millisecond's changes.
bool PolicyModel::apply_slow(std::uint32_t event) {
  const TraceEvent& e = job_.trace.events[event];
  const std::uint32_t node = job_.node_of_event[event];
  if (evicted_[node]) {
    if (e.factor < 1) return false;
    evicted_[node] = 0;
    present_.add(node, event);
    batch_slot_[node] = static_cast<std::uint32_t>(batch_added_.size());
    batch_added_.push_back(event);
    return true;
  }
  if (e.factor < 1) {
    slow_[e.node] = {e.factor, node};
  } else {
    slow_.erase(e.node);
  }
  reprice_at_next_iteration();
  if (stragglers_ != StragglerHandling::ignore) {
    engine_.cancel(detection_event_);
    detection_event_ = engine_.schedule_after(job_.scenario.cluster.straggler_detection_ms, [this] {
      detect_stragglers();
    });
  }
  return false;
}

void PolicyModel::detect_stragglers() {
  if (stragglers_ == StragglerHandling::mitigate) {
    on_stragglers_detected();
    return;
  }
  std::vector<std::string> lost;
  for (const auto& [name, slow] : slow_) {
    evicted_[slow.node] = 1;
    present_.remove(slow.node);
    lost.push_back(name);
  }
  slow_.clear();
  if (lost.empty()) return;
  record_point();
  on_change({}, lost);
}

double PolicyModel::speed_of(const std::string& node) const {
  const auto it = slow_.find(node);
  return it == slow_.end() ? 1.0 : it->second.factor;
}

NodeSpeeds PolicyModel::slow_nodes() const {
  NodeSpeeds out;
  for (const auto& [name, slow] : slow_) out[name] = slow.factor;
  return out;
}

double PolicyModel::straggler_slowdown() const {
  double slowest = 1;
  for (const auto& [name, slow] : slow_) slowest = std::min(slowest, slow.factor);
  return 1 / slowest;
}

double PolicyModel::plan_slowdown(const Plan& plan, const NodeSpeeds& speeds) const {
  if (speeds.empty()) return 1;
  const Milliseconds full = iteration_ms_at_speeds(cost(), plan, {});
  return full > 0 ? iteration_ms_at_speeds(cost(), plan, speeds) / full : 1;
}

// Speeds changed: the training in progress goes on at the new pace from
// its next iteration boundary (a stopped one is priced when it starts, a
// save in progress when it ends).
void PolicyModel::reprice_at_next_iteration() {
  engine_.cancel(reprice_event_);
  if (activity_ != Activity::training) return;
  reprice_event_ = engine_.schedule_at(next_iteration_boundary(), [this] {
    if (activity_ != Activity::training) return;
    leave_activity();
    current_iteration_ms_ = full_speed_iteration_ms_ * straggler_slowdown();
    record_point();
    schedule_checkpoint();
  });
}

}  // namespace oobleck::sim::detail
