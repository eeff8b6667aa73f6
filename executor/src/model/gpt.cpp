#include "oobleck/executor/gpt.h"

#include <cmath>

namespace oobleck::executor {
namespace {

// One generator per (seed, layer): mixed so that nearby seeds and layers
// give unrelated streams (splitmix64 finaliser).
at::Generator layer_generator(std::uint64_t seed, int index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return at::detail::createCPUGenerator(z);
}

// GPT-2 initialisation: N(0, 0.02) weights, zero biases, residual output
// projections scaled by 1/sqrt(2L).
void normal_(torch::Tensor& t, double std, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  t.copy_(torch::randn(t.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32)) * std);
}

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
  Block(const ModelConfig& c, int index, std::uint64_t seed) : heads_(c.heads) {
    const int h = c.hidden;
    ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    qkv_ = register_module("qkv", torch::nn::Linear(h, 3 * h));
    proj_ = register_module("proj", torch::nn::Linear(h, h));
    ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    fc_ = register_module("fc", torch::nn::Linear(h, 4 * h));
    out_ = register_module("out", torch::nn::Linear(4 * h, h));
    auto gen = layer_generator(seed, index);
    const double residual_std = 0.02 / std::sqrt(2.0 * c.layers);
    normal_(qkv_->weight, 0.02, gen);
    normal_(proj_->weight, residual_std, gen);
    normal_(fc_->weight, 0.02, gen);
    normal_(out_->weight, residual_std, gen);
    torch::NoGradGuard no_grad;
    for (auto* bias : {&qkv_->bias, &proj_->bias, &fc_->bias, &out_->bias}) bias->zero_();
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    const auto B = x.size(0), S = x.size(1), H = x.size(2);
    const auto d = H / heads_;
    // Causal self-attention: softmax(q k^T / sqrt(d)) v with future positions masked.
    auto qkv = qkv_->forward(ln1_->forward(x)).view({B, S, 3, heads_, d}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0], k = qkv[1], v = qkv[2];
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    const auto future = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    auto attended = torch::matmul(torch::softmax(scores, -1), v).permute({0, 2, 1, 3}).reshape({B, S, H});
    auto h = x + proj_->forward(attended);
    return h + out_->forward(torch::gelu(fc_->forward(ln2_->forward(h)), "tanh"));
  }

 private:
  int64_t heads_;
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
    return torch::matmul(ln_->forward(x), weight.t());
  }
  [[nodiscard]] std::vector<torch::Tensor> norm_parameters() { return ln_->parameters(); }

 private:
  torch::nn::LayerNorm ln_{nullptr};
  torch::Tensor weight_;
};

}  // namespace

std::shared_ptr<GptLayer> make_layer(const ModelConfig& config, int index, std::uint64_t seed) {
  validate(config, "model");
  if (index < 0 || index >= pipeline_layers(config)) {
    throw InputError("layer " + std::to_string(index) + ": the model has layers 0.." +
                     std::to_string(pipeline_layers(config) - 1));
  }
  if (index == 0) return std::make_shared<EmbeddingLayer>(config, seed);
  if (index == config.layers + 1) return std::make_shared<HeadLayer>(config, seed);
  return std::make_shared<Block>(config, index, seed);
}

torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32),
                                              targets.reshape({-1}));
}

Gpt::Gpt(const ModelConfig& config, std::uint64_t seed) : config_(config) {
  for (int i = 0; i < pipeline_layers(config); ++i) layers_.push_back(make_layer(config, i, seed));
}

torch::Tensor Gpt::forward(const torch::Tensor& tokens) {
  auto x = layers_.front()->forward(tokens);
  for (std::size_t i = 1; i + 1 < layers_.size(); ++i) x = layers_[i]->forward(x);
  auto& embedding = static_cast<EmbeddingLayer&>(*layers_.front());
  return static_cast<HeadLayer&>(*layers_.back()).project(x, embedding.token_weight());
}

std::vector<torch::Tensor> Gpt::parameters() const {
  std::vector<torch::Tensor> out;
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
