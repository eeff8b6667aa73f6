// The arithmetic of a training step, shared by the single-process reference
// and the pipeline workers so that both compute exactly the same thing.
//
// Gradients are summed over microbatches in float64 and rounded to float32
// once, and the global norm is summed layer by layer in layer order: the
// result then does not depend on how the microbatches were split between
// pipelines, nor on the order partial sums were added in. (Summed in float32,
// the order alone moves results by an ulp, which training amplifies: two
// splits drift apart by 1e-2 in loss within a few hundred steps.)
#pragma once

#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layer_state.h"
#include "oobleck/executor/train.h"

namespace oobleck::executor {

[[nodiscard]] inline torch::Device train_device(const TrainOptions& o) {
  return o.device == "cuda" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device))
                            : torch::Device(torch::kCPU);
}

// Times taken on the host mean something on a GPU only once its queued
// work is done.
inline void wait_for_device(const TrainOptions& o) {
  if (o.device == "cuda") torch::cuda::synchronize(o.cuda_device);
}

[[nodiscard]] inline torch::Tensor long_tensor(const std::vector<std::int64_t>& values, std::int64_t rows,
                                               std::int64_t cols, const torch::Device& device) {
  // A copy either way: the tensor must not alias `values`.
  return torch::from_blob(const_cast<std::int64_t*>(values.data()), {rows, cols}, torch::kLong)
      .to(device, torch::kLong, /*non_blocking=*/false, /*copy=*/true);
}

[[nodiscard]] inline torch::optim::AdamWOptions adamw_options(const TrainOptions& o) {
  return torch::optim::AdamWOptions(o.learning_rate).weight_decay(o.weight_decay);
}

// A gradient's sharing label: its layer, or kTied for the token embedding
// and the head's copy of it (one weight, held at both ends of the model).
inline constexpr int kTied = -1;

// One parameter's gradient, summed over the step's microbatches in float64.
struct GradientSlot {
  int label = 0;
  torch::Tensor parameter;
  torch::Tensor sum;  // float64; holds this step's sum only where `summed`
  std::string name;   // the parameter's, within its layer
  bool summed = false;
  int layer = 0;  // (the tied weight's label is kTied: its layer is here)
};

// The slots of layers [begin, end) of `layers`, in layer and parameter order.
[[nodiscard]] inline std::vector<GradientSlot> gradient_slots(const std::map<int, HeldLayer>& layers, int begin,
                                                              int end, const ModelConfig& model) {
  const int last_layer = pipeline_layers(model) - 1;
  const auto names = tied_parameter_names(model);
  std::vector<GradientSlot> out;
  for (int l = begin; l < end; ++l) {
    for (const auto& item : layers.at(l).module->named_parameters()) {
      const bool tied = names && ((l == 0 && item.key() == names->first) ||
                                  (l == last_layer && item.key() == names->second));
      out.push_back({tied ? kTied : l, item.value(),
                     torch::zeros(item.value().sizes(),
                                  torch::TensorOptions().dtype(torch::kFloat64).device(item.value().device())),
                     item.key(), false, l});
    }
  }
  return out;
}

// A step starts from nothing: no sums, and no gradient left from the last step.
// A parameter's gradient is left undefined between microbatches, so that
// autograd hands over each microbatch's gradient instead of adding it to a
// zeroed one (the same values, one pass over memory fewer). The sums are not
// zeroed: the first microbatch's gradient is written into them, and
// settle_sums zeroes those no microbatch reached, before they are read.
inline void forget_gradients(std::vector<GradientSlot>& slots) {
  for (auto& s : slots) s.parameter.mutable_grad() = torch::Tensor();
}
inline void begin_sums(std::vector<GradientSlot>& slots) {
  for (auto& s : slots) s.summed = false;
  forget_gradients(slots);
}

// Before the sums are read: those no microbatch of the step reached are zeroed.
inline void settle_sums(std::vector<GradientSlot>& slots) {
  torch::NoGradGuard no_grad;
  for (auto& s : slots) {
    if (!s.summed) s.sum.zero_();
    s.summed = true;
  }
}

