// Derivation in played_pipeline.h.
#include "played_pipeline.h"

#include <algorithm>
#include <limits>

#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

PlayedPipeline play_pipeline(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                             const std::vector<Milliseconds>& transfer_ms, int microbatches, int interleave) {
  const int S = static_cast<int>(forward_ms.size());
  const int M = microbatches;
  const int v = std::max(1, interleave);
  constexpr double kUnknown = -1;
  PlayedPipeline out;
  out.last_backward_ms.assign(static_cast<std::size_t>(S), 0.0);
  if (S == 0 || M < 1 || S % v != 0) return out;
  const int D = S / v;  // devices: virtual stage s on device s mod D
  // activation[s][m], gradient[s][m]: when the input of that pass arrives.
  std::vector<std::vector<double>> activation(S, std::vector<double>(M, kUnknown));
  std::vector<std::vector<double>> gradient(S, std::vector<double>(M, kUnknown));
  for (int m = 0; m < M; ++m) activation[0][m] = 0;
  // Each device's passes in order, with the virtual stage each runs on.
  std::vector<std::vector<std::pair<PipelinePass, int>>> order(D);
  for (int d = 0; d < D; ++d) {
    if (v == 1) {
      for (const PipelinePass& pass : one_f_one_b(d, S, M)) order[d].emplace_back(pass, d);
    } else {
      for (const PipelinePass& pass : interleaved_one_f_one_b(d, D, v, M)) {
        order[d].emplace_back(pass, pass.chunk * D + d);
      }
    }
  }
  std::vector<std::size_t> next(D, 0);
  std::vector<double> free(D, 0.0), forward_link(S, 0.0), backward_link(S, 0.0);
  std::size_t left = 2 * static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  // A device runs what it can; whether it ran anything.
  const auto advance = [&](int d) {
    bool ran = false;
    while (next[d] < order[d].size()) {
      const auto [pass, s] = order[d][next[d]];
      const double ready = pass.forward ? activation[s][pass.microbatch] : gradient[s][pass.microbatch];
      if (ready == kUnknown) break;
      const double end = std::max(free[d], ready) + (pass.forward ? forward_ms[s] : backward_ms[s]);
      free[d] = end;
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
      ++next[d];
      --left;
      ran = true;
    }
    return ran;
  };
  while (left > 0) {
    bool ran = false;
    for (int d = 0; d < D; ++d) ran |= advance(d);
    for (int d = D - 1; d >= 0; --d) ran |= advance(d);
    if (!ran) break;  // (neither order ever deadlocks; a guard all the same)
  }
  return out;
}

PlayedPipeline play_pipeline(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                             const std::vector<double>* stage_speeds, int interleave) {
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
  return play_pipeline(forward, backward, transfer, microbatches, interleave);
}

}  // namespace oobleck::detail
