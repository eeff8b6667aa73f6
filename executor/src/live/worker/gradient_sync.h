// Gradient synchronisation across pipelines whose stages hold a layer at
// different tensor-parallel degrees. Each split parameter is cut into the
// layer's pieces (recovery::layer_pieces): a piece's gradient is summed, in
// float64, over one holder per stage, so that every slice of the gradient
// counts each replica exactly once. A replicated parameter (LayerNorms,
// biases added after an all-reduce, the embedding and the head), where
// every stage holds its layer at one degree, is summed per shard index over
// the stages: shard s of a stage computed what its shard 0 did, so no copy
// travels between the shards. Where the degrees differ it is summed over
// every holder, shard 0 of each stage giving its gradient and the other
// shards zeros. With every degree 1 this is the plain per-layer all-reduce
// among the layer's holders, in the same order, so results stay bit for bit
// those of one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "generation_groups.h"
#include "model/train_common.h"
#include "oobleck/executor/model_config.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

// A region of a tensor: viewed as `view`, [begin, begin + length) along
// `dim`; an empty view is the whole tensor.
struct TensorRegion {
  std::vector<std::int64_t> view;
  int dim = 0;
  std::int64_t begin = 0, length = 0;
  [[nodiscard]] torch::Tensor of(const torch::Tensor& t) const {
    return view.empty() ? t : t.view(view).narrow(dim, begin, length);
  }
};

// One part of one slot's gradient, summed over `holders` (worker ranks).
struct GradientPart {
  std::size_t slot = 0;
  TensorRegion region;
  std::vector<int> holders;
  bool counted = false;  // this worker adds the part's squared norm to the global norm
};

struct GradientPlan {
  std::vector<GradientPart> parts;  // in slot order; tied slots are apart
  std::vector<std::size_t> copies;  // replicated slots this worker holds a copy of: they give zeros
  std::vector<int> tied_holders;    // the tied weight's gradient is summed over these (see above)
  bool tied_counted = false;
};

[[nodiscard]] GradientPlan plan_gradients(const std::vector<recovery::WorkerSeat>& seats, int rank,
                                          const std::vector<GradientSlot>& slots, const ModelConfig& model);

// Every group some part is summed over, for every worker of the generation
// alike (each makes the ones it belongs to).
[[nodiscard]] std::set<std::vector<int>> gradient_groups(const std::vector<recovery::WorkerSeat>& seats,
                                                         const ModelConfig& model);

// The sums over the holders, written as the parameters' gradients, then
// clipped by the global norm (each label's norm from its counted parts,
// added up in label order on every trainer alike).
void synchronise_gradients(std::vector<GradientSlot>& slots, const GradientPlan& plan, GenerationGroups& groups,
                           int last_layer, double clip_norm);

}  // namespace oobleck::executor
