// One stage as the iteration model (iteration.cpp) plays it: its costs per
// pass, and the state of its passes, arrivals and gradients as the
// iteration goes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "oobleck/common/one_f_one_b.h"
#include "oobleck/sim/iteration.h"

namespace oobleck::sim {

struct PlayedStage {
  int pipeline = 0;
  int index = 0;
  Stage stage;
  std::string node;
  Milliseconds forward_ms = 0;  // per pass, tensor-parallel all-reduces included
  Milliseconds backward_ms = 0;
  Milliseconds forward_allreduce_ms = 0;  // of which the tensor-parallel all-reduces
  Milliseconds backward_allreduce_ms = 0;
  int tp_allreduces_per_pass = 0;
  Milliseconds optimizer_ms = 0;
  std::vector<PipelinePass> order;
  std::size_t next = 0;
  int device = -1;  // shared with other stages; -1: its own
  bool busy = false;
  std::vector<char> activation_arrived;  // per microbatch, from the previous stage
  std::vector<char> gradient_arrived;    // per microbatch, from the next stage
  int layers_unreduced = 0;
  bool backward_done = false;
  Milliseconds passes_end_ms = 0;  // its last pass ends (0: it has none)
  Milliseconds compute_ms = 0;
  Milliseconds tp_allreduce_ms = 0;
  Milliseconds finished_ms = 0;
};

// Stage `s` of pipeline `p` of `plan`, priced: its passes (with the
// options' extra forward work), the part of each that is tensor-parallel
// all-reduces and how many there are, and its optimizer step. Its order,
// arrivals and device are the model's to set.
[[nodiscard]] PlayedStage priced_stage(const CostModel& cost, const IterationOptions& options, const Plan& plan,
                                       std::size_t p, int s);

}  // namespace oobleck::sim
