// Activation recomputation in live runs: a stage the plan makes recompute
// keeps only its layers' inputs in the forward and runs each layer's
// forward again in the backward (full), or keeps all but its attention
// scores and runs each block's attention core again (selective). The same
// operations on the same inputs, so the losses are bit for bit those of the
// same plan without it.
#include "torch_doctest.h"

#include <torch/cuda.h>

#include <nlohmann/json.hpp>

#include "live_setup.h"
#include "model/autocast.h"
#include "oobleck/executor/gpt.h"
#include "skip.h"

namespace {

using nlohmann::json;
using oobleck::test::LiveSetup;

std::vector<double> losses(const std::vector<json>& steps) {
  std::vector<double> out;
  for (const auto& s : steps) out.push_back(s["loss"].get<double>());
  return out;
}

}  // namespace

TEST_CASE("recompute: a block whose attention core runs again in the backward gives the same gradients bit for bit") {
  using namespace oobleck::executor;
  const ModelConfig gpt{"test", 2, 32, 4, 97, 16};
  const ModelConfig llama{"test-llama", 2, 32, 4, 97, 16, Architecture::llama, 2, 88, 10000};
  for (const ModelConfig& c : {gpt, llama}) {
    CAPTURE(c.name);
    const auto block = make_layer(c, 1, 7);
    const auto x = torch::randn({3, c.seq_len, c.hidden}, torch::TensorOptions().dtype(torch::kFloat32));
    const auto upstream = torch::randn({3, c.seq_len, c.hidden});
    std::vector<std::vector<torch::Tensor>> grads;
    std::vector<torch::Tensor> outputs, input_grads;
    for (const bool again : {false, true}) {
      block->set_attention_recompute(again);
      block->zero_grad();
      const auto in = x.clone().requires_grad_(true);
      const auto y = block->forward(in);
      y.backward(upstream);
      outputs.push_back(y.detach());
      input_grads.push_back(in.grad().clone());
      std::vector<torch::Tensor> g;
      for (const auto& p : block->parameters()) g.push_back(p.grad().clone());
      grads.push_back(std::move(g));
    }
    CHECK(torch::equal(outputs[0], outputs[1]));
    CHECK(torch::equal(input_grads[0], input_grads[1]));
    REQUIRE(grads[0].size() == grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(torch::equal(grads[0][i], grads[1][i]));
    // Not a no-op: the attention core's scores left the graph.
    block->set_attention_recompute(true);
    const auto y = block->forward(x.clone().requires_grad_(true));
    CHECK(y.grad_fn() != nullptr);
    block->set_attention_recompute(false);
  }
}

TEST_CASE("recompute: on a GPU under bf16 autocast, the attention core runs again as its forward ran") {
  // Autograd's backward runs on a thread of its own per GPU, where the
  // caller's autocast is off: the core must be run again under it (its
  // softmax in fp32), or the gradients move by bf16's rounding.
  using namespace oobleck::executor;
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  const ModelConfig c{"test", 2, 128, 8, 97, 64};
  const auto block = make_layer(c, 1, 7);
  block->to(torch::Device(torch::kCUDA, 0));
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  torch::manual_seed(3);
  const auto x = torch::randn({2, c.seq_len, c.hidden}, options);
  const auto upstream = torch::randn({2, c.seq_len, c.hidden}, options);
  std::vector<std::vector<torch::Tensor>> grads;
  for (const bool again : {false, true}) {
    block->set_attention_recompute(again);
    block->zero_grad();
    const auto in = x.clone().requires_grad_(true);
    {
      const CudaAutocast autocast(true);
      const auto y = block->forward(in);
      y.to(torch::kFloat32).backward(upstream);
    }
    std::vector<torch::Tensor> g{in.grad().clone()};
    for (const auto& p : block->parameters()) g.push_back(p.grad().clone());
    grads.push_back(std::move(g));
  }
  block->set_attention_recompute(false);
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    CAPTURE(i);
    const double scale = grads[0][i].abs().max().item<double>();
    CHECK((grads[0][i] - grads[1][i]).abs().max().item<double>() <= 1e-3 * scale);
  }
}

