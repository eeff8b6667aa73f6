// What the GPT-2 and Llama layers share: the per-layer weight generator, the
// normal draw, and the two autograd functions of Megatron-style tensor
// parallelism.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "oobleck/executor/gpt.h"

namespace oobleck::executor {

// One generator per (seed, layer): mixed so that nearby seeds and layers
// give unrelated streams (splitmix64 finaliser).
inline at::Generator layer_generator(std::uint64_t seed, int index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return at::detail::createCPUGenerator(z);
}

// N(0, std) in float32 from `gen`, into `t`.
inline void normal_(torch::Tensor& t, double std, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  t.copy_(torch::randn(t.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32)) * std);
}

// Identity forward; the gradient summed over the group: the input of a
// column-parallel matrix, which every shard reads whole.
class SumGradient : public torch::autograd::Function<SumGradient> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const ShardSum* sum) {
    ctx->saved_data["sum"] = reinterpret_cast<std::int64_t>(sum);
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = grads[0].clone(at::MemoryFormat::Contiguous);
    (*reinterpret_cast<const ShardSum*>(ctx->saved_data["sum"].toInt()))(g);
    return {g, torch::Tensor()};
  }
};

// Summed over the group forward; identity backward: the output of a
// row-parallel matrix, each shard's part of one product.
class SumOutput : public torch::autograd::Function<SumOutput> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& partial, const ShardSum* sum) {
    auto out = partial.clone(at::MemoryFormat::Contiguous);
    (*sum)(out);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

// The Llama layers (llama.cpp), with make_layer's checks already made.
[[nodiscard]] std::shared_ptr<GptLayer> make_llama_layer(const ModelConfig& config, int index, std::uint64_t seed,
                                                         TensorShard shard);
// A TorchScript model's layer (scripted.cpp).
[[nodiscard]] std::shared_ptr<GptLayer> make_scripted_layer(const ModelConfig& config, int index);
[[nodiscard]] SplitLayout llama_split_layout(const ModelConfig& config, int index, const std::string& parameter);

}  // namespace oobleck::executor
