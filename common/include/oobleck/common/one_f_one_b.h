// The 1F1B schedule of one pipeline stage, the order in which both the
// simulator's iteration and the live worker run their passes. Stage s
// (0-based) of S first runs min(S - s - 1, M) warm-up forwards, so that
// the last stage can start its first backward as soon as its first
// forward is done; then one forward and one backward in turn; then the
// backwards left. It keeps at most S - s microbatches' activations alive,
// the in-flight count of the planner's memory rule.
#pragma once

#include <algorithm>
#include <vector>

namespace oobleck {

struct PipelinePass {
  bool forward = true;
  int microbatch = 0;
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

}  // namespace oobleck