// sum += grad (or sum = 0 + grad, `first`), a float32 gradient into a
// float64 sum. On the CPU, aten would first copy the gradient to float64
// (its CPU kernels do not widen as they go); a loop widens element by
// element instead, the same sums bit for bit (sum + double(g) is what the
// promoted add computes). On a GPU the first gradient is copied, widened:
// 0 + g but for the sign of a zero, which no later step can tell apart.
inline void add_widened(torch::Tensor& sum, const torch::Tensor& grad, bool first = false) {
  if (!sum.is_cpu() || !grad.is_cpu() || sum.scalar_type() != torch::kFloat64 ||
      grad.scalar_type() != torch::kFloat32 || !sum.is_contiguous() || !grad.is_contiguous() ||
      sum.numel() != grad.numel()) {
    if (first) {
      sum.copy_(grad);
    } else {
      sum.add_(grad);
    }
    return;
  }
  double* out = sum.data_ptr<double>();
  const float* in = grad.data_ptr<float>();
  at::parallel_for(0, sum.numel(), 1 << 15, [&](std::int64_t begin, std::int64_t end) {
    if (first) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = 0.0 + static_cast<double>(in[i]);
    } else {
      for (std::int64_t i = begin; i < end; ++i) out[i] += static_cast<double>(in[i]);
    }
  });
}

// After a microbatch's backward pass: its gradients join the sums.
inline void add_microbatch(std::vector<GradientSlot>& slots) {
  torch::NoGradGuard no_grad;
  for (auto& s : slots) {
    auto& grad = s.parameter.mutable_grad();
    if (!grad.defined()) continue;  // no part in this microbatch's loss
    add_widened(s.sum, grad, !s.summed);
    s.summed = true;
    grad = torch::Tensor();
  }
}

// This worker's part of the tied weight's gradient (both copies it holds).
[[nodiscard]] inline torch::Tensor tied_sum(const std::vector<GradientSlot>& slots) {
  torch::Tensor out;
  for (const auto& s : slots) {
    if (s.label == kTied) out = out.defined() ? out + s.sum : s.sum.clone();
  }
  return out;
}

// The sums, rounded once, become the parameters' gradients; every copy of
// the tied weight gets the whole tied gradient `tied_total`.
inline void write_gradients(std::vector<GradientSlot>& slots, const torch::Tensor& tied_total) {
  torch::NoGradGuard no_grad;
  for (auto& s : slots) {
    auto grad = torch::empty_like(s.parameter);
    grad.copy_(s.label == kTied ? tied_total : s.sum);
    s.parameter.mutable_grad() = grad;
  }
}

// Each tensor's squared L2 norm in float64, brought to the host with one
// copy: on a GPU each .item() would wait for the device. A GPU's norm
// kernel reads a float32 gradient once and adds in float64; a float64 copy
// of it, squared and summed, would write and read twice its size again.
// The CPU adds the float64 squares as it always has.
[[nodiscard]] inline std::vector<double> squared_norms(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return {};
  std::vector<torch::Tensor> squares;
  squares.reserve(tensors.size());
  for (const auto& t : tensors) {
    squares.push_back(t.is_cuda()
                          ? at::linalg_vector_norm(t, 2, /*dim=*/{}, /*keepdim=*/false, torch::kFloat64).square()
                          : t.to(torch::kFloat64).pow(2).sum());
  }
  const auto host = torch::stack(squares).to(torch::kCPU).contiguous();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

// Squared norms by label (index label + 1: the tied weight first), of the
// labels `counted` picks, each label's tied copies counted once.
[[nodiscard]] inline std::vector<double> label_norms(const std::vector<GradientSlot>& slots, int last_layer,
                                                     const std::function<bool(int)>& counted) {
  std::vector<double> out(static_cast<std::size_t>(last_layer) + 2, 0.0);
  std::vector<int> labels;
  std::vector<torch::Tensor> gradients;
  bool tied_done = false;
  for (const auto& s : slots) {
    if (!counted(s.label) || (s.label == kTied && tied_done)) continue;
    tied_done = tied_done || s.label == kTied;
    labels.push_back(s.label);
    gradients.push_back(s.parameter.grad());
  }
  // Added on the host in slot order.
  const std::vector<double> values = squared_norms(gradients);
  for (std::size_t i = 0; i < labels.size(); ++i) out[static_cast<std::size_t>(labels[i] + 1)] += values[i];
  return out;
}

// Scales the gradients so that the global norm (the label norms added in
// label order) is at most `max_norm`, as torch.nn.utils.clip_grad_norm_ does.
inline void clip_by_global_norm(std::vector<GradientSlot>& slots, const std::vector<double>& norms,
                                double max_norm) {
  double total = 0;
  for (double n : norms) total += n;
  const double coefficient = max_norm / (std::sqrt(total) + 1e-6);
  if (coefficient >= 1) return;
  torch::NoGradGuard no_grad;
  for (auto& s : slots) s.parameter.mutable_grad().mul_(coefficient);
}

}  // namespace oobleck::executor
