// Pieces of a training step shared by the single-process reference and the
// pipeline workers, so that both compute exactly the same thing.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "oobleck/executor/train.h"

namespace oobleck::executor {

[[nodiscard]] inline torch::Tensor long_tensor(const std::vector<std::int64_t>& values, std::int64_t rows,
                                               std::int64_t cols) {
  return torch::from_blob(const_cast<std::int64_t*>(values.data()), {rows, cols}, torch::kLong).clone();
}

[[nodiscard]] inline torch::optim::AdamWOptions adamw_options(const TrainOptions& o) {
  return torch::optim::AdamWOptions(o.learning_rate).weight_decay(o.weight_decay);
}

// Scales gradients so that their global norm is at most `max_norm`, as
// torch.nn.utils.clip_grad_norm_ does.
inline void clip(const std::vector<torch::Tensor>& grads, double total_norm, double max_norm) {
  const double coefficient = max_norm / (total_norm + 1e-6);
  if (coefficient >= 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) g.mul_(coefficient);
}

}  // namespace oobleck::executor
