#include "played_stage.h"

namespace oobleck::sim {
namespace {

// The part of each pass that is the stage's tensor-parallel all-reduces,
// and how many there are: two per layer whose passes have any (a layer
// replicated at the stage's degree has none).
void set_tensor_parallel(const CostModel& cost, PlayedStage& state) {
  const Stage& st = state.stage;
  if (st.gpus == 1) return;
  state.forward_allreduce_ms = cost.stage_forward_allreduce_ms(st.layer_begin, st.layer_end, st.gpus);
  state.backward_allreduce_ms = cost.stage_backward_allreduce_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
  for (int l = st.layer_begin; l < st.layer_end; ++l) {
    const bool split =
        cost.layer_forward_allreduce_ms(l, st.gpus) > 0 || cost.layer_backward_allreduce_ms(l, st.gpus) > 0;
    if (split) state.tp_allreduces_per_pass += 2;
  }
}

}  // namespace

PlayedStage priced_stage(const CostModel& cost, const IterationOptions& options, const Plan& plan, std::size_t p,
                         int s) {
  const Pipeline& pipeline = plan.pipelines[p];
  const Stage& st = pipeline.stages[static_cast<std::size_t>(s)];
  PlayedStage state;
  state.pipeline = static_cast<int>(p);
  state.index = s;
  state.stage = st;
  state.node = st.node < static_cast<int>(pipeline.nodes.size()) ? pipeline.nodes[st.node] : "";
  state.forward_ms = cost.stage_forward_ms(st.layer_begin, st.layer_end, st.gpus);
  if (!options.extra_forward_ms.empty()) state.forward_ms += options.extra_forward_ms[p].at(s);
  state.backward_ms = cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
  set_tensor_parallel(cost, state);
  if (options.optimizer_bytes_per_s > 0) {
    // Reads and writes the stage's weights and optimizer state once.
    state.optimizer_ms = 2.0 *
                         static_cast<double>(cost.stage_state_bytes_per_gpu(st.layer_begin, st.layer_end, st.gpus)) /
                         options.optimizer_bytes_per_s * 1000.0;
  }
  state.layers_unreduced = st.layer_end - st.layer_begin;
  return state;
}

}  // namespace oobleck::sim
