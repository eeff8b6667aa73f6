// What reports say about plans and template sets, and the defaults the
// command line derives from them.
#include <algorithm>
#include <functional>
#include <map>

#include "oobleck/planner.h"

namespace oobleck {

int default_template_microbatches(const Profile& profile, int max_nodes) {
  return static_cast<int>(std::min<long long>(static_cast<long long>(profile.layers.size()),
                                              static_cast<long long>(max_nodes) * profile.hardware.gpus_per_node));
}

std::vector<std::pair<int, int>> nodes_without_template(const TemplateSet& templates) {
  std::vector<std::pair<int, int>> ranges;
  for (int n = 1; n <= templates.max_nodes; ++n) {
    if (templates.find(n)) continue;
    if (!ranges.empty() && ranges.back().second == n - 1) {
      ranges.back().second = n;
    } else {
      ranges.emplace_back(n, n);
    }
  }
  return ranges;
}

std::vector<std::string> numbered_nodes(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back("node" + std::to_string(i));
  return names;
}

int plan_node_count(const Plan& plan) {
  // Pipelines that share nodes name each of them pipelines_per_node times.
  int named = 0;
  for (const auto& p : plan.pipelines) named += static_cast<int>(p.nodes.size());
  return named / std::max(1, plan.pipelines_per_node) + static_cast<int>(plan.spare_nodes.size());
}

std::set<int> template_sizes_used(const Plan& plan) {
  std::set<int> sizes;
  for (const auto& p : plan.pipelines) sizes.insert(p.template_nodes);
  return sizes;
}

std::vector<PipelineGroup> group_pipelines(const Plan& plan) {
  // Keyed by (template size, microbatches), largest first.
  std::map<std::pair<int, int>, PipelineGroup, std::greater<>> groups;
  for (const auto& p : plan.pipelines) {
    PipelineGroup& group = groups[{p.template_nodes, p.microbatches}];
    group.template_nodes = p.template_nodes;
    group.microbatches = p.microbatches;
    group.count += 1;
    group.iteration_ms = p.iteration_ms;
  }
  std::vector<PipelineGroup> out;
  for (const auto& [key, group] : groups) out.push_back(group);
  return out;
}

int nodes_after(const Plan& current, std::size_t lost, std::size_t added) {
  return std::max(1, plan_node_count(current) + static_cast<int>(added) - static_cast<int>(lost));
}

bool plan_matches_profile(const Plan& plan, const Profile& profile) {
  return plan.profile_fingerprint.empty() || plan.profile_fingerprint == profile_fingerprint(profile);
}

}  // namespace oobleck
