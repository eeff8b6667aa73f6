// The single-process reference. It takes step k's global batch from the
// same order as the live workers (data.h) and scales each microbatch's mean
// token loss by 1/B, so the gradient it sums is the full-batch gradient the
// pipelines' all-reduces add up to (worker.cpp). Global-norm clipping, then
// AdamW.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "model/host_memory.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/train.h"
#include "autocast.h"
#include "train_common.h"

namespace oobleck::executor {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

std::string metrics_line(const StepMetrics& m) {
  return nlohmann::ordered_json{
      {"kind", "step"}, {"step", m.step}, {"loss", m.loss}, {"samples", m.samples}, {"iteration_ms", m.iteration_ms}}
      .dump();
}

void apply_profile(TrainOptions& options, const Profile& profile, const std::string& device) {
  options.model = model_of_profile(profile);
  options.microbatch_size = profile.microbatch_size;
  if (device != "cpu" && device != "cuda") throw InputError("--device: expected cpu or cuda, got " + device);
  if (device == "cuda" && !torch::cuda::is_available()) {
    throw InputError("--device cuda: this libtorch sees no CUDA GPU (Debian's libtorch is CPU-only: build with "
                     "tools/build-cuda.sh against a CUDA libtorch)");
  }
  options.device = device;
  const auto model = nlohmann::json::parse(profile.model_json, nullptr, false);
  const auto dtype = model.is_object() ? model.find("dtype") : model.end();
  options.bf16 = device == "cuda" && dtype != model.end() && *dtype == "bf16";
}

void use_deterministic_kernels() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

std::vector<StepMetrics> train_single_process(const std::vector<std::uint16_t>& tokens, const TrainOptions& o,
                                              int global_microbatches) {
  keep_freed_host_memory();
  torch::manual_seed(o.seed);
  // The model as one pipeline stage holding every layer, a tied weight's
  // two copies kept equal as the workers keep them.
  const int layers = pipeline_layers(o.model), last_layer = layers - 1;
  std::map<int, HeldLayer> model;
  for (int l = 0; l < layers; ++l) model.emplace(l, initial_layer(o, l));
  auto slots = gradient_slots(model, 0, layers, o.model);
  const int B = global_microbatches, mb = o.microbatch_size, S = o.model.seq_len;
  const torch::Device device = train_device(o);
  std::vector<StepMetrics> out;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = Clock::now();
    begin_sums(slots);
    // The step's tokens go to the device first, and the losses come back
    // once at the end: a GPU then never waits for the host between
    // microbatches (a copy from pageable memory, or .item(), would wait).
    std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
    for (int m = 0; m < B; ++m) {
      const Sequences batch = step_sequences(tokens, o.seed, step, m * mb, mb, S);
      batches.emplace_back(long_tensor(batch.inputs, mb, S, device), long_tensor(batch.targets, mb, S, device));
    }
    std::vector<torch::Tensor> losses;
    {
      const CudaAutocast autocast(o.bf16);
      for (const auto& [inputs, targets] : batches) {
        torch::Tensor x = inputs;
        for (auto& [l, layer] : model) x = layer.module->forward(x);
        const auto loss = language_model_loss(x, targets) / B;
        loss.backward();
        add_microbatch(slots);
        losses.push_back(loss.detach());
      }
    }
    settle_sums(slots);
    write_gradients(slots, tied_sum(slots));
    clip_by_global_norm(slots, label_norms(slots, last_layer, [](int) { return true; }), o.clip_norm);
    step_optimizers(model, 0, layers);
    const auto host_losses = torch::stack(losses).to(torch::kCPU, torch::kFloat64).contiguous();
    double loss_sum = 0;
    for (std::int64_t m = 0; m < B; ++m) loss_sum += host_losses.data_ptr<double>()[m];
    wait_for_device(o);
    out.push_back({step, loss_sum, static_cast<std::int64_t>(step + 1) * B * mb,
                   std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
  }
  return out;
}

}  // namespace oobleck::executor
