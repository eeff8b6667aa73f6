// Derivation in played_pipeline.h.
#include "played_pipeline.h"

#include <algorithm>
#include <limits>

#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

PlayedPipeline play_pipeline(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                             const std::vector<Milliseconds>& transfer_ms, int microbatches) {
  const int S = static_cast<int>(forward_ms.size());
  const int M = microbatches;
  constexpr double kUnknown = -1;
  PlayedPipeline out;
  out.last_backward_ms.assign(static_cast<std::size_t>(S), 0.0);
  if (S == 0 || M < 1) return out;
  // activation[s][m], gradient[s][m]: when the input of that pass arrives.
  std::vector<std::vector<double>> activation(S, std::vector<double>(M, kUnknown));
  std::vector<std::vector<double>> gradient(S, std::vector<double>(M, kUnknown));
  for (int m = 0; m < M; ++m) activation[0][m] = 0;
  std::vector<std::vector<PipelinePass>> order(S);
  for (int s = 0; s < S; ++s) order[s] = one_f_one_b(s, S, M);
  std::vector<std::size_t> next(S, 0);
  std::vector<double> free(S, 0.0), forward_link(S, 0.0), backward_link(S, 0.0);
  std::size_t left = 2 * static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  // A stage runs what it can; whether it ran anything.
  const auto advance = [&](int s) {
    bool ran = false;
    while (next[s] < order[s].size()) {
      const PipelinePass pass = order[s][next[s]];
      const double ready = pass.forward ? activation[s][pass.microbatch] : gradient[s][pass.microbatch];
      if (ready == kUnknown) break;
      const double end = std::max(free[s], ready) + (pass.forward ? forward_ms[s] : backward_ms[s]);
      free[s] = end;
      if (pass.forward && s + 1 < S) {
        forward_link[s] = std::max(end, forward_link[s]) + transfer_ms[s];
        activation[s + 1][pass.microbatch] = forward_link[s];
      } else if (pass.forward) {
        gradient[s][pass.microbatch] = end;  // the last stage's loss
      } else if (s > 0) {
        backward_link[s] = std::max(end, backward_link[s]) + transfer_ms[s - 1];
        gradient[s - 1][pass.microbatch] = backward_link[s];
      }
      if (!pass.forward) out.last_backward_ms[s] = end;
      out.end_ms = std::max(out.end_ms, end);
      ++next[s];
      --left;
      ran = true;
    }
    return ran;
  };
  while (left > 0) {
    bool ran = false;
    for (int s = 0; s < S; ++s) ran |= advance(s);
    for (int s = S - 1; s >= 0; --s) ran |= advance(s);
    if (!ran) break;  // (1F1B's order never deadlocks; a guard all the same)
  }
  return out;
}

PlayedPipeline play_pipeline(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                             const std::vector<double>* stage_speeds) {
  std::vector<Milliseconds> forward, backward, transfer;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    const double speed = stage_speeds ? (*stage_speeds)[s] : 1.0;
    forward.push_back(cost.stage_forward_ms(st.layer_begin, st.layer_end, st.gpus) / speed);
    backward.push_back(cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute) / speed);
    if (s + 1 < stages.size()) {
      transfer.push_back(cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus));
    }
  }
  return play_pipeline(forward, backward, transfer, microbatches);
}

}  // namespace oobleck::detail
