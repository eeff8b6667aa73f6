#include "torch_doctest.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <cmath>
#include <map>
#include <tuple>

#include "model/autocast.h"
#include "model/layer_state.h"
#include "model/train_common.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/model_config.h"
#include "model_helpers.h"
#include "skip.h"

using namespace oobleck;
using namespace oobleck::executor;
using oobleck::test::count;
using oobleck::test::tokens_for;

namespace {

ModelConfig tiny() { return {"test", 3, 32, 4, 97, 16}; }


}  // namespace

TEST_CASE("model: a block has 12h^2 + 13h parameters") {
  for (int h : {8, 32, 64, 96}) {
    ModelConfig c = tiny();
    c.hidden = h;
    c.heads = 4;
    const auto block = make_layer(c, 1, 7);
    CHECK(count(block->parameters()) == 12LL * h * h + 13LL * h);
    CHECK(block_parameters(h) == 12LL * h * h + 13LL * h);
  }
}

TEST_CASE("model: each layer owns the parameters the config counts") {
  const ModelConfig c = tiny();
  Gpt whole(c, 3);
  std::int64_t total = 0;
  for (int i = 0; i < pipeline_layers(c); ++i) {
    const auto layer = make_layer(c, i, 3);
    std::int64_t own = count(layer->parameters());
    if (i == c.layers + 1) own -= static_cast<std::int64_t>(c.vocab) * c.hidden;  // its copy of the tied weight
    CHECK(own == layer_parameters(c, i));
    total += own;
  }
  CHECK(total == model_parameters(c));
  CHECK(count(whole.parameters()) == model_parameters(c));
}

TEST_CASE("model: layers built alone equal the whole model's, weights and outputs") {
  const ModelConfig c = tiny();
  Gpt whole(c, 11);
  const auto tokens = tokens_for(c, 2, 5);
  torch::NoGradGuard no_grad;
  torch::Tensor x = tokens;
  for (int i = 0; i < pipeline_layers(c); ++i) {
    CAPTURE(i);
    const auto alone = make_layer(c, i, 11);
    const auto a = alone->parameters();
    const auto w = whole.layers()[i]->parameters();
    REQUIRE(a.size() == w.size());
    for (std::size_t p = 0; p < a.size(); ++p) CHECK(torch::equal(a[p], w[p]));
    const auto y_alone = alone->forward(x);
    const auto y_whole = whole.layers()[i]->forward(x);
    CHECK(torch::equal(y_alone, y_whole));
    x = y_alone;
  }
  // The head's copy of the tied weight is the embedding's weight.
  CHECK(torch::equal(make_layer(c, c.layers + 1, 11)->named_parameters()["tied_token"],
                     make_layer(c, 0, 11)->named_parameters()["token"]));
}

TEST_CASE("model: the chain of separately built layers gives the whole model's logits") {
  const ModelConfig c = tiny();
  Gpt whole(c, 2);
  const auto tokens = tokens_for(c, 3, 9);
  torch::NoGradGuard no_grad;
  torch::Tensor x = tokens;
  for (int i = 0; i < pipeline_layers(c); ++i) x = make_layer(c, i, 2)->forward(x);
  const auto logits = whole.forward(tokens);
  CHECK(logits.sizes() == torch::IntArrayRef({3, c.seq_len, c.vocab}));
  CHECK(torch::equal(x, logits));
  // A fresh model starts near the uniform guess.
  const double loss = language_model_loss(logits, tokens_for(c, 3, 4)).item<double>();
  CHECK(std::abs(loss - std::log(static_cast<double>(c.vocab))) < 0.5);
}