TEST_CASE("recompute: stages recomputing selectively or fully, beside ones that do not, train the single process's "
          "losses bit for bit") {
  LiveSetup setup(4, 1, 8);
  auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 2);
  for (const auto& p : plan["pipelines"]) REQUIRE(p["stages"].size() == 2);
  plan["pipelines"][0]["stages"][0]["recompute"] = "selective";
  plan["pipelines"][0]["stages"][1]["recompute"] = "full";
  plan["pipelines"][1]["stages"][1]["recompute"] = "selective";
  setup.s.write("plan.json", plan.dump());
  const auto run = setup.live(8, 3, "live.jsonl");
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(losses(setup.steps("live.jsonl")) == setup.reference_losses(8, 3));  // bit for bit
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("recompute: stages that recompute train the single process's losses bit for bit, beside ones that do not") {
  LiveSetup setup(4, 1, 8);
  auto plan = setup.plan();
  REQUIRE(plan["pipelines"].size() == 2);
  for (const auto& p : plan["pipelines"]) REQUIRE(p["stages"].size() == 2);
  // The first stage of one pipeline and the last of the other: gradients
  // leave a recomputing stage, and the loss is recomputed in one.
  plan["pipelines"][0]["stages"][0]["recompute"] = "full";
  plan["pipelines"][1]["stages"][1]["recompute"] = "full";
  setup.s.write("plan.json", plan.dump());
  const auto run = setup.live(8, 3, "live.jsonl");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const auto steps = setup.steps("live.jsonl");
  const auto reference = setup.reference_losses(8, 3);
  REQUIRE(steps.size() == reference.size());
  CHECK(losses(steps) == reference);  // bit for bit
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("recompute: a plan from oobleck-plan --recompute full trains, and a node lost copies its layers") {
  LiveSetup setup(4, 1, 8);
  const std::string bin = std::filesystem::path(OOBLECK_RUN_BINARY).parent_path().string();
  REQUIRE(setup.s.run_program(bin + "/oobleck-plan", "instantiate --profile " + setup.s.str("profile.json") +
                                                         " --nodes 4 --fault-tolerance 1 --global-microbatches 8 "
                                                         "--recompute full --json " + setup.s.str("plan.json"))
              .status == 0);
  const json plan = setup.plan();
  CHECK(plan["recompute"] == "full");
  for (const auto& p : plan["pipelines"]) {
    for (const auto& st : p["stages"]) CHECK(st["recompute"] == "full");
  }
  setup.s.write("inject.csv", "step:3,remove,node1\n");
  const auto run = setup.live(6, 3, "live.jsonl", "--inject " + setup.s.str("inject.csv") +
                                                      " --heartbeat-timeout-ms 5000");
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(losses(setup.steps("live.jsonl")) == setup.reference_losses(6, 3));
  CHECK(setup.reconfigurations("live.jsonl").size() == 1);
  CHECK(setup.s.processes_left() == 0);
}

TEST_CASE("recompute: degree-2 stages recomputing (fully: their all-reduces again; selectively: their heads' "
          "attention) train what the same plan trains without") {
  LiveSetup setup(3, 1, 12, 2);
  auto plan = setup.plan();
  plan["pipelines"] = oobleck::test::tensor_parallel_pipelines();
  setup.s.write("plan.json", plan.dump());
  REQUIRE(setup.live(6, 3, "plain.jsonl", "--learning-rate 1e-3").status == 0);
  plan["pipelines"][0]["stages"][0]["recompute"] = "full";
  plan["pipelines"][0]["stages"][2]["recompute"] = "full";
  plan["pipelines"][1]["stages"][0]["recompute"] = "full";
  setup.s.write("plan.json", plan.dump());
  const auto run = setup.live(6, 3, "recomputed.jsonl", "--learning-rate 1e-3");
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(losses(setup.steps("recomputed.jsonl")) == losses(setup.steps("plain.jsonl")));  // bit for bit
  // Selectively: the degree-2 stage's blocks run their heads' attention again.
  plan["pipelines"][0]["stages"][0]["recompute"] = "selective";
  plan["pipelines"][0]["stages"][2].erase("recompute");
  plan["pipelines"][1]["stages"][0]["recompute"] = "selective";
  setup.s.write("plan.json", plan.dump());
  const auto selective = setup.live(6, 3, "selective.jsonl", "--learning-rate 1e-3");
  INFO(selective.err);
  REQUIRE(selective.status == 0);
  CHECK(losses(setup.steps("selective.jsonl")) == losses(setup.steps("plain.jsonl")));  // bit for bit
  CHECK(setup.s.processes_left() == 0);
}
