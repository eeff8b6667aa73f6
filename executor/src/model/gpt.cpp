#include "oobleck/executor/gpt.h"

#include "autocast.h"
#include "cross_entropy.h"
#include "layer_parts.h"

#include <torch/version.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace oobleck::executor {
namespace {

class EmbeddingLayer final : public GptLayer {
 public:
  EmbeddingLayer(const ModelConfig& c, std::uint64_t seed) {
    token_ = register_parameter("token", torch::empty({c.vocab, c.hidden}));
    position_ = register_parameter("position", torch::empty({c.seq_len, c.hidden}));
    auto gen = layer_generator(seed, 0);
    normal_(token_, 0.02, gen);  // first draw: the head repeats it for its tied copy
    normal_(position_, 0.01, gen);
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    const auto positions = torch::arange(tokens.size(1), torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    return torch::embedding(token_, tokens) + torch::embedding(position_, positions).unsqueeze(0);
  }
  [[nodiscard]] const torch::Tensor& token_weight() const { return token_; }

 private:
  torch::Tensor token_, position_;
};

class Block final : public GptLayer {
 public:
  Block(const ModelConfig& c, int index, std::uint64_t seed, TensorShard shard)
      : heads_(c.heads / shard.degree), shard_(shard) {
    const int h = c.hidden, t = shard.degree;
    ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    qkv_ = register_module("qkv", torch::nn::Linear(h, 3 * h / t));
    proj_ = register_module("proj", torch::nn::Linear(h / t, h));
    ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    fc_ = register_module("fc", torch::nn::Linear(h, 4 * h / t));
    out_ = register_module("out", torch::nn::Linear(4 * h / t, h));
    // The whole layer's draws, in the same order at every degree, then cut.
    auto gen = layer_generator(seed, index);
    const double residual_std = 0.02 / std::sqrt(2.0 * c.layers);
    const std::vector<std::pair<torch::Tensor*, double>> draws = {
        {&qkv_->weight, 0.02}, {&proj_->weight, residual_std}, {&fc_->weight, 0.02}, {&out_->weight, residual_std}};
    const std::vector<std::vector<std::int64_t>> whole = {{3 * h, h}, {h, h}, {4 * h, h}, {h, 4 * h}};
    const char* names[] = {"qkv.weight", "proj.weight", "fc.weight", "out.weight"};
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < draws.size(); ++i) {
      const auto drawn = torch::randn(whole[i], gen, torch::TensorOptions().dtype(torch::kFloat32)) * draws[i].second;
      draws[i].first->copy_(cut_shard(drawn, split_layout(c, index, names[i]), shard));
    }
    for (auto* bias : {&qkv_->bias, &proj_->bias, &fc_->bias, &out_->bias}) bias->zero_();
  }
  void set_shard_sum(ShardSum sum) override { sum_ = std::move(sum); }
  torch::Tensor forward(const torch::Tensor& x) override {
    const auto B = x.size(0), S = x.size(1), H = x.size(2);
    const auto d = H / (heads_ * shard_.degree);
    // Causal self-attention over this shard's heads.
    // Unbound, not indexed: the backward stacks the three gradients into
    // one tensor instead of zero-filling the whole of qkv for each and adding.
    const auto qkv =
        qkv_->forward(shared_input(ln1_->forward(x))).view({B, S, 3, heads_, d}).permute({2, 0, 3, 1, 4}).unbind(0);
    const auto kernel = use_fused_kernels(x.device()) ? AttentionKernel::fused : AttentionKernel::plain;
    auto attended = causal_attention(qkv[0], qkv[1], qkv[2], kernel, attention_recompute_)
                        .permute({0, 2, 1, 3})
                        .reshape({B, S, heads_ * d});
    auto h = x + row_parallel(proj_, attended);
    return h + row_parallel(out_, torch::gelu(fc_->forward(shared_input(ln2_->forward(h))), "tanh"));
  }

 private:
  [[nodiscard]] torch::Tensor shared_input(const torch::Tensor& x) {
    return shard_.degree == 1 ? x : SumGradient::apply(x, &sum_);
  }
  [[nodiscard]] torch::Tensor row_parallel(torch::nn::Linear& linear, const torch::Tensor& x) {
    if (shard_.degree == 1) return linear->forward(x);
    if (!sum_) throw std::logic_error("a sharded block runs without its tensor-parallel group");
    return SumOutput::apply(torch::linear(x, linear->weight), &sum_) + linear->bias;
  }

