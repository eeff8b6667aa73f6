// Derivation in played_pipeline.h.
#include "played_pipeline.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>

#include "interleaved_orders.h"
#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

namespace {

// One pass of a play: virtual stage, microbatch, direction.
struct PlayStep {
  int stage = 0, microbatch = 0, device = 0;
  bool forward = true;
};

// Every pass of the shape (devices D, chunks v, microbatches M) in an order
// where each comes after its device's earlier passes and after the pass
// that sends its input, so that a play is one loop over it with no pass
// tried before it is ready (every time is the same sum in any such order).
// The order depends on the shape alone. Sweeps over the devices, each
// running what it can in its own order, find the passes ready; each gets
// a depth, one past its device's previous pass and the pass that sent its
// input, and the order is by depth: passes of one depth depend on none of
// each other, so the processor overlaps them, where one device's passes
// in a row would each wait for the last. (Empty where the sweeps stall,
// which neither order does.)
std::vector<PlayStep> make_play_order(int D, int v, int M) {
  const int S = D * v;
  std::vector<std::vector<PipelinePass>> plain;
  if (v == 1) {
    for (int d = 0; d < D; ++d) plain.push_back(one_f_one_b(d, S, M));
  }
  const std::vector<std::vector<PipelinePass>>& order = v == 1 ? plain : interleaved_orders(D, v, M).order;
  const auto at = [M](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + static_cast<std::size_t>(m); };
  // The depth of the pass that sends each pass's input; -1: not yet sent.
  std::vector<int> activation(static_cast<std::size_t>(S) * static_cast<std::size_t>(M), -1);
  std::vector<int> gradient(activation.size(), -1);
  for (int m = 0; m < M; ++m) activation[at(0, m)] = 0;
  std::vector<std::size_t> next(static_cast<std::size_t>(D), 0);
  std::vector<int> device_depth(static_cast<std::size_t>(D), 0);
  std::vector<std::pair<int, PlayStep>> found;  // (depth, pass)
  found.reserve(2 * activation.size());
  const auto advance = [&](int d) {
    bool ran = false;
    auto& i = next[static_cast<std::size_t>(d)];
    const auto& passes = order[static_cast<std::size_t>(d)];
    while (i < passes.size()) {
      const PipelinePass pass = passes[i];
      const int s = pass.chunk * D + d;
      const std::size_t input = at(s, pass.microbatch);
      const int sent = pass.forward ? activation[input] : gradient[input];
      if (sent < 0) break;
      int& depth = device_depth[static_cast<std::size_t>(d)];
      depth = std::max(depth, sent) + 1;
      if (pass.forward) {
        (s + 1 < S ? activation[at(s + 1, pass.microbatch)] : gradient[input]) = depth;
      } else if (s > 0) {
        gradient[at(s - 1, pass.microbatch)] = depth;
      }
      found.push_back({depth, {s, pass.microbatch, d, pass.forward}});
      ++i;
      ran = true;
    }
    return ran;
  };
  while (found.size() < 2 * activation.size()) {
    bool ran = false;
    for (int d = 0; d < D; ++d) ran |= advance(d);
    for (int d = D - 1; d >= 0; --d) ran |= advance(d);
    if (!ran) return {};
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PlayStep> out;
  out.reserve(found.size());
  for (const auto& f : found) out.push_back(f.second);
  return out;
}

// The play order of a shape, made on first use. A few shapes are kept per
// thread (a search plays one shape many times in a row): eight of up to a
// million passes (16 MiB) and the last larger one. The reference stays
// valid until this thread asks for another shape.
const std::vector<PlayStep>& play_order(int D, int v, int M) {
  struct Kept {
    int devices = 0, chunks = 0, microbatches = 0;
    std::vector<PlayStep> steps;
  };
  constexpr std::size_t kKept = 8;
  constexpr double kMostPassesKept = 1 << 20;
  thread_local std::array<std::unique_ptr<Kept>, kKept> kept;
  thread_local std::size_t oldest = 0;
  thread_local Kept large;
  for (const auto& k : kept) {
    if (k && k->devices == D && k->chunks == v && k->microbatches == M) return k->steps;
  }
  if (large.devices == D && large.chunks == v && large.microbatches == M) return large.steps;
  if (2.0 * D * v * M > kMostPassesKept) {
    large = Kept{D, v, M, make_play_order(D, v, M)};
    return large.steps;
  }
  auto& slot = kept[oldest];
  oldest = (oldest + 1) % kKept;
  slot = std::make_unique<Kept>(Kept{D, v, M, make_play_order(D, v, M)});
  return slot->steps;
}

}  // namespace

PlayedPipeline play_pipeline(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                             const std::vector<Milliseconds>& transfer_ms, int microbatches, int interleave) {
  const int S = static_cast<int>(forward_ms.size());
  const int M = microbatches;
  const int v = std::max(1, interleave);
  PlayedPipeline out;
  out.last_backward_ms.assign(static_cast<std::size_t>(S), 0.0);
  if (S == 0 || M < 1 || S % v != 0) return out;
  const int D = S / v;  // devices: virtual stage s on device s mod D
  // activation[s M + m], gradient[s M + m]: when the input of that pass
  // arrives.
  const auto at = [M](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + static_cast<std::size_t>(m); };
  std::vector<double> activation(static_cast<std::size_t>(S) * static_cast<std::size_t>(M), 0.0);
  std::vector<double> gradient(activation.size(), 0.0);
  std::vector<double> free(static_cast<std::size_t>(D), 0.0), forward_link(static_cast<std::size_t>(S), 0.0),
      backward_link(static_cast<std::size_t>(S), 0.0);
  for (const PlayStep& pass : play_order(D, v, M)) {
    const int s = pass.stage;
    double& device_free = free[static_cast<std::size_t>(pass.device)];
    const auto i = at(s, pass.microbatch);
    const double ready = pass.forward ? activation[i] : gradient[i];
    const double end = std::max(device_free, ready) + (pass.forward ? forward_ms[static_cast<std::size_t>(s)] : backward_ms[static_cast<std::size_t>(s)]);
    device_free = end;
    if (pass.forward && s + 1 < S) {
      double& link = forward_link[static_cast<std::size_t>(s)];
      link = std::max(end, link) + transfer_ms[static_cast<std::size_t>(s)];
      activation[i + static_cast<std::size_t>(M)] = link;
    } else if (pass.forward) {
      gradient[i] = end;  // the last stage's loss
    } else {
      out.last_backward_ms[static_cast<std::size_t>(s)] = end;
      if (s > 0) {
        double& link = backward_link[static_cast<std::size_t>(s)];
        link = std::max(end, link) + transfer_ms[static_cast<std::size_t>(s - 1)];
        gradient[i - static_cast<std::size_t>(M)] = link;
      }
    }
    out.end_ms = std::max(out.end_ms, end);
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
