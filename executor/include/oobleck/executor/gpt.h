// The GPT-2-style decoder, layer by layer, as pipelines hold it. Includes
// libtorch: only the executor's own sources and tests include this header.
//
// Layer 0: token + learned position embedding. Layers 1..L: pre-LayerNorm
// blocks (causal self-attention, GELU MLP, GPT-2 biases). Layer L+1: final
// LayerNorm and the LM head, whose weight is the token embedding's (tied).
// Every layer's weights come from (seed, layer index) alone, so any process
// that builds layer i gets the same weights.
//
// Tensor parallelism as Megatron-LM does it: a block at degree t holds
// heads/t attention heads (query, key and value column-parallel, the output
// projection row-parallel) and 4h/t of the MLP's hidden units (the first
// matrix column-parallel, the second row-parallel). The outputs of the two
// row-parallel matrices are summed over the group in the forward pass
// (their biases added once, after), and the gradients of the inputs to the
// column-parallel ones in the backward pass. LayerNorms are replicated, and
// so are the embedding and the LM head: every GPU of their stage computes
// them whole (no parallel cross-entropy), so at degree t they cost what they
// cost at degree 1. A shard is cut from the whole layer as drawn from
// (seed, layer), so every degree trains the same model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "oobleck/executor/model_config.h"

namespace oobleck::executor {

// Shard `index` of `degree`: the interval [index/degree, (index+1)/degree)
// of every split parameter.
struct TensorShard {
  int degree = 1;
  int index = 0;
  friend bool operator==(const TensorShard&, const TensorShard&) = default;
};

// Sums a tensor in place over the GPUs of a tensor-parallel group.
using ShardSum = std::function<void(torch::Tensor&)>;

// How a parameter splits: viewed as `view`, cut into equal parts along
// `dim`. dim < 0: replicated, every shard holds it whole.
struct SplitLayout {
  std::vector<std::int64_t> view;
  int dim = -1;
  [[nodiscard]] bool split() const { return dim >= 0; }
};
// `parameter` as named_parameters() names it ("qkv.weight").
[[nodiscard]] SplitLayout split_layout(const ModelConfig& config, int index, const std::string& parameter);

// The part of a whole parameter that `shard` holds, in the shard's own shape.
[[nodiscard]] torch::Tensor cut_shard(const torch::Tensor& whole, const SplitLayout& layout, TensorShard shard);

// Copies what shard `from_shard` (the tensor `from`) and shard `to_shard`
// (the tensor `to`) of one parameter have in common into `to`.
void copy_shard_overlap(const torch::Tensor& from, TensorShard from_shard, torch::Tensor& to, TensorShard to_shard,
                        const SplitLayout& layout);

class GptLayer : public torch::nn::Module {
 public:
  // The group a sharded layer sums over; layers at degree 1 need none.
  virtual void set_shard_sum(ShardSum) {}
  // Embedding: int64 token ids (B, S) -> (B, S, h). Block: (B, S, h) ->
  // (B, S, h). Head: (B, S, h) -> logits (B, S, vocab).
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  // The parameters an optimizer updates for this layer when it runs alone
  // (the head's copy of the tied weight included).
  [[nodiscard]] std::vector<torch::Tensor> own_parameters() { return parameters(); }
  // Selective recomputation (Recompute::selective): the block's attention
  // core keeps only its q, k and v, and runs again in the backward
  // (recomputed_causal_attention). Layers without one (the embedding, the
  // head, TorchScript layers) have nothing to recompute.
  void set_attention_recompute(bool on) { attention_recompute_ = on; }

 protected:
  bool attention_recompute_ = false;
};

// InputError when the degree does not divide the heads.
[[nodiscard]] std::shared_ptr<GptLayer> make_layer(const ModelConfig& config, int index, std::uint64_t seed,
                                                   TensorShard shard = {});

// A TorchScript model (model_config.h's manifest) made to prove itself
// before any training: every layer file loads as a module with the
// parameters the manifest counts, a tied weight is equal in both files, and
// a microbatch of two sequences goes through the chain with the shapes and
// dtypes the manifest declares. InputError naming the file otherwise; other
// models pass.
void check_scripted_model(const ModelConfig& config);

// Causal self-attention softmax(q k^T / sqrt(d)) v over (B, heads, S, d),
// each position attending to itself and the positions before it. `plain`
// materialises the scores (any libtorch, any device); `fused` is libtorch's
// scaled_dot_product_attention (flash or memory-efficient kernels on a GPU,
// libtorch 2 and later), the same function within rounding.
enum class AttentionKernel { plain, fused };
[[nodiscard]] bool fused_attention_available();
[[nodiscard]] torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             AttentionKernel kernel);
// The same, keeping for the backward only q, k and v: the backward runs the
// attention again, with its graph, and goes back through it. The same
// operations on the same values, so the same gradients bit for bit; the
// scores (B heads S^2 numbers, and their softmax) live only while one
// layer's backward runs. causal_attention when `recompute` is false.
[[nodiscard]] torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             AttentionKernel kernel, bool recompute);
// Fused kernels (attention, the optimizer step) are used on a CUDA device
// where libtorch has them, unless OOBLECK_PLAIN_KERNELS=1 asks for the plain
// ones, to measure the difference. The CPU always runs the plain ones, so
// CPU results do not depend on the libtorch version.
[[nodiscard]] bool use_fused_kernels(const torch::Device& device);

// The head's logits x W^T for a vocabulary of V rows of W. cuBLAS's fast
// kernels want every row of a matrix to start 16 bytes after the last; a
// row of V = 50,257 logits (GPT-2's vocabulary) does not, and the product
// and its two gradients then run several times slower. `padded` multiplies
// by W with zero rows added up to a multiple of kVocabularyPadding and
// returns the V real columns as a view: the same logits within rounding,
// and the same gradients (the added rows get none). The head pads where
// fused kernels are used (use_fused_kernels); the CPU keeps the plain product.
inline constexpr std::int64_t kVocabularyPadding = 64;
[[nodiscard]] torch::Tensor vocabulary_logits(const torch::Tensor& x, const torch::Tensor& weight, bool padded);

// Cross-entropy of logits (B, S, V) against targets (B, S), in float32.
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
