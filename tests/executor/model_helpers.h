// What the model tests share: counting parameters and drawing token ids.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "oobleck/executor/model_config.h"

namespace oobleck::test {

[[nodiscard]] inline std::int64_t count(const std::vector<torch::Tensor>& tensors) {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// A batch of token ids of the model's context, drawn from `seed`.
[[nodiscard]] inline torch::Tensor tokens_for(const executor::ModelConfig& c, int batch, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(c.vocab, {batch, c.seq_len}, gen, torch::TensorOptions().dtype(torch::kLong));
}

}  // namespace oobleck::test
