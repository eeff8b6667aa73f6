// The 1F1B schedule of one pipeline stage, the order in which both the
// simulator's iteration and the live worker run their passes. Stage s
// (0-based) of S first runs min(S - s - 1, M) warm-up forwards, so that
// the last stage can start its first backward as soon as its first
// forward is done; then one forward and one backward in turn; then the
// backwards left. It keeps at most S - s microbatches' activations alive,
// the in-flight count of the planner's memory rule.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace oobleck {

struct PipelinePass {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  // with interleaving, which of the device's model chunks
  friend bool operator==(const PipelinePass&, const PipelinePass&) = default;
};

[[nodiscard]] inline std::vector<PipelinePass> one_f_one_b(int stage, int stages, int microbatches) {
  std::vector<PipelinePass> order;
  order.reserve(2 * static_cast<std::size_t>(microbatches));
  const int warmup = std::min(stages - stage - 1, microbatches);
  for (int m = 0; m < warmup; ++m) order.push_back({true, m});
  for (int m = 0; m < microbatches; ++m) {
    if (warmup + m < microbatches) order.push_back({true, warmup + m});
    order.push_back({false, m});
  }
  return order;
}

// Interleaved 1F1B (Narayanan et al. 2021; Megatron-LM's
// forward_backward_pipelining_with_interleaving): device `rank` of
// `devices` holds `chunks` model chunks, chunk c being virtual stage
// c x devices + rank. Forward passes go through the microbatches in groups
// of `devices`: all of a group's passes on chunk 0, then on chunk 1, and so
// on; backward passes likewise from the last chunk. The device first runs
// (devices - rank - 1) x 2 + (chunks - 1) x devices warm-up forwards (all
// of them when there are no more microbatches than devices), then one
// forward and one backward in turn, then the backwards left.
// Where `devices` does not divide the microbatches (Megatron requires it
// to), the order is that of the next multiple with the missing
// microbatches' passes left out: the full order can run to its end, and
// every pass of a microbatch waits only on passes of the same microbatch,
// so the order without some microbatches can too. (Closing the table with
// a smaller last group instead, as Megatron Core's schedule table does,
// waits forever: 4 devices of 3 chunks and 5 microbatches.)
[[nodiscard]] inline std::vector<PipelinePass> interleaved_one_f_one_b(int rank, int devices, int chunks,
                                                                      int microbatches) {
  const int padded = (microbatches + devices - 1) / devices * devices;
  const int total = padded * chunks;
  const int group = devices * chunks;
  const auto pass = [&](int k, bool forward) {
    const int in_group = k % group;
    const int chunk = in_group / devices;
    return PipelinePass{forward, k / group * devices + in_group % devices, forward ? chunk : chunks - 1 - chunk};
  };
  const int warmup =
      padded == devices ? total : std::min(total, (devices - rank - 1) * 2 + (chunks - 1) * devices);
  std::vector<PipelinePass> order;
  order.reserve(2 * static_cast<std::size_t>(microbatches) * static_cast<std::size_t>(chunks));
  const auto run = [&](int k, bool forward) {
    const PipelinePass p = pass(k, forward);
    if (p.microbatch < microbatches) order.push_back(p);
  };
  for (int k = 0; k < warmup; ++k) run(k, true);
  for (int k = 0; k < total - warmup; ++k) {
    run(warmup + k, true);
    run(k, false);
  }
  for (int k = total - warmup; k < total; ++k) run(k, false);
  return order;
}

}  // namespace oobleck
