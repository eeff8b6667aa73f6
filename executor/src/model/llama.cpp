// The Llama-style decoder (Touvron et al. 2023), layer by layer.
//
// Layer 0: the token embedding alone (positions enter as rotations).
// Blocks: x + Wo attn(rope(Wq n(x)), rope(Wk n(x)), Wv n(x)), then
// h + W2 (silu(W1 n(h)) * W3 n(h)), with n the RMSNorm
// x / sqrt(mean(x^2) + 1e-5) * g and no biases anywhere. Grouped-query
// attention: `kv_heads` key/value heads, each read by heads / kv_heads
// consecutive query heads. Rotary embeddings rotate each head's pairs
// (i, i + d/2) by position * theta^(-2i/d) (the "rotate half" layout of
// GPT-NeoX and Hugging Face's Llama; Meta's interleaved pairs are the same
// function of permuted weights). The head: a final RMSNorm and its own
// output matrix, not tied to the embedding.
//
// Initialisation as the GPT-2 layers: N(0, 0.02), the residual outputs (Wo,
// W2) scaled by 1/sqrt(2L), norms at one; every draw from (seed, layer).
//
// Tensor parallelism as Megatron-LM splits Llama: Wq by query heads and Wk,
// Wv by key/value heads (a shard's query heads then read exactly its
// key/value heads), W1 and W3 by rows, Wo and W2 by columns; the norms
// replicated, and the embedding and the head whole on every GPU of the stage.
#include <cmath>
#include <stdexcept>

#include "layer_parts.h"

namespace oobleck::executor {
namespace {

constexpr double kNormEpsilon = 1e-5;

// In float32 whatever the input's dtype (autocast's bf16 included), then
// back, as Llama's reference code does.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& gain) {
  const auto wide = x.to(torch::kFloat32);
  const auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + kNormEpsilon);
  return normed.to(x.scalar_type()) * gain;
}

class LlamaEmbedding final : public GptLayer {
 public:
  LlamaEmbedding(const ModelConfig& c, std::uint64_t seed) {
    token_ = register_parameter("token", torch::empty({c.vocab, c.hidden}));
    auto gen = layer_generator(seed, 0);
    normal_(token_, 0.02, gen);
  }
  torch::Tensor forward(const torch::Tensor& tokens) override { return torch::embedding(token_, tokens); }

 private:
  torch::Tensor token_;
};

class LlamaBlock final : public GptLayer {
 public:
  LlamaBlock(const ModelConfig& c, int index, std::uint64_t seed, TensorShard shard)
      : heads_(c.heads / shard.degree),
        kv_heads_(c.kv_heads / shard.degree),
        head_size_(c.hidden / c.heads),
        rope_theta_(c.rope_theta),
        shard_(shard) {
    const std::int64_t h = c.hidden, d = head_size_, t = shard.degree, f = c.ffn_hidden, kv = c.kv_heads * d;
    attention_norm_ = register_parameter("attention_norm", torch::ones({h}));
    mlp_norm_ = register_parameter("mlp_norm", torch::ones({h}));
    auto linear = [&](const char* name, std::int64_t in, std::int64_t out) {
      return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
    };
    wq_ = linear("wq", h, h / t);
    wk_ = linear("wk", h, kv / t);
    wv_ = linear("wv", h, kv / t);
    wo_ = linear("wo", h / t, h);
    w1_ = linear("w1", h, f / t);
    w3_ = linear("w3", h, f / t);
    w2_ = linear("w2", f / t, h);
    // The whole layer's draws, in the same order at every degree, then cut.
    auto gen = layer_generator(seed, index);
    const double residual_std = 0.02 / std::sqrt(2.0 * c.layers);
    struct Draw {
      torch::nn::Linear* linear;
      const char* name;
      std::vector<std::int64_t> whole;
      double std;
    };
    const std::vector<Draw> draws = {
        {&wq_, "wq.weight", {h, h}, 0.02},        {&wk_, "wk.weight", {kv, h}, 0.02},
        {&wv_, "wv.weight", {kv, h}, 0.02},       {&wo_, "wo.weight", {h, h}, residual_std},
        {&w1_, "w1.weight", {f, h}, 0.02},        {&w3_, "w3.weight", {f, h}, 0.02},
        {&w2_, "w2.weight", {h, f}, residual_std}};
    torch::NoGradGuard no_grad;
    for (const auto& draw : draws) {
      const auto drawn = torch::randn(draw.whole, gen, torch::TensorOptions().dtype(torch::kFloat32)) * draw.std;
      (*draw.linear)->weight.copy_(cut_shard(drawn, llama_split_layout(c, index, draw.name), shard));
    }
  }
  void set_shard_sum(ShardSum sum) override { sum_ = std::move(sum); }
  torch::Tensor forward(const torch::Tensor& x) override {
    const auto B = x.size(0), S = x.size(1);
    const auto input = shared_input(rms_norm(x, attention_norm_));
    auto heads = [&](torch::nn::Linear& w, std::int64_t count) {
      return w->forward(input).view({B, S, count, head_size_}).transpose(1, 2);  // (B, heads, S, d)
    };
    auto q = rotate(heads(wq_, heads_)), k = rotate(heads(wk_, kv_heads_)), v = heads(wv_, kv_heads_);
    if (kv_heads_ < heads_) {
      // Each key/value head serves heads / kv_heads consecutive query heads.
      k = k.repeat_interleave(heads_ / kv_heads_, 1);
      v = v.repeat_interleave(heads_ / kv_heads_, 1);
    }
    const auto kernel = use_fused_kernels(x.device()) ? AttentionKernel::fused : AttentionKernel::plain;
    const auto attended =
        causal_attention(q, k, v, kernel, attention_recompute_).transpose(1, 2).reshape({B, S, heads_ * head_size_});
    const auto h = x + row_parallel(wo_, attended);
    const auto mlp_input = shared_input(rms_norm(h, mlp_norm_));
    return h + row_parallel(w2_, torch::silu(w1_->forward(mlp_input)) * w3_->forward(mlp_input));
  }