  int64_t heads_;
  TensorShard shard_;
  ShardSum sum_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, out_{nullptr};
};

class HeadLayer final : public GptLayer {
 public:
  HeadLayer(const ModelConfig& c, std::uint64_t seed) {
    ln_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden})));
    // Alone, the head keeps a copy of the tied weight: the embedding's first
    // draw from the embedding's generator.
    weight_ = register_parameter("tied_token", torch::empty({c.vocab, c.hidden}));
    auto gen = layer_generator(seed, 0);
    normal_(weight_, 0.02, gen);
  }
  torch::Tensor forward(const torch::Tensor& x) override { return project(x, weight_); }
  [[nodiscard]] torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight) {
    return vocabulary_logits(ln_->forward(x), weight, use_fused_kernels(x.device()));
  }
  [[nodiscard]] std::vector<torch::Tensor> norm_parameters() { return ln_->parameters(); }

 private:
  torch::nn::LayerNorm ln_{nullptr};
  torch::Tensor weight_;
};

}  // namespace

SplitLayout split_layout(const ModelConfig& c, int index, const std::string& parameter) {
  if (is_llama(c)) return llama_split_layout(c, index, parameter);
  if (is_scripted(c)) return {};
  if (index == 0 || index == c.layers + 1) return {};
  const std::int64_t h = c.hidden;
  // qkv's rows are [q; k; v], each by head: cut each of the three alike.
  if (parameter == "qkv.weight") return {{3, h, h}, 1};
  if (parameter == "qkv.bias") return {{3, h}, 1};
  if (parameter == "proj.weight") return {{h, h}, 1};
  if (parameter == "fc.weight") return {{4 * h, h}, 0};
  if (parameter == "fc.bias") return {{4 * h}, 0};
  if (parameter == "out.weight") return {{h, 4 * h}, 1};
  return {};
}

torch::Tensor cut_shard(const torch::Tensor& whole, const SplitLayout& layout, TensorShard shard) {
  if (!layout.split() || shard.degree == 1) return whole;
  const auto part = layout.view[static_cast<std::size_t>(layout.dim)] / shard.degree;
  auto cut = whole.view(layout.view).narrow(layout.dim, shard.index * part, part);
  // Back to the parameter's own shape, whose cut axis is the view's, or
  // its first when the view splits that one further (qkv's three parts).
  std::vector<std::int64_t> own(whole.sizes().begin(), whole.sizes().end());
  const bool folded = static_cast<std::int64_t>(layout.view.size()) > whole.dim();
  own[static_cast<std::size_t>(folded ? 0 : layout.dim)] = -1;
  return cut.contiguous().view(own);
}

void copy_shard_overlap(const torch::Tensor& from, TensorShard from_shard, torch::Tensor& to, TensorShard to_shard,
                        const SplitLayout& layout) {
  torch::NoGradGuard no_grad;
  if (!layout.split()) {
    to.copy_(from);
    return;
  }
  const auto n = layout.view[static_cast<std::size_t>(layout.dim)];
  auto shape_of = [&](TensorShard s) {
    auto shape = layout.view;
    shape[static_cast<std::size_t>(layout.dim)] = n / s.degree;
    return shape;
  };
  const auto from_begin = from_shard.index * n / from_shard.degree, from_end = from_begin + n / from_shard.degree;
  const auto to_begin = to_shard.index * n / to_shard.degree, to_end = to_begin + n / to_shard.degree;
  const auto begin = std::max(from_begin, to_begin), end = std::min(from_end, to_end);
  if (begin >= end) return;
  auto target = to.view(shape_of(to_shard)).narrow(layout.dim, begin - to_begin, end - begin);
  target.copy_(from.view(shape_of(from_shard)).narrow(layout.dim, begin - from_begin, end - begin));
}

std::shared_ptr<GptLayer> make_layer(const ModelConfig& config, int index, std::uint64_t seed, TensorShard shard) {
  validate(config, "model");
  if (index < 0 || index >= pipeline_layers(config)) {
    throw InputError("layer " + std::to_string(index) + ": the model has layers 0.." +
                     std::to_string(pipeline_layers(config) - 1));
  }
  if (shard.degree < 1 || shard.index < 0 || shard.index >= shard.degree) {
    throw InputError("layer " + std::to_string(index) + ": shard " + std::to_string(shard.index) + " of " +
                     std::to_string(shard.degree) + " does not exist");
  }
  const bool block = index > 0 && index <= config.layers;
  if (block && !tensor_parallel_fits(config, shard.degree)) {
    throw InputError("tensor-parallel degree " + std::to_string(shard.degree) + " does not divide the model's " +
                     tensor_parallel_limit(config));
  }
  if (is_llama(config)) return make_llama_layer(config, index, seed, shard);
  if (is_scripted(config)) return make_scripted_layer(config, index);
  if (index == 0) return std::make_shared<EmbeddingLayer>(config, seed);
  if (index == config.layers + 1) return std::make_shared<HeadLayer>(config, seed);
  return std::make_shared<Block>(config, index, seed, shard);
}

