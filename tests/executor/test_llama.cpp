// The Llama-style model against its published sizes and against a block
// written out from the paper's formulas: rotary positions as complex
// rotations (Meta's own formulation, independent of the "rotate half" code),
// grouped-query attention as key/value weights repeated into full heads,
// RMSNorm and SwiGLU as formulas.
#include "torch_doctest.h"

#include <cmath>
#include <string>

#include "oobleck/executor/analytic.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/model_config.h"
#include "model_helpers.h"

using namespace oobleck;
using namespace oobleck::executor;
using oobleck::test::count;
using oobleck::test::tokens_for;

namespace {

// 4 query heads of 8 reading 2 key/value heads; SwiGLU 88 wide.
ModelConfig small_llama() { return {"test-llama", 3, 32, 4, 97, 16, Architecture::llama, 2, 88, 10000}; }


torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& gain) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * gain;
}

// Position p's pair (i, i + d/2) as the complex number x_i + j x_{i+d/2},
// multiplied by e^{j p theta^(-2i/d)}.
torch::Tensor rotate_complex(const torch::Tensor& x, double theta) {  // (B, heads, S, d)
  const auto S = x.size(2), d = x.size(3), half = d / 2;
  auto angles = torch::empty({S, half}, torch::kFloat64);
  for (int p = 0; p < S; ++p) {
    for (int i = 0; i < half; ++i) angles[p][i] = p * std::pow(theta, -2.0 * i / static_cast<double>(d));
  }
  const auto turn = torch::polar(torch::ones_like(angles), angles);
  const auto pairs = torch::stack({x.narrow(-1, 0, half), x.narrow(-1, half, half)}, -1).to(torch::kFloat64);
  const auto turned = torch::view_as_real(torch::view_as_complex(pairs.contiguous()) * turn);
  return torch::cat({turned.select(-1, 0), turned.select(-1, 1)}, -1).to(x.scalar_type());
}

// The block from its weights, the key/value weights repeated per query head.
torch::Tensor block_by_formula(const ModelConfig& c, GptLayer& block, const torch::Tensor& x) {
  auto w = block.named_parameters();
  const std::int64_t B = x.size(0), S = x.size(1), h = c.hidden, a = c.heads, d = h / a, group = a / c.kv_heads;
  const auto full = [&](const torch::Tensor& kv_weight) {  // (kv d, h) -> (a d, h)
    return kv_weight.view({c.kv_heads, 1, d, h}).expand({c.kv_heads, group, d, h}).reshape({a * d, h});
  };
  const auto split = [&](const torch::Tensor& t) { return t.view({B, S, a, d}).transpose(1, 2); };
  const auto n = rms_norm(x, w["attention_norm"]);
  const auto q = rotate_complex(split(torch::matmul(n, w["wq.weight"].t())), c.rope_theta);
  const auto k = rotate_complex(split(torch::matmul(n, full(w["wk.weight"]).t())), c.rope_theta);
  const auto v = split(torch::matmul(n, full(w["wv.weight"]).t()));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  scores = scores.masked_fill(torch::ones({S, S}, torch::kBool).triu(1), -INFINITY);
  const auto attended = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({B, S, h});
  const auto mid = x + torch::matmul(attended, w["wo.weight"].t());
  const auto m = rms_norm(mid, w["mlp_norm"]);
  const auto gate = torch::matmul(m, w["w1.weight"].t()), up = torch::matmul(m, w["w3.weight"].t());
  return mid + torch::matmul(gate * torch::sigmoid(gate) * up, w["w2.weight"].t());
}

}  // namespace

TEST_CASE("llama: the presets have the published parameter counts, exactly") {
  const std::pair<const char*, std::int64_t> published[] = {{"llama2-7b", 6738415616},
                                                            {"llama2-13b", 13015864320},
                                                            {"llama2-70b", 68976648192},
                                                            {"llama3-8b", 8030261248},
                                                            {"llama3-70b", 70553706496}};
  for (const auto& [name, size] : published) {
    CAPTURE(name);
    CHECK(model_parameters(load_model_config(name)) == size);
  }
}

TEST_CASE("llama: each layer owns the parameters the config counts; the head has its own weight") {
  const ModelConfig c = small_llama();
  Gpt whole(c, 3);
  std::int64_t total = 0;
  for (int i = 0; i < pipeline_layers(c); ++i) {
    CAPTURE(i);
    const auto own = count(make_layer(c, i, 3)->parameters());
    CHECK(own == layer_parameters(c, i));
    total += own;
  }
  CHECK(layer_parameters(c, 1) == llama_block_parameters(c));
  CHECK(total == model_parameters(c));
  CHECK(count(whole.parameters()) == model_parameters(c));
  CHECK_FALSE(torch::equal(make_layer(c, c.layers + 1, 3)->named_parameters()["output"],
                           make_layer(c, 0, 3)->named_parameters()["token"]));
}

TEST_CASE("llama: a block computes RMSNorm, rotary grouped-query attention and SwiGLU as the formulas say") {
  const ModelConfig c = small_llama();
  for (int index = 1; index <= c.layers; ++index) {
    CAPTURE(index);
    const auto block = make_layer(c, index, 7);
    auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(index));
    const auto x = torch::randn({2, c.seq_len, c.hidden}, gen);
    torch::NoGradGuard no_grad;
    CHECK(torch::allclose(block->forward(x), block_by_formula(c, *block, x), 1e-5, 1e-5));
  }
}

