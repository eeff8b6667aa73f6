// Every layer of a model at every tensor-parallel degree of a node of
// several GPUs, measured among that many local worker processes (node.cpp).
#pragma once

#include <utility>
#include <vector>

#include "oobleck/executor/profiler.h"

namespace oobleck::executor {

// One layer on one worker of a degree: its passes and what it kept for the backward.
struct LayerShardCost {
  Milliseconds forward_ms = 0;
  Milliseconds backward_ms = 0;
  Bytes activation_bytes = 0;
};

struct NodeDegreeTimes {
  int degree = 1;
  std::vector<LayerShardCost> layers;
};

// Degrees ascending, 1 first: those that divide both the node's GPUs and
// the model's heads (a block cannot be split otherwise). Starts options.gpus_per_node - 1 workers
// (`options.program node-peer ...`); InputError on CUDA.
[[nodiscard]] std::vector<NodeDegreeTimes> measure_node(const MeasureOptions& options, const Progress& progress);

}  // namespace oobleck::executor
