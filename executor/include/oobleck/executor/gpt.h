// The GPT-2-style decoder, layer by layer, as pipelines hold it. Includes
// libtorch: only the executor's own sources and tests include this header.
//
// Layer 0: token + learned position embedding. Layers 1..L: pre-LayerNorm
// blocks (causal self-attention, GELU MLP, GPT-2 biases). Layer L+1: final
// LayerNorm and the LM head, whose weight is the token embedding's (tied).
// Every layer's weights come from (seed, layer index) alone, so any process
// that builds layer i gets the same weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "oobleck/executor/model_config.h"

namespace oobleck::executor {

class GptLayer : public torch::nn::Module {
 public:
  // Embedding: int64 token ids (B, S) -> (B, S, h). Block: (B, S, h) ->
  // (B, S, h). Head: (B, S, h) -> logits (B, S, vocab).
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  // The parameters an optimizer updates for this layer when it runs alone
  // (the head's copy of the tied weight included).
  [[nodiscard]] std::vector<torch::Tensor> own_parameters() { return parameters(); }
};

[[nodiscard]] std::shared_ptr<GptLayer> make_layer(const ModelConfig& config, int index, std::uint64_t seed);

// Cross-entropy of logits (B, S, V) against targets (B, S).
[[nodiscard]] torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets);

// The whole model in one process; the head uses the embedding's weight itself.
class Gpt {
 public:
  Gpt(const ModelConfig& config, std::uint64_t seed);
  [[nodiscard]] torch::Tensor forward(const torch::Tensor& tokens);  // logits
  [[nodiscard]] std::vector<torch::Tensor> parameters() const;       // each tensor once
  [[nodiscard]] const std::vector<std::shared_ptr<GptLayer>>& layers() const { return layers_; }
  void to(torch::Device device, torch::Dtype dtype);

 private:
  ModelConfig config_;
  std::vector<std::shared_ptr<GptLayer>> layers_;
};

}  // namespace oobleck::executor
