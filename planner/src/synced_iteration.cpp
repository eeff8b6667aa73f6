// Derivation in synced_iteration.h.
#include "synced_iteration.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {

Milliseconds synced_iteration_ms(const CostModel& cost, const std::vector<TemplateRun>& runs, int ranks) {
  Milliseconds slowest = 0;
  for (const auto& run : runs) slowest = std::max(slowest, run.pipeline_ms);
  if (ranks <= 1) return slowest;
  const bool at_end = cost.gradient_sync() == GradientSync::after_backward;
  std::vector<Milliseconds> ready(static_cast<std::size_t>(cost.layers()), -std::numeric_limits<double>::infinity());
  for (const auto& run : runs) {
    const auto& stages = *run.stages;
    Milliseconds stage_end = run.pipeline_ms;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const Stage& st = stages[s];
      const Milliseconds backward = cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
      Milliseconds t = at_end ? stage_end : stage_end - backward;
      for (int l = st.layer_end - 1; l >= st.layer_begin; --l) {
        if (!at_end) t += cost.layer_backward_ms(l, st.gpus, st.recompute);
        ready[l] = std::max(ready[l], t);
      }
      if (s + 1 < stages.size()) stage_end -= backward + cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus);
    }
  }
  Milliseconds end = slowest;
  std::vector<int> order;
  for (const auto& run : runs) {
    for (const Stage& st : *run.stages) {
      order.clear();
      for (int l = st.layer_begin; l < st.layer_end; ++l) order.push_back(l);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ready[a] < ready[b]; });
      Milliseconds finish = -std::numeric_limits<double>::infinity();
      for (int l : order) {
        const double shard = static_cast<double>(cost.profile().layers[l].param_bytes) / st.gpus;
        finish = std::max(finish, ready[l]) + cost.gradient_allreduce_ms(shard, ranks);
      }
      end = std::max(end, finish);
    }
  }
  return end;
}

}  // namespace oobleck::detail
