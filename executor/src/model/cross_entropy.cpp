#include "model/cross_entropy.h"

#include <algorithm>

namespace oobleck::executor {
namespace {

// Rows turned into gradient together: about 1 MB, so that the scaling pass
// reads what the exponential just wrote from cache.
constexpr std::int64_t kBlockBytes = 1 << 20;

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets) {
    torch::Tensor log_probabilities = at::_log_softmax(logits, 1, /*half_to_float=*/false);
    torch::Tensor loss = at::nll_loss(log_probabilities, targets);
    // Kept outside save_for_backward: the backward overwrites it.
    ctx->saved_data["log_probabilities"] = log_probabilities;
    ctx->saved_data["targets"] = targets;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list outputs) {
    torch::Tensor gradient = ctx->saved_data["log_probabilities"].toTensor();
    const torch::Tensor targets = ctx->saved_data["targets"].toTensor();
    ctx->saved_data.clear();
    const std::int64_t rows = gradient.size(0), vocabulary = gradient.size(1);
    // As nll_loss's backward computes it: the output's gradient over the
    // rows, in float32. d loss / d logit_j = scale (p_j - [j = target]).
    const float scale = outputs[0].item<float>() / static_cast<float>(rows);
    const std::int64_t block = std::max<std::int64_t>(1, kBlockBytes / (vocabulary * 4));
    for (std::int64_t begin = 0; begin < rows; begin += block) {
      torch::Tensor part = gradient.narrow(0, begin, std::min(block, rows - begin));
      part.exp_();
      part.mul_(scale);
    }
    gradient.scatter_add_(1, targets.unsqueeze(1), torch::full({rows, 1}, -scale, gradient.options()));
    return {gradient, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cross_entropy_in_place_backward(const torch::Tensor& logits, const torch::Tensor& targets) {
  return CrossEntropy::apply(logits, targets);
}

}  // namespace oobleck::executor