TEST_CASE("model: the loss and its gradient as PyTorch's cross-entropy computes them, bit for bit on libtorch 1.x") {
  // GPT-2's vocabulary, a scale that makes some rows confident, a gradient
  // scale other than 1 (the loss is divided by the batch's microbatches).
  torch::manual_seed(3);
  const int64_t rows = 6, vocabulary = 50257;
  const auto logits = (torch::randn({2, rows / 2, vocabulary}) * 4).requires_grad_();
  const auto targets = torch::randint(vocabulary, {2, rows / 2}, torch::kLong);
  const auto reference_logits = logits.detach().clone().requires_grad_();
  const auto reference =
      torch::nn::functional::cross_entropy(reference_logits.reshape({rows, vocabulary}), targets.reshape({-1}));
  (reference / 3).backward();
  const auto loss = language_model_loss(logits, targets);
  (loss / 3).backward();
  CHECK(loss.item<float>() == reference.item<float>());
#if TORCH_VERSION_MAJOR < 2
  CHECK(torch::equal(logits.grad(), reference_logits.grad()));
#else
  // libtorch 2's CPU log-softmax backward rounds its gradient differently
  // (seen with 2.11 on an H200's host): the same to float32 rounding.
  CHECK(torch::allclose(logits.grad(), reference_logits.grad(), 1e-6, 1e-12));
#endif
}

// The padded product is the plain one: the same logits (a view of the real
// columns) and the same gradients for the input and every real row of the
// weight, to float32 rounding (the BLAS blocks a wider product differently).
TEST_CASE("model: the head's logits padded to a multiple of 64 rows equal the plain product") {
  torch::manual_seed(5);
  for (const int64_t vocabulary : {97, 128, 50257}) {
    CAPTURE(vocabulary);
    const auto x = torch::randn({2, 3, 16}).requires_grad_();
    const auto weight = torch::randn({vocabulary, 16}).requires_grad_();
    const auto x2 = x.detach().clone().requires_grad_(), weight2 = weight.detach().clone().requires_grad_();
    const auto plain = vocabulary_logits(x, weight, false);
    const auto padded = vocabulary_logits(x2, weight2, true);
    REQUIRE(padded.sizes() == plain.sizes());
    CHECK(torch::allclose(padded, plain, 1e-5, 1e-6));
    const auto targets = torch::randint(vocabulary, {2, 3}, torch::kLong);
    language_model_loss(plain, targets).backward();
    language_model_loss(padded, targets).backward();
    REQUIRE(weight2.grad().sizes() == weight.sizes());
    CHECK(torch::allclose(x2.grad(), x.grad(), 1e-5, 1e-7));
    CHECK(torch::allclose(weight2.grad(), weight.grad(), 1e-5, 1e-7));
  }
}

// On a GPU under bf16 autocast, as the head runs there: within bf16's rounding.
TEST_CASE("model: the head's padded logits agree with the plain product on a GPU under autocast") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  torch::manual_seed(6);
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const int64_t vocabulary = 50257;
  const auto x = torch::randn({4, 256, 512}, options).requires_grad_();
  const auto weight = (torch::randn({vocabulary, 512}, options) * 0.02).requires_grad_();
  const auto x2 = x.detach().clone().requires_grad_(), weight2 = weight.detach().clone().requires_grad_();
  const auto targets = torch::randint(vocabulary, {4, 256}, options.dtype(torch::kLong));
  torch::Tensor plain_loss, padded_loss;
  {
    const CudaAutocast autocast(true);
    plain_loss = language_model_loss(vocabulary_logits(x, weight, false), targets);
    padded_loss = language_model_loss(vocabulary_logits(x2, weight2, true), targets);
  }
  plain_loss.backward();
  padded_loss.backward();
  CHECK(std::abs(padded_loss.item<double>() - plain_loss.item<double>()) <= 1e-3 * plain_loss.item<double>());
  const auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().max().item<double>() <= 0.02 * b.abs().max().item<double>();
  };
  CHECK(close(x2.grad(), x.grad()));
  CHECK(close(weight2.grad(), weight.grad()));
}

// A GPU's float64 norm of a float32 gradient against the float64 squares
// the CPU adds: the same number to double rounding.
TEST_CASE("model: squared gradient norms on a GPU equal the CPU's float64 sums") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  torch::manual_seed(7);
  const std::vector<torch::Tensor> cpu = {torch::randn({1000, 33}), torch::randn({7}),
                                          torch::randn({64, 64}).narrow(1, 3, 40)};
  std::vector<torch::Tensor> gpu;
  for (const auto& t : cpu) gpu.push_back(t.to(torch::kCUDA));
  const auto on_cpu = squared_norms(cpu), on_gpu = squared_norms(gpu);
  REQUIRE(on_gpu.size() == on_cpu.size());
  for (std::size_t i = 0; i < on_cpu.size(); ++i) CHECK(on_gpu[i] == doctest::Approx(on_cpu[i]).epsilon(1e-12));
}