bool fused_attention_available() { return TORCH_VERSION_MAJOR >= 2; }

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               AttentionKernel kernel) {
  if (kernel == AttentionKernel::fused) {
#if TORCH_VERSION_MAJOR >= 2
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
    throw std::logic_error("fused attention needs libtorch 2 or later");
#endif
  }
  const auto S = q.size(-2), d = q.size(-1);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  const auto future = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

namespace {

struct RecomputedAttention : torch::autograd::Function<RecomputedAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, std::int64_t kernel) {
    // (Autograd records nothing inside a Function's forward.)
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["kernel"] = kernel;
    // The backward runs on autograd's own thread (one per GPU), where the
    // caller's autocast is off: it must compute as the forward did.
    ctx->saved_data["autocast"] = cuda_autocast_enabled();
    return causal_attention(q, k, v, static_cast<AttentionKernel>(kernel));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradients) {
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(true));
    torch::Tensor out;
    {
      const torch::AutoGradMode with_graph(true);
      const bool autocast = ctx->saved_data["autocast"].toBool() && !cuda_autocast_enabled();
      const CudaAutocast as_forward(autocast);
      out = causal_attention(inputs[0], inputs[1], inputs[2],
                             static_cast<AttentionKernel>(ctx->saved_data["kernel"].toInt()));
    }
    auto grads = torch::autograd::grad({out}, inputs, {gradients[0]});
    return {grads[0], grads[1], grads[2], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               AttentionKernel kernel, bool recompute) {
  if (!recompute || !torch::GradMode::is_enabled()) return causal_attention(q, k, v, kernel);
  return RecomputedAttention::apply(q, k, v, static_cast<std::int64_t>(kernel));
}

torch::Tensor vocabulary_logits(const torch::Tensor& x, const torch::Tensor& weight, bool padded) {
  const std::int64_t vocabulary = weight.size(0);
  const std::int64_t pad = (kVocabularyPadding - vocabulary % kVocabularyPadding) % kVocabularyPadding;
  if (!padded || pad == 0) return torch::matmul(x, weight.t());
  // Under autocast the weight is cast first, so that the pad copies bf16
  // and the product takes it as it is.
  const bool cast = cuda_autocast_enabled() && weight.scalar_type() == torch::kFloat32;
  const torch::Tensor rows = cast ? weight.to(torch::kBFloat16) : weight;
  return torch::matmul(x, torch::constant_pad_nd(rows, {0, 0, 0, pad}).t()).narrow(-1, 0, vocabulary);
}

bool use_fused_kernels(const torch::Device& device) {
  static const bool plain_asked = [] {
    const char* value = std::getenv("OOBLECK_PLAIN_KERNELS");
    return value != nullptr && std::string(value) == "1";
  }();
  return device.is_cuda() && fused_attention_available() && !plain_asked;
}

torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto flat = logits.reshape({-1, logits.size(-1)});
  if (flat.is_cuda() && flat.scalar_type() == torch::kHalf) {
    // The float32 log-probabilities straight from fp16 logits, once: a
    // float32 copy of the logits first would write and read them again.
    // (The CUDA kernel widens fp16 alone; bf16 logits take the copy.)
    return torch::nll_loss(at::_log_softmax(flat, -1, /*half_to_float=*/true), targets.reshape({-1}));
  }
  if (flat.is_cpu() && flat.scalar_type() == torch::kFloat32) {
    return cross_entropy_in_place_backward(flat, targets.reshape({-1}));
  }
  return torch::nn::functional::cross_entropy(flat.to(torch::kFloat32), targets.reshape({-1}));
}

Gpt::Gpt(const ModelConfig& config, std::uint64_t seed) : config_(config) {
  for (int i = 0; i < pipeline_layers(config); ++i) layers_.push_back(make_layer(config, i, seed));
}

torch::Tensor Gpt::forward(const torch::Tensor& tokens) {
  auto x = layers_.front()->forward(tokens);
  for (std::size_t i = 1; i + 1 < layers_.size(); ++i) x = layers_[i]->forward(x);
  if (config_.architecture != Architecture::gpt2) return layers_.back()->forward(x);
  auto& embedding = static_cast<EmbeddingLayer&>(*layers_.front());
  return static_cast<HeadLayer&>(*layers_.back()).project(x, embedding.token_weight());
}

std::vector<torch::Tensor> Gpt::parameters() const {
  std::vector<torch::Tensor> out;
  if (config_.architecture != Architecture::gpt2) {  // (a TorchScript model's tied copies count twice)
    for (const auto& layer : layers_) {
      for (auto& p : layer->parameters()) out.push_back(p);
    }
    return out;
  }
  for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
    for (auto& p : layers_[i]->parameters()) out.push_back(p);
  }
  for (auto& p : static_cast<HeadLayer&>(*layers_.back()).norm_parameters()) out.push_back(p);
  return out;
}

void Gpt::to(torch::Device device, torch::Dtype dtype) {
  for (auto& layer : layers_) layer->to(device, dtype);
}

}  // namespace oobleck::executor
