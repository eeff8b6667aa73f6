#include "oobleck/recovery/seats.h"

#include <algorithm>
#include <climits>
#include <set>

namespace oobleck::recovery {

std::vector<Seat> seats_of(const Plan& plan) {
  std::vector<Seat> out;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
      Seat s{static_cast<int>(p), static_cast<int>(r), INT_MAX, -1};
      for (const auto& st : pipeline.stages) {
        if (!stage_on_node(st, static_cast<int>(r))) continue;
        s.layer_begin = std::min(s.layer_begin, st.layer_begin);
        s.layer_end = std::max(s.layer_end, st.layer_end);
      }
      if (s.layer_end < 0) throw InputError("plan: node " + pipeline.nodes[r] + " holds no stage");
      out.push_back(s);
    }
  }
  return out;
}

int node_count(const Plan& plan) { return plan_node_count(plan); }

std::vector<std::string> trainer_nodes(const Plan& plan) {
  std::vector<std::string> out;
  std::set<std::string> seen;  // pipelines sharing a node: it ranks once
  for (const auto& p : plan.pipelines) {
    for (const auto& node : p.nodes) {
      if (seen.insert(node).second) out.push_back(node);
    }
  }
  return out;
}

std::vector<std::string> ranked_nodes(const Plan& plan) {
  std::vector<std::string> out = trainer_nodes(plan);
  out.insert(out.end(), plan.spare_nodes.begin(), plan.spare_nodes.end());
  return out;
}

std::map<std::string, LayerRange> node_layers(const Plan& plan) {
  std::map<std::string, LayerRange> out;
  for (const Seat& seat : seats_of(plan)) {
    const std::string& node = plan.pipelines[static_cast<std::size_t>(seat.pipeline)].nodes[static_cast<std::size_t>(seat.position)];
    const auto [it, first] = out.try_emplace(node, seat.layer_begin, seat.layer_end);
    if (!first) it->second = {std::min(it->second.first, seat.layer_begin), std::max(it->second.second, seat.layer_end)};
  }
  return out;
}

std::string pipeline_shape(const Plan& plan) {
  std::string out;
  for (const auto& p : plan.pipelines) {
    if (!out.empty()) out += '+';
    out += std::to_string(p.nodes.size());
  }
  return out;
}

}  // namespace oobleck::recovery