TEST_CASE("model: weights depend only on the seed and the layer") {
  const ModelConfig c = tiny();
  CHECK(torch::equal(make_layer(c, 2, 5)->parameters().at(2), make_layer(c, 2, 5)->parameters().at(2)));
  CHECK_FALSE(torch::equal(make_layer(c, 2, 5)->parameters().at(2), make_layer(c, 2, 6)->parameters().at(2)));
  CHECK_FALSE(torch::equal(make_layer(c, 1, 5)->parameters().at(2), make_layer(c, 2, 5)->parameters().at(2)));
}

TEST_CASE("model: the causal mask: a token's output does not depend on later tokens") {
  const ModelConfig c = tiny();
  Gpt whole(c, 1);
  auto tokens = tokens_for(c, 1, 3);
  torch::NoGradGuard no_grad;
  const auto before = whole.forward(tokens);
  auto changed = tokens.clone();
  changed[0][c.seq_len - 1] = (changed[0][c.seq_len - 1].item<long>() + 1) % c.vocab;
  const auto after = whole.forward(changed);
  using torch::indexing::Slice;
  CHECK(torch::equal(before.index({0, Slice(0, c.seq_len - 1)}), after.index({0, Slice(0, c.seq_len - 1)})));
  CHECK_FALSE(torch::equal(before.index({0, c.seq_len - 1}), after.index({0, c.seq_len - 1})));
}

TEST_CASE("model: the GPT-3 presets have the published sizes (within 3 %)") {
  const std::pair<const char*, double> published[] = {
      {"gpt3-125m", 125e6}, {"gpt3-350m", 350e6}, {"gpt3-760m", 760e6}, {"gpt3-1.3b", 1.3e9},
      {"gpt3-2.7b", 2.7e9}, {"gpt3-6.7b", 6.7e9}, {"gpt3-13b", 13.0e9}, {"gpt3-175b", 175.0e9}};
  for (const auto& [name, size] : published) {
    CAPTURE(name);
    const double parameters = static_cast<double>(model_parameters(load_model_config(name)));
    CHECK(std::abs(parameters / size - 1) < 0.03);
  }
  CHECK(model_parameters(load_model_config("gpt2-small")) == 124439808 - 0);  // GPT-2 small, tied head
}

