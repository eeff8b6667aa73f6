#include "restarting_policy.h"

#include <algorithm>

namespace oobleck::sim::detail {
namespace {

std::vector<std::string> placeholder_names(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(std::to_string(i));
  return names;
}

}  // namespace

const RestartingPolicy::CountPlan& RestartingPolicy::plan_for(int count) {
  // No plan uses more than B pipelines (each takes a microbatch at least) of
  // the largest template's nodes; nodes beyond are spares, which these plans
  // do not name. Larger counts get that count's plan, so planning costs
  // O(min(count, B x largest template)), however many nodes are present.
  long long most_used = 0;
  for (const auto& t : job_.cluster.templates.templates) {
    most_used = std::max(most_used, static_cast<long long>(t.nodes) * job_.options.global_microbatches);
  }
  count = static_cast<int>(std::min<long long>(count, std::max(1LL, most_used)));
  auto [it, fresh] = plans_.try_emplace(count);
  if (fresh && count > 0) {
    CountPlan& cp = it->second;
    try {
      const TemplateSet& templates = job_.cluster.templates;
      cp.plan = job_.cost->pipelines_per_node() > 1 && !templates.templates.empty()
                    ? instantiate_sharing_nodes(*job_.cost, templates.templates.front(), placeholder_names(count), 0,
                                                job_.options.global_microbatches)
                    : instantiate(*job_.cost, templates, placeholder_names(count), 0, job_.options.global_microbatches);
      cp.exists = true;
      cp.iteration_ms = iteration_ms(cp.plan);
      cp.node_state_bytes = largest_node_state(*job_.cost, cp.plan);
      cp.used = plan_node_count(cp.plan) - static_cast<int>(cp.plan.spare_nodes.size());
    } catch (const NoPlanError&) {
      cp.exists = false;
    }
  }
  return it->second;
}

void RestartingPolicy::restart(Milliseconds extra_downtime) {
  const CountPlan& cp = plan_for(static_cast<int>(present_.size()));
  members_.clear();
  member_set_.clear();
  if (!cp.exists) {
    enter(Activity::waiting);
    return;
  }
  members_ = present_.first(static_cast<std::size_t>(cp.used));
  member_set_.insert(members_.begin(), members_.end());
  ++result_.restarts;
  const Cluster& c = job_.scenario.cluster;
  const CountPlan* chosen = &cp;  // map entries never move
  down_for(Activity::restart, extra_downtime + c.restart_ms + c.communicator_ms + load_ms(cp), [this, chosen] {
    running_ = chosen;
    start_training(chosen->iteration_ms, static_cast<int>(chosen->plan.pipelines.size()),
                   save_per_iteration_ms(*chosen));
    trained_since_restart();
  });
}

bool RestartingPolicy::growth_helps() {
  if (!running_) return true;
  const CountPlan& cp = plan_for(static_cast<int>(present_.size()));
  return cp.exists && cp.used > static_cast<int>(members_.size()) &&
         cp.iteration_ms + save_per_iteration_ms(cp) <
             (running_->iteration_ms + save_per_iteration_ms(*running_)) * (1 - 1e-9);
}

double RestartingPolicy::straggler_slowdown() const {
  if (!running_) return 1;
  // Place i (placeholder_names) is the i-th member.
  NodeSpeeds speeds;
  for (const auto& p : running_->plan.pipelines) {
    for (const auto& place : p.nodes) {
      const auto rank = static_cast<std::size_t>(std::stoi(place));
      if (rank < members_.size()) {
        if (const double s = speed_of(members_[rank]); s < 1) speeds[place] = s;
      }
    }
  }
  return plan_slowdown(running_->plan, speeds);
}

std::vector<std::string> RestartingPolicy::members_among(const std::vector<std::string>& nodes) const {
  std::vector<std::string> out;
  for (const auto& node : nodes) {
    if (member_set_.count(node)) out.push_back(node);
  }
  return out;
}

}  // namespace oobleck::sim::detail