 private:
  // Rotary embedding of (B, heads, S, d): the pair (i, i + d/2) of position
  // p turned by the angle p * theta^(-2i/d).
  [[nodiscard]] torch::Tensor rotate(const torch::Tensor& x) {
    const auto S = x.size(2), half = head_size_ / 2;
    if (!cos_.defined() || cos_.size(0) != S || cos_.device() != x.device() || cos_.scalar_type() != x.scalar_type()) {
      // Angles in float64, as the same numbers on every device and libtorch.
      const auto options = torch::TensorOptions().dtype(torch::kFloat64);
      const auto frequencies = torch::pow(rope_theta_, -2.0 * torch::arange(half, options) / head_size_);
      const auto angles = torch::outer(torch::arange(S, options), frequencies);
      cos_ = angles.cos().to(x.device(), x.scalar_type());
      sin_ = angles.sin().to(x.device(), x.scalar_type());
    }
    const auto first = x.narrow(-1, 0, half), second = x.narrow(-1, half, half);
    return torch::cat({first * cos_ - second * sin_, second * cos_ + first * sin_}, -1);
  }
  [[nodiscard]] torch::Tensor shared_input(const torch::Tensor& x) {
    return shard_.degree == 1 ? x : SumGradient::apply(x, &sum_);
  }
  [[nodiscard]] torch::Tensor row_parallel(torch::nn::Linear& linear, const torch::Tensor& x) {
    if (shard_.degree == 1) return linear->forward(x);
    if (!sum_) throw std::logic_error("a sharded block runs without its tensor-parallel group");
    return SumOutput::apply(torch::linear(x, linear->weight), &sum_);
  }

  std::int64_t heads_, kv_heads_, head_size_;
  double rope_theta_;
  TensorShard shard_;
  ShardSum sum_;
  torch::Tensor attention_norm_, mlp_norm_;
  torch::nn::Linear wq_{nullptr}, wk_{nullptr}, wv_{nullptr}, wo_{nullptr}, w1_{nullptr}, w3_{nullptr}, w2_{nullptr};
  torch::Tensor cos_, sin_;  // the rotations of the last sequence length seen
};

class LlamaHead final : public GptLayer {
 public:
  LlamaHead(const ModelConfig& c, std::uint64_t seed) {
    norm_ = register_parameter("norm", torch::ones({c.hidden}));
    output_ = register_parameter("output", torch::empty({c.vocab, c.hidden}));
    auto gen = layer_generator(seed, c.layers + 1);
    normal_(output_, 0.02, gen);
  }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::matmul(rms_norm(x, norm_), output_.t()); }

 private:
  torch::Tensor norm_, output_;
};

}  // namespace

SplitLayout llama_split_layout(const ModelConfig& c, int index, const std::string& parameter) {
  if (index == 0 || index == c.layers + 1) return {};
  const std::int64_t h = c.hidden, kv = static_cast<std::int64_t>(c.kv_heads) * (h / c.heads), f = c.ffn_hidden;
  if (parameter == "wq.weight") return {{h, h}, 0};
  if (parameter == "wk.weight" || parameter == "wv.weight") return {{kv, h}, 0};
  if (parameter == "wo.weight") return {{h, h}, 1};
  if (parameter == "w1.weight" || parameter == "w3.weight") return {{f, h}, 0};
  if (parameter == "w2.weight") return {{h, f}, 1};
  return {};
}

std::shared_ptr<GptLayer> make_llama_layer(const ModelConfig& config, int index, std::uint64_t seed,
                                           TensorShard shard) {
  if (index == 0) return std::make_shared<LlamaEmbedding>(config, seed);
  if (index == config.layers + 1) return std::make_shared<LlamaHead>(config, seed);
  return std::make_shared<LlamaBlock>(config, index, seed, shard);
}

}  // namespace oobleck::executor