TEST_CASE("model: bad configs are clear errors") {
  auto message = [](const std::string& text) {
    try {
      (void)parse_model_config(text, "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(R"({"layers": 2, "hidden": 30, "heads": 4, "vocab": 10, "seq_len": 8})") ==
        "m.json: heads: 4 heads do not divide hidden = 30");
  CHECK(message(R"({"layers": 2, "hidden": 32, "heads": 4, "vocab": 10})") == "m.json: seq_len: missing");
  CHECK(message(R"({"layers": 2, "hidden": 32, "heads": 4, "vocab": 10, "seq_len": 8, "dropout": 1})")
            .find("m.json: dropout: unknown field") == 0);
  CHECK(message(R"({"layers": -2, "hidden": 32, "heads": 4, "vocab": 10, "seq_len": 8})")
            .find("m.json: layers: expected a positive integer") == 0);
  CHECK(message("{").rfind("m.json:1:2: not valid JSON", 0) == 0);
  CHECK_THROWS_WITH_AS((void)load_model_config("gpt5"), doctest::Contains("unknown model \"gpt5\""), InputError);
  const ModelConfig ok = parse_model_config(R"({"layers": 2, "hidden": 32, "heads": 4, "vocab": 10, "seq_len": 8})", "m");
  CHECK(ok.layers == 2);
  CHECK_THROWS_AS((void)make_layer(ok, 4, 1), InputError);
}

TEST_CASE("model: every preset is a valid config") {
  for (const auto& preset : model_presets()) {
    CAPTURE(preset.name);
    CHECK_NOTHROW(validate(preset, preset.name));
    CHECK(load_model_config(preset.name).hidden == preset.hidden);
  }
}

TEST_CASE("model: packed layer state reads back bit for bit, and a layer of another shape refuses it") {
  TrainOptions options;
  options.model = tiny();
  HeldLayer trained = initial_layer(options, 1);
  // Two AdamW steps on a made-up loss: both moments and the step count set.
  for (int step = 0; step < 2; ++step) {
    trained.optimizer->zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (const auto& p : trained.module->parameters()) loss = loss + (p * p).sum() * (step + 1);
    loss.backward();
    trained.optimizer->step();
  }
  const std::string bytes = pack_layer(trained);
  CHECK(bytes.size() == packed_layer_bytes(trained));
  CHECK(is_packed_layer(bytes));
  HeldLayer restored = initial_layer(options, 1);
  unpack_layer(restored, bytes);
  // The same archive bytes: weights, both moments and the step count equal.
  CHECK(serialize_layer(restored).size() == serialize_layer(trained).size());
  const auto a = trained.module->parameters(), b = restored.module->parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  // One more step from each: still equal, so the optimizer state came along.
  for (HeldLayer* layer : {&trained, &restored}) {
    layer->optimizer->zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (const auto& p : layer->module->parameters()) loss = loss + p.sum();
    loss.backward();
    layer->optimizer->step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  HeldLayer other = initial_layer(options, 0);  // the embedding: other parameters
  CHECK_THROWS_WITH_AS(unpack_layer(other, bytes), doctest::Contains("does not fit"), std::runtime_error);
  CHECK_THROWS_AS(unpack_layer(restored, std::string_view(bytes).substr(0, bytes.size() - 4)), std::runtime_error);
}

TEST_CASE("model: a float32 gradient added into its float64 sum equals aten's promoted add, bit for bit") {
  auto gen = at::detail::createCPUGenerator(11);
  const auto grad = torch::randn({1000, 37}, gen) * 1e-3;
  auto sum = torch::randn({1000, 37}, gen, torch::TensorOptions().dtype(torch::kFloat64));
  auto expected = sum.clone();
  expected.add_(grad);
  add_widened(sum, grad);
  CHECK(torch::equal(sum, expected));
  // A step's first gradient, written over whatever the sum held: 0 + g,
  // negative zeros made positive as the add makes them.
  auto signed_zeros = grad.clone();
  signed_zeros.narrow(0, 0, 10).fill_(-0.0);
  auto first = torch::randn({1000, 37}, gen, torch::TensorOptions().dtype(torch::kFloat64));
  const auto added = torch::zeros_like(first).add_(signed_zeros);
  add_widened(first, signed_zeros, /*first=*/true);
  CHECK(torch::equal(first, added));
  CHECK(torch::equal(torch::signbit(first), torch::signbit(added)));
}

TEST_CASE("model: the plain attention is the causal softmax(q k^T / sqrt(d)) v, position by position") {
  auto gen = at::detail::createCPUGenerator(5);
  const auto q = torch::randn({2, 3, 7, 8}, gen), k = torch::randn({2, 3, 7, 8}, gen),
             v = torch::randn({2, 3, 7, 8}, gen);
  const auto out = causal_attention(q, k, v, AttentionKernel::plain);
  using torch::indexing::Slice;
  for (int t = 0; t < 7; ++t) {
    // Position t attends to 0..t only: softmax over those scores.
    const auto scores = torch::matmul(q.index({Slice(), Slice(), Slice(t, t + 1)}),
                                      k.index({Slice(), Slice(), Slice(0, t + 1)}).transpose(-2, -1)) /
                        std::sqrt(8.0);
    const auto expected = torch::matmul(torch::softmax(scores, -1), v.index({Slice(), Slice(), Slice(0, t + 1)}));
    CHECK(torch::allclose(out.index({Slice(), Slice(), Slice(t, t + 1)}), expected, 1e-5, 1e-6));
  }
  CHECK_FALSE(use_fused_kernels(torch::Device(torch::kCPU)));
}

// On a GPU with libtorch 2: the fused attention (flash or memory-efficient
// kernels) and the plain one compute the same function within bf16's
// rounding, forward and backward, at the shapes the models train at.
TEST_CASE("model: fused and plain attention agree within bf16 tolerance on a GPU") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  if (!fused_attention_available()) OOBLECK_SKIP("libtorch " TORCH_VERSION " has no fused attention");
  for (const auto& [heads, length, head_dim] :
       {std::tuple{4, 256, 64}, std::tuple{16, 1024, 128}, std::tuple{25, 512, 64}}) {
    CAPTURE(heads);
    CAPTURE(length);
    const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
    torch::manual_seed(heads);
    const auto make = [&] { return torch::randn({2, heads, length, head_dim}, options).requires_grad_(); };
    auto q = make(), k = make(), v = make();
    const auto fused = causal_attention(q, k, v, AttentionKernel::fused);
    const auto grad_out = torch::randn_like(fused);
    const auto fused_grads = torch::autograd::grad({fused}, {q, k, v}, {grad_out});
    // The plain path in float32 is the reference both are held to.
    auto q32 = q.detach().to(torch::kFloat32).requires_grad_(), k32 = k.detach().to(torch::kFloat32).requires_grad_(),
         v32 = v.detach().to(torch::kFloat32).requires_grad_();
    const auto plain = causal_attention(q32, k32, v32, AttentionKernel::plain);
    const auto plain_grads = torch::autograd::grad({plain}, {q32, k32, v32}, {grad_out.to(torch::kFloat32)});
    // bf16 keeps 8 bits of mantissa: 2^-8 relative, a few roundings deep.
    const auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
      const double scale = b.abs().max().item<double>();
      return (a.to(torch::kFloat32) - b).abs().max().item<double>() <= 0.02 * scale;
    };
    CHECK(close(fused, plain));
    for (int i = 0; i < 3; ++i)
      CHECK(close(fused_grads[static_cast<std::size_t>(i)], plain_grads[static_cast<std::size_t>(i)]));
  }
}

// Fused attention's backward adds its parts in a different order each run
// unless deterministic kernels are asked for (use_deterministic_kernels):
// then the same inputs give the same gradients, bit for bit.
TEST_CASE("model: with deterministic kernels fused attention's backward repeats bit for bit on a GPU") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  if (!fused_attention_available()) OOBLECK_SKIP("libtorch " TORCH_VERSION " has no fused attention");
  use_deterministic_kernels();
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto gradients = [&] {
    torch::manual_seed(8);
    const auto make = [&] { return torch::randn({4, 12, 1024, 64}, options).requires_grad_(); };
    auto q = make(), k = make(), v = make();
    const auto out = causal_attention(q, k, v, AttentionKernel::fused);
    return torch::autograd::grad({out}, {q, k, v}, {torch::randn_like(out)});
  };
  const auto first = gradients();
  for (int run = 0; run < 4; ++run) {
    const auto again = gradients();
    for (std::size_t i = 0; i < 3; ++i) CHECK(torch::equal(again[i], first[i]));
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
}

// On a GPU with libtorch 2: the fused AdamW step makes the update
// torch::optim::AdamW makes, to float32 rounding, over several steps.
TEST_CASE("model: the fused AdamW step equals libtorch's AdamW on a GPU") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  if (!fused_attention_available()) OOBLECK_SKIP("libtorch " TORCH_VERSION " has no fused AdamW");
  TrainOptions options;
  options.model = tiny();
  options.device = "cuda";
  std::map<int, HeldLayer> fused, plain;
  for (int l = 0; l < 3; ++l) {
    fused.emplace(l, initial_layer(options, l));
    plain.emplace(l, initial_layer(options, l));
  }
  for (int step = 0; step < 3; ++step) {
    for (int l = 0; l < 3; ++l) {
      auto a = fused.at(l).module->parameters(), b = plain.at(l).module->parameters();
      for (std::size_t i = 0; i < a.size(); ++i) {
        torch::manual_seed(100 * step + 10 * l + static_cast<int>(i));
        const auto grad = torch::randn_like(a[i]);
        a[i].mutable_grad() = grad.clone();
        b[i].mutable_grad() = grad.clone();
      }
    }
    step_optimizers(fused, 0, 3);
    for (auto& [l, layer] : plain) layer.optimizer->step();
  }
  for (int l = 0; l < 3; ++l) {
    auto a = fused.at(l).module->parameters(), b = plain.at(l).module->parameters();
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::allclose(a[i], b[i], 1e-5, 1e-6));
  }
}
