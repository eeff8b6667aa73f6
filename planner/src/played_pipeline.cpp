// Derivation in played_pipeline.h.
#include "played_pipeline.h"

#include <algorithm>
#include <limits>

#include "interleaved_orders.h"
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
  // activation[s M + m], gradient[s M + m]: when the input of that pass
  // arrives.
  const auto at = [M](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + static_cast<std::size_t>(m); };
  std::vector<double> activation(static_cast<std::size_t>(S) * static_cast<std::size_t>(M), kUnknown);
  std::vector<double> gradient(activation.size(), kUnknown);
  for (int m = 0; m < M; ++m) activation[at(0, m)] = 0;
  // Each device's passes in order; pass p of device d runs on virtual
  // stage p.chunk D + d.
  std::vector<std::vector<PipelinePass>> plain;
  if (v == 1) {
    for (int d = 0; d < D; ++d) plain.push_back(one_f_one_b(d, S, M));
  }
  const std::vector<std::vector<PipelinePass>>& order = v == 1 ? plain : interleaved_orders(D, v, M).order;
  std::vector<std::size_t> next(D, 0);
  std::vector<double> free(D, 0.0), forward_link(S, 0.0), backward_link(S, 0.0);
  std::size_t left = 2 * static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  // A device runs what it can; whether it ran anything.
  const auto advance = [&](int d) {
    bool ran = false;
    while (next[d] < order[d].size()) {
      const PipelinePass pass = order[d][next[d]];
      const int s = pass.chunk * D + d;
      const double ready = pass.forward ? activation[at(s, pass.microbatch)] : gradient[at(s, pass.microbatch)];
      if (ready == kUnknown) break;
      const double end = std::max(free[d], ready) + (pass.forward ? forward_ms[s] : backward_ms[s]);
      free[d] = end;
      if (pass.forward && s + 1 < S) {
        forward_link[s] = std::max(end, forward_link[s]) + transfer_ms[s];
        activation[at(s + 1, pass.microbatch)] = forward_link[s];
      } else if (pass.forward) {
        gradient[at(s, pass.microbatch)] = end;  // the last stage's loss
      } else if (s > 0) {
        backward_link[s] = std::max(end, backward_link[s]) + transfer_ms[s - 1];
        gradient[at(s - 1, pass.microbatch)] = backward_link[s];
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
