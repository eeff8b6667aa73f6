// One trainer's part of a step, up to its commit: the forward and backward
// passes of its pipeline's microbatches in 1F1B order (oobleck/common/
// one_f_one_b.h, the order the simulator plays), activations and their
// gradients across stage boundaries, then each gradient summed over its
// holders in float64 and clipped by the global norm (gradient_sync.h).
//
// Across a stage boundary, every GPU of the next stage receives the whole
// activation from one GPU of this stage: GPU k of a stage of degree t
// receives from GPU k mod t' of the stage before it (degree t'), and
// gradients flow back the same way. Within a stage, every GPU holds the
// same activations and input gradients (the blocks' all-reduces make them
// so), so any one of them will do.
//
// A stage the plan makes recompute (Recompute::full) runs each forward
// without keeping what autograd would, only every layer's input; its
// backward runs each layer's forward again, from the last layer down, and
// that layer's backward at once. The same operations on the same inputs:
// the gradients, and so the losses, are those of the stage that keeps its
// activations, bit for bit. A stage recomputing selectively
// (Recompute::selective) keeps all but its blocks' attention scores, which
// each block's backward computes again (GptLayer::set_attention_recompute).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "generation_groups.h"
#include "gradient_sync.h"
#include "inbox.h"
#include "model/layer_state.h"
#include "protocol/protocol.h"
#include "oobleck/common/one_f_one_b.h"
#include "oobleck/planner.h"
#include "model/train_common.h"

namespace oobleck::executor {

// Where a trainer sits in the generation in hand.
struct TrainerPlace {
  int generation = 0;
  const Plan* plan = nullptr;
  const std::vector<recovery::WorkerSeat>* seats = nullptr;
  int rank = 0;
};

// The microbatches a trainer's gradient sums hold for one step, once its
// passes are over (step -1 while they are not: sums being changed). A
// generation that begins while the step is uncommitted may let a pipeline
// whose workers all got this far keep them, and train only what it adds
// (protocol::NewGeneration::kept_microbatches).
struct PassedSums {
  int step = -1;
  double loss = 0;                // this trainer's share of those microbatches' loss
  std::vector<int> microbatches;  // of the global batch, in the order trained
};

class PipelineStep {
 public:
  PipelineStep(const TrainOptions& options, const std::vector<std::uint16_t>& tokens, Inbox& inbox,
               const TrainerPlace& place, GenerationGroups& groups, const GradientPlan& gradients,
               std::map<int, HeldLayer>& held, std::vector<GradientSlot>& slots)
      : o_(options),
        tokens_(tokens),
        inbox_(inbox),
        place_(place),
        groups_(groups),
        gradients_(gradients),
        held_(held),
        slots_(slots) {}

  // Forward and backward passes of `microbatches` (of the global batch) in
  // `step`, then gradient synchronisation; returns this trainer's share of
  // the step's loss (non-zero on last stages' shard 0). Where `passed`
  // holds this step already, its sums are kept and added to; otherwise they
  // start from nothing. `passed` then holds this step, and protocol::Passed
  // goes to the master, before the synchronisation (which only reads the
  // sums). With `record`, every pass is timed for timeline().
  double run(int step, bool record, const std::vector<int>& microbatches, PassedSums& passed);
  void record_optimizer(double start_ms, double end_ms);
  // The tensor-parallel all-reduce of a sharded layer, within this step's
  // passes: timed, and recorded with the pass it belongs to.
  void sum_over_shards(torch::Tensor& t);
  [[nodiscard]] protocol::StepTimeline timeline() const { return timeline_; }
  // The last step's passes, waits for neighbours left out.
  [[nodiscard]] double compute_ms() const { return timeline_.compute_ms; }

 private:
  double one_f_one_b(int step, const std::vector<int>& microbatches);
  [[nodiscard]] const recovery::WorkerSeat& seat() const { return (*place_.seats)[static_cast<std::size_t>(place_.rank)]; }
  // Shard 0's rank and degree of stage `stage` of this trainer's pipeline.
  [[nodiscard]] std::pair<int, int> stage_group(int stage) const;
  torch::Tensor microbatch_tokens(int step, int microbatch, bool targets) const;  // microbatch: of the global batch
  torch::Tensor forward_layers(torch::Tensor x);
  // Recomputation: the forward keeping each layer's input in `kept`; the
  // backward from the output's gradient (undefined on the last stage, which
  // recomputes its loss from `targets`), returning the input's gradient.
  torch::Tensor forward_keeping_inputs(torch::Tensor x, std::vector<torch::Tensor>& kept);
  torch::Tensor recompute_backward(std::vector<torch::Tensor>& kept, torch::Tensor gradient,
                                   const torch::Tensor& targets);
  void record(char kind, int index, double start_ms, double end_ms);

  const TrainOptions& o_;
  const std::vector<std::uint16_t>& tokens_;
  Inbox& inbox_;
  TrainerPlace place_;
  GenerationGroups& groups_;
  const GradientPlan& gradients_;
  std::map<int, HeldLayer>& held_;
  std::vector<GradientSlot>& slots_;
  bool recording_ = false;
  PipelinePass pass_{};  // the one running
  protocol::StepTimeline timeline_;
};

}  // namespace oobleck::executor
