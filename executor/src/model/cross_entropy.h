// The language model's loss on the CPU: cross-entropy of float32 logits
// (rows, V) against targets (rows), the mean over the rows.
#pragma once

#include <torch/torch.h>

namespace oobleck::executor {

// The same value as log_softmax followed by nll_loss, bit for bit. Its
// backward turns the saved log-probabilities into the logits' gradient in
// place (exp, scaled, minus the scale at each target), a block of rows at a
// time while they are in cache. PyTorch's composition writes a zero
// gradient the size of the logits, scatters into it and reads it back with
// the log-probabilities into a third tensor: at GPT-2's 50,257 tokens those
// passes cost about as much as the head's matrix product.
[[nodiscard]] torch::Tensor cross_entropy_in_place_backward(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace oobleck::executor
