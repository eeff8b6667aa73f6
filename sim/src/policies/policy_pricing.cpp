// What a policy's plans cost to train: iterations played by the iteration
// model (iteration.h) with the job's options, cached by the plan's shape, a
// scenario's iteration times over them, and when each pipeline's passes end
// (for a loss during a step: oobleck_policy.cpp).
#include <algorithm>

#include "policy_model.h"

namespace oobleck::sim::detail {

Milliseconds PolicyModel::iteration_ms(const Plan& plan, const IterationOptions& extra) {
  if (overrides_.iteration_ms || !overrides_.iteration_ms_by_nodes.empty()) {
    const int nodes = plan_node_count(plan) - static_cast<int>(plan.spare_nodes.size());
    if (const auto given = overridden_iteration_ms(overrides_, nodes)) return *given;
  }
  return played_iteration_ms(plan, extra);
}

namespace {

// What a pipeline's passes depend on: its microbatches, interleave and stages.
std::vector<double> pipeline_shape(const Pipeline& pipeline) {
  std::vector<double> shape = {static_cast<double>(pipeline.microbatches), static_cast<double>(pipeline.interleave)};
  for (const auto& st : pipeline.stages) {
    shape.insert(shape.end(), {static_cast<double>(st.layer_begin), static_cast<double>(st.layer_end),
                               static_cast<double>(st.gpus), static_cast<double>(st.node),
                               static_cast<double>(st.recompute)});
  }
  return shape;
}

}  // namespace

std::vector<Milliseconds> PolicyModel::passes_end_ms(const Plan& plan) {
  // A pipeline's passes need nothing of the others: each shape is played
  // once, alone.
  std::vector<Milliseconds> out;
  for (const Pipeline& pipeline : plan.pipelines) {
    auto shape = pipeline_shape(pipeline);
    auto it = passes_cache_.find(shape);
    if (it == passes_cache_.end()) {
      Plan alone = plan;
      alone.pipelines = {pipeline};
      Milliseconds end = 0;
      for (const auto& stage : played_iteration(alone).stages) end = std::max(end, stage.passes_end_ms);
      it = passes_cache_.emplace(std::move(shape), end).first;
    }
    out.push_back(it->second);
  }
  return out;
}

Milliseconds PolicyModel::played_iteration_ms(const Plan& plan, const IterationOptions& extra) {
  // The key: the multiset of pipeline shapes (stages, microbatches, extra
  // work); node names do not change the iteration.
  std::vector<std::vector<double>> shapes;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    std::vector<double> shape = pipeline_shape(plan.pipelines[p]);
    shape.push_back(-1);
    if (!extra.extra_forward_ms.empty()) {
      shape.insert(shape.end(), extra.extra_forward_ms[p].begin(), extra.extra_forward_ms[p].end());
    }
    shapes.push_back(std::move(shape));
  }
  std::sort(shapes.begin(), shapes.end());
  std::vector<double> key;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    // Runs of equal shapes collapse to (count, shape).
    std::size_t j = i;
    while (j + 1 < shapes.size() && shapes[j + 1] == shapes[i]) ++j;
    key.push_back(static_cast<double>(j - i + 1));
    key.insert(key.end(), shapes[i].begin(), shapes[i].end());
    i = j;
  }
  if (auto it = iteration_cache_.find(key); it != iteration_cache_.end()) return it->second;
  const Milliseconds t = played_iteration(plan, extra).iteration_ms;
  iteration_cache_.emplace(std::move(key), t);
  return t;
}

IterationResult PolicyModel::played_iteration(const Plan& plan, const IterationOptions& extra) const {
  IterationOptions options = extra;
  options.optimizer_bytes_per_s = job_.profile.hardware.memory_bytes_per_s;
  options.gradient_sync = job_.options.gradient_sync;
  options.gradient_bucket_bytes = job_.options.gradient_bucket_bytes;
  return simulate_iteration(cost(), plan, options);
}

}  // namespace oobleck::sim::detail
