// Where every node of a plan sits: its pipeline, its position in it and the
// contiguous layers its stages cover. Ranks follow the plan: pipelines in
// order, nodes in order (spare nodes come after, holding nothing).
#pragma once

#include <algorithm>
#include <climits>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::executor {

struct Seat {
  int pipeline = 0;
  int position = 0;
  int layer_begin = 0, layer_end = 0;
};

[[nodiscard]] inline std::vector<Seat> seats_of(const Plan& plan) {
  std::vector<Seat> out;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
      Seat s{static_cast<int>(p), static_cast<int>(r), INT_MAX, -1};
      for (const auto& st : pipeline.stages) {
        if (st.node != static_cast<int>(r)) continue;
        if (st.gpus != 1) throw InputError("plan: tensor-parallel stages (gpus > 1) are not run by oobleck-run yet");
        s.layer_begin = std::min(s.layer_begin, st.layer_begin);
        s.layer_end = std::max(s.layer_end, st.layer_end);
      }
      if (s.layer_end < 0) throw InputError("plan: node " + pipeline.nodes[r] + " holds no stage");
      out.push_back(s);
    }
  }
  return out;
}

// Every node of the plan in rank order: pipelines' nodes, then spares.
[[nodiscard]] inline std::vector<std::string> ranked_nodes(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& p : plan.pipelines) out.insert(out.end(), p.nodes.begin(), p.nodes.end());
  out.insert(out.end(), plan.spare_nodes.begin(), plan.spare_nodes.end());
  return out;
}

}  // namespace oobleck::executor
