// The gradient all-reduces the iteration model (iteration.cpp) plays: one
// per layer, or per bucket (cut alike in every pipeline: gradient_buckets);
// with tied embeddings, the last layer's joins the first layer's.
#pragma once

#include <vector>

#include "oobleck/sim/iteration.h"

namespace oobleck::sim {

// One all-reduce: its layers, the stages holding any of them, the bytes it
// carries, and the holders' last backwards still to come.
struct Reduction {
  std::vector<int> layers;
  std::vector<int> stages;
  double bytes = 0;
  int unfinished = 0;
};

struct GradientReductions {
  std::vector<Reduction> all;
  std::vector<int> of_layer;  // per layer: its all-reduce
};

// `holders`: per layer, the played stages holding it.
[[nodiscard]] GradientReductions gradient_reductions(const CostModel& cost, const Plan& plan,
                                                     const IterationOptions& options,
                                                     const std::vector<std::vector<int>>& holders);

}  // namespace oobleck::sim