TEST_CASE("llama: layers built alone chain to the whole model's logits, causally") {
  const ModelConfig c = small_llama();
  Gpt whole(c, 2);
  auto tokens = tokens_for(c, 3, 9);
  torch::NoGradGuard no_grad;
  torch::Tensor x = tokens;
  for (int i = 0; i < pipeline_layers(c); ++i) x = make_layer(c, i, 2)->forward(x);
  const auto logits = whole.forward(tokens);
  CHECK(logits.sizes() == torch::IntArrayRef({3, c.seq_len, c.vocab}));
  CHECK(torch::equal(x, logits));
  const double loss = language_model_loss(logits, tokens_for(c, 3, 4)).item<double>();
  CHECK(std::abs(loss - std::log(static_cast<double>(c.vocab))) < 0.5);
  // A later token changes nothing before it.
  auto changed = tokens.clone();
  changed[0][c.seq_len - 1] = (changed[0][c.seq_len - 1].item<long>() + 1) % c.vocab;
  const auto after = whole.forward(changed);
  using torch::indexing::Slice;
  CHECK(torch::equal(logits.index({0, Slice(0, c.seq_len - 1)}), after.index({0, Slice(0, c.seq_len - 1)})));
  CHECK_FALSE(torch::equal(logits.index({0, c.seq_len - 1}), after.index({0, c.seq_len - 1})));
}

TEST_CASE("llama: bad configs name the field") {
  auto message = [](const std::string& text) {
    try {
      (void)parse_model_config(text, "m.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string base = R"("layers": 2, "hidden": 32, "heads": 4, "vocab": 50, "seq_len": 8)";
  CHECK(message("{" + base + R"(, "architecture": "llama", "ffn_hidden": 64, "kv_heads": 3})")
            .find("m.json: kv_heads: expected a divisor of the 4 heads, got 3") != std::string::npos);
  CHECK(message("{" + base + R"(, "architecture": "llama"})").find("m.json: ffn_hidden: missing") != std::string::npos);
  CHECK(message("{" + base + R"(, "kv_heads": 2})").find("m.json: kv_heads: only \"architecture\": \"llama\"") !=
        std::string::npos);
  CHECK(message("{" + base + R"(, "architecture": "mamba"})")
            .find("m.json: architecture: expected \"gpt2\", \"llama\" or \"torchscript\"") != std::string::npos);
  CHECK(message(R"({"layers": 2, "hidden": 12, "heads": 4, "vocab": 50, "seq_len": 8, "architecture": "llama",
                    "ffn_hidden": 32})")
            .find("m.json: heads: rotary embeddings need an even head size") != std::string::npos);
  CHECK(message("{" + base + R"(, "architecture": "llama", "ffn_hidden": 64, "rope_theta": 0.5})")
            .find("m.json: rope_theta: expected a number above 1") != std::string::npos);
  // A config written by model_json reads back as the same model.
  const ModelConfig c = load_model_config("llama3-8b");
  const ModelConfig back = parse_model_config(model_json(c, "bf16"), "profile");
  CHECK(back.kv_heads == 8);
  CHECK(back.ffn_hidden == 14336);
  CHECK(back.rope_theta == 500000);
  CHECK(model_parameters(back) == model_parameters(c));
  // Without kv_heads, every head has its own keys and values.
  CHECK(parse_model_config("{" + base + R"(, "architecture": "llama", "ffn_hidden": 64})", "m.json").kv_heads == 4);
}

TEST_CASE("llama: analytic work is the closed-form count, and tensor parallelism stops at the key/value heads") {
  const ModelConfig c = small_llama();
  const double b = 2, s = c.seq_len, h = c.hidden, kv = 2 * 8, f = c.ffn_hidden;
  const LayerWork w = layer_work(c, 1, 2, 4);
  CHECK(w.flops == doctest::Approx(2 * b * s * h * (2 * h + 2 * kv) + 6 * b * s * h * f + 4 * b * s * s * h));
  CHECK(w.unsplit_bytes == doctest::Approx(10 * b * s * h * 4));
  CHECK(layer_work(c, 0, 2, 4).flops == 0);
  HardwareDescription hw = load_hardware("a100-80gb");
  hw.gpus_per_node = 4;
  const Profile p = analytic_profile(c, hw, 2, "fp32");
  Bytes parameters = 0;
  for (const auto& l : p.layers) parameters += l.param_bytes;
  CHECK(parameters == model_parameters(c) * 4);
  // Degree 2 splits a block; degree 4 does not divide the 2 key/value heads.
  REQUIRE(p.layers[1].tensor_parallel.size() == 1);
  CHECK(p.layers[1].tensor_parallel[0].degree == 2);
  // Llama 2 70B's 8 key/value heads split over all 8 GPUs of a node, each
  // degree faster than the one before.
  const Profile big = analytic_profile(load_model_config("llama2-70b"), load_hardware("a100-80gb"), 1, "bf16");
  REQUIRE(big.layers[1].tensor_parallel.size() == 3);
  Milliseconds previous = big.layers[1].forward_ms;
  for (const auto& t : big.layers[1].tensor_parallel) {
    CAPTURE(t.degree);
    CHECK(t.forward_ms < previous);
    previous = t.forward_ms;
  }
  // Llama 2 7B's block against GPT-3 6.7B's (the same h, layers and heads;
  // SwiGLU at 8h/3 rounded up): within 1 % of the FLOPs.
  const double llama = layer_work(load_model_config("llama2-7b"), 1, 1, 2).flops;
  ModelConfig gpt3 = load_model_config("gpt3-6.7b");
  gpt3.seq_len = 4096;
  CHECK(llama / layer_work(gpt3, 1, 1, 2).flops == doctest::Approx(1.0).epsilon(0.01));
}
