// Every layer of a model at every tensor-parallel degree of a node of
// several GPUs, measured among that many local worker processes (node.cpp).
#pragma once

#include <utility>
#include <vector>

#include "oobleck/executor/profiler.h"

namespace oobleck::executor {

struct NodeDegreeTimes {
  int degree = 1;
  std::vector<std::pair<Milliseconds, Milliseconds>> layers;  // forward, backward
};

// Degrees ascending, 1 first: those that divide both the node's GPUs and
// the model's heads (a block cannot be split otherwise). Starts options.gpus_per_node - 1 workers
// (`options.program node-peer ...`); InputError on CUDA.
[[nodiscard]] std::vector<NodeDegreeTimes> measure_node(const MeasureOptions& options, const Progress& progress);

}  // namespace oobleck::executor
