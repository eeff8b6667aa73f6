// Derivation in synced_iteration.h.
#include "synced_iteration.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {

Milliseconds synced_iteration_ms(const CostModel& cost, const std::vector<TemplateRun>& runs, int ranks,
                                 double allreduce_speed) {
  Milliseconds slowest = 0;
  for (const auto& run : runs) slowest = std::max(slowest, run.pipeline_ms);
  const bool steps = cost.optimizer_bytes_per_s() > 0;
  if (ranks <= 1 && !steps) return slowest;
  const bool at_end = cost.gradient_sync() == GradientSync::after_backward;
  std::vector<Milliseconds> ready(static_cast<std::size_t>(cost.layers()), -std::numeric_limits<double>::infinity());
  std::vector<std::vector<Milliseconds>> backward_end(runs.size());  // per run and stage
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const auto& run = runs[k];
    const auto& stages = *run.stages;
    Milliseconds stage_end = run.pipeline_ms;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const Stage& st = stages[s];
      const double speed = run.stage_speeds ? (*run.stage_speeds)[s] : 1.0;
      if (run.last_backward_ms) stage_end = (*run.last_backward_ms)[s];
      backward_end[k].push_back(stage_end);
      const Milliseconds backward = cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute) / speed;
      Milliseconds t = at_end ? stage_end : stage_end - backward;
      for (int l = st.layer_end - 1; l >= st.layer_begin; --l) {
        if (!at_end) t += cost.layer_backward_ms(l, st.gpus, st.recompute) / speed;
        ready[l] = std::max(ready[l], t);
      }
      if (s + 1 < stages.size()) stage_end -= backward + cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus);
    }
  }
  // The all-reduces: one per layer, or per bucket. Each is ready at the
  // latest of its layers, and carries their bytes.
  std::vector<int> of(static_cast<std::size_t>(cost.layers()));
  if (cost.gradient_sync() == GradientSync::buckets) {
    std::vector<const std::vector<Stage>*> layouts;
    for (const auto& run : runs) layouts.push_back(run.stages);
    of = gradient_buckets(cost.profile(), cost.gradient_bucket_bytes(), layouts);
  } else {
    for (int l = 0; l < cost.layers(); ++l) of[static_cast<std::size_t>(l)] = l;
  }
  const int count = *std::max_element(of.begin(), of.end()) + 1;
  std::vector<Milliseconds> reduce_ready(static_cast<std::size_t>(count), -std::numeric_limits<double>::infinity());
  std::vector<double> reduce_bytes(static_cast<std::size_t>(count), 0.0);
  for (int l = 0; l < cost.layers(); ++l) {
    const auto r = static_cast<std::size_t>(of[static_cast<std::size_t>(l)]);
    reduce_ready[r] = std::max(reduce_ready[r], ready[static_cast<std::size_t>(l)]);
    reduce_bytes[r] += static_cast<double>(cost.profile().layers[static_cast<std::size_t>(l)].param_bytes);
  }
  Milliseconds end = slowest;
  std::vector<int> order;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const auto& run = runs[k];
    for (std::size_t s = 0; s < run.stages->size(); ++s) {
      const Stage& st = (*run.stages)[s];
      // The stage's all-reduces (a bucket never crosses a stage), in the order they become ready.
      order.clear();
      for (int l = st.layer_begin; l < st.layer_end; ++l) {
        const int r = of[static_cast<std::size_t>(l)];
        if (order.empty() || order.back() != r) order.push_back(r);
      }
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return reduce_ready[a] < reduce_ready[b]; });
      Milliseconds finish = -std::numeric_limits<double>::infinity();
      for (int r : order) {
        if (ranks <= 1) break;
        const auto i = static_cast<std::size_t>(r);
        finish = std::max(finish, reduce_ready[i]) +
                 cost.gradient_allreduce_ms(reduce_bytes[i] / st.gpus, ranks) / allreduce_speed;
      }
      if (steps) {  // the stage steps once its backward and its all-reduces are done
        const double speed = run.stage_speeds ? (*run.stage_speeds)[s] : 1.0;
        finish = std::max(finish, backward_end[k][s]) + cost.stage_optimizer_ms(st.layer_begin, st.layer_end, st.gpus) / speed;
      }
      end = std::max(end, finish);
    }
  }
  return end;
}

}  // namespace oobleck::detail
