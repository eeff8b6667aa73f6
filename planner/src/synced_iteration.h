// The iteration of pipelines of different templates run side by side, with
// every layer's gradient all-reduced among all of them, as oobleck-sim plays
// it.
//
// Each pipeline holds every layer, so layer l's all-reduce among the p
// pipelines starts only once every pipeline has finished its last backward
// over l (each stage's last backward as the pipeline is played, where
// given; else:)
//   r_l = max over pipelines of (T_pipeline - the layer's offset from it),
// where, in 1F1B's cool-down, stage s ends its last backward
// (backward + transfer) of each earlier stage before its pipeline's end, and
// layer l of a stage is final once the stage's last backward has gone down
// to it (GradientSync::per_layer) or once that pass ends (after_backward).
// Each stage's GPUs (one network interface each) then carry their 1/t shard
// of their layers' all-reduces one after another, in the order the layers
// become ready:
//   finish = max(finish, r_l) + allreduce(bytes_l / t, p),
// and the iteration ends with the last of these. In buckets
// (GradientSync::buckets, cut alike in every template: gradient_buckets),
// a bucket is one all-reduce of its layers' bytes, ready at the latest of
// its layers' r_l.
//
// Where optimizer steps are priced, each stage then steps once its own
// backward and all-reduces are done, at max(e_s, finish_s) + O_s / speed,
// and the iteration ends with the last step.
//
// For pipelines of one template ending together this is T +
// iteration_tail_ms.
// With several templates it is more: a layer held by a stage that ends its
// backward early waits for the pipelines where the same layer is final
// last, and a pipeline given fewer microbatches because its own tail is long
// gains nothing, since its all-reduces wait for the slowest pipeline.
#pragma once

#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// One template's pipelines in an iteration: its stages and the longest of
// their times T(m) (pipelines of one template with fewer microbatches end
// earlier but all-reduce the same layers on the same kind of stages, so only
// the longest matters).
struct TemplateRun {
  const std::vector<Stage>* stages = nullptr;
  Milliseconds pipeline_ms = 0;
  // Per stage, the speed its node computes at (node_speeds.h): its backward
  // passes take their profiled time divided by it. Null: all at 1.
  const std::vector<double>* stage_speeds = nullptr;
  // Per stage, when its last backward ends, as the pipeline is played
  // (played_pipeline.h). Null: from pipeline_ms back through the drain.
  const std::vector<Milliseconds>* last_backward_ms = nullptr;
};

// The iteration of `runs` with `ranks` pipelines in all: the last gradient
// all-reduce's end, or where optimizer steps are priced the last stage's
// step, and never less than the slowest pipeline. Each
// all-reduce takes its time divided by `allreduce_speed` (node_speeds.h:
// collectives run by the nodes, at the slowest one's speed).
[[nodiscard]] Milliseconds synced_iteration_ms(const CostModel& cost, const std::vector<TemplateRun>& runs, int ranks,
                                               double allreduce_speed = 1);

}  // namespace oobleck::detail
