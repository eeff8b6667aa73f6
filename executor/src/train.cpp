// The single-process reference. It takes step k's global batch from the
// same order as the live workers (data.h) and scales each microbatch's mean
// token loss by 1/B, so the gradient it sums is the full-batch gradient the
// pipelines' all-reduces add up to (worker.cpp). Global-norm clipping, then
// AdamW.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "oobleck/executor/data.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/train.h"
#include "train_common.h"

namespace oobleck::executor {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::string metrics_line(const StepMetrics& m) {
  return nlohmann::ordered_json{
      {"step", m.step}, {"loss", m.loss}, {"samples", m.samples}, {"iteration_ms", m.iteration_ms}}
      .dump();
}

ModelConfig model_of_profile(const Profile& profile) {
  ModelConfig c = parse_model_config(profile.model_json, profile.origin + ": model");
  if (static_cast<int>(profile.layers.size()) != pipeline_layers(c)) {
    throw InputError(profile.origin + ": " + std::to_string(profile.layers.size()) + " layers, but its model has " +
                     std::to_string(pipeline_layers(c)) + " (embedding, blocks, head)");
  }
  return c;
}

std::vector<StepMetrics> train_single_process(const std::vector<std::uint16_t>& tokens, const TrainOptions& o,
                                              int global_microbatches) {
  torch::manual_seed(o.seed);
  Gpt model(o.model, o.seed);
  const auto parameters = model.parameters();
  torch::optim::AdamW optimizer(parameters, adamw_options(o));
  const int B = global_microbatches, mb = o.microbatch_size, S = o.model.seq_len;
  std::vector<StepMetrics> out;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < B; ++m) {
      const Sequences batch = step_sequences(tokens, o.seed, step, m * mb, mb, S);
      const auto logits = model.forward(long_tensor(batch.inputs, mb, S));
      const auto loss = language_model_loss(logits, long_tensor(batch.targets, mb, S)) / B;
      loss.backward();
      loss_sum += loss.item<double>();
    }
    double norm2 = 0;
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters) {
      grads.push_back(p.grad());
      norm2 += p.grad().pow(2).sum().item<double>();
    }
    clip(grads, std::sqrt(norm2), o.clip_norm);
    optimizer.step();
    out.push_back({step, loss_sum, static_cast<std::int64_t>(step + 1) * B * mb,
                   std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
  }
  return out;
}

}  // namespace oobleck::executor
