// Derivation in played_pipeline.h.
#include "played_pipeline.h"

#include <algorithm>
#include <cstddef>

#include "interleaved_orders.h"
#include "shape_cache.h"
#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

namespace {

// One pass of a play: its kind (a stage's forward s at s, its backward at
// S + s) and its microbatch. A kind has all else a play needs
// (play_in_order): its duration, its device, the link its output leaves by,
// and where its input and output arrive, at slot base + microbatch.
struct PlayStep {
  int pass = 0, microbatch = 0;
};

// Each device's passes in order (pass p of device d on virtual stage
// p.chunk D + d), swept over the devices forward and back, each device
// running what it can, until every pass has run or none can: `run(d, s,
// pass)` runs the pass where its input has arrived and says whether it
// did. Whether every pass ran (neither order ever stalls; a guard).
template <typename Run>
bool sweep_devices(int D, int v, int M, Run&& run) {
  const int S = D * v;
  std::vector<std::vector<PipelinePass>> order;
  for (int d = 0; d < D; ++d) order.push_back(v == 1 ? one_f_one_b(d, S, M) : interleaved_one_f_one_b(d, D, v, M));
  std::vector<std::size_t> next(static_cast<std::size_t>(D), 0);
  std::size_t left = 2 * static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  const auto advance = [&](int d) {
    bool ran = false;
    auto& i = next[static_cast<std::size_t>(d)];
    const auto& passes = order[static_cast<std::size_t>(d)];
    while (i < passes.size() && run(d, passes[i].chunk * D + d, passes[i])) {
      ++i;
      --left;
      ran = true;
    }
    return ran;
  };
  while (left > 0) {
    bool ran = false;
    for (int d = 0; d < D; ++d) ran |= advance(d);
    for (int d = D - 1; d >= 0; --d) ran |= advance(d);
    if (!ran) return false;
  }
  return true;
}

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
  const auto SM = static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  const auto at = [M](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + static_cast<std::size_t>(m); };
  // The depth of the pass that sends each pass's input (-1: not yet
  // sent); the passes as found, and their depths. (Kept per thread: a
  // search makes the orders of many shapes, and fresh pages cost more
  // than the making.)
  thread_local std::vector<int> activation, gradient, depths;
  thread_local std::vector<PlayStep> found;
  activation.assign(SM, -1);
  gradient.assign(SM, -1);
  depths.clear();
  found.clear();
  for (int m = 0; m < M; ++m) activation[at(0, m)] = 0;
  std::vector<int> device_depth(static_cast<std::size_t>(D), 0);
  int deepest = 0;
  const bool complete = sweep_devices(D, v, M, [&](int d, int s, const PipelinePass& pass) {
    const std::size_t input = at(s, pass.microbatch);
    const int sent = pass.forward ? activation[input] : gradient[input];
    if (sent < 0) return false;
    int& depth = device_depth[static_cast<std::size_t>(d)];
    depth = std::max(depth, sent) + 1;
    deepest = std::max(deepest, depth);
    if (pass.forward) {
      (s + 1 < S ? activation[at(s + 1, pass.microbatch)] : gradient[input]) = depth;
    } else if (s > 0) {
      gradient[at(s - 1, pass.microbatch)] = depth;
    }
    PlayStep step;
    step.pass = pass.forward ? s : S + s;
    step.microbatch = pass.microbatch;
    found.push_back(step);
    depths.push_back(depth);
    return true;
  });
  if (!complete) return {};
  // (By depth, in the order found within one: a counting sort.)
  std::vector<std::size_t> first_of_depth(static_cast<std::size_t>(deepest) + 2, 0);
  for (const int depth : depths) ++first_of_depth[static_cast<std::size_t>(depth) + 1];
  for (std::size_t d = 1; d < first_of_depth.size(); ++d) first_of_depth[d] += first_of_depth[d - 1];
  std::vector<PlayStep> out(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) out[first_of_depth[static_cast<std::size_t>(depths[i])]++] = found[i];
  return out;
}

// Shapes of up to this many passes are played in their order (2 MiB of
// it), larger ones by sweeps: kept orders stay small, and a play at
// thousands of microbatches reuses no order.
constexpr double kMostPassesInOrder = 1 << 18;

// The play order of a shape, made on first use and kept per thread
// (shape_cache.h): a search plays each shape many times, and shapes recur
// across node counts. Up to 2^21 passes are kept (16 MiB).
const std::vector<PlayStep>& play_order(int D, int v, int M) {
  thread_local ShapeCache<std::vector<PlayStep>> kept(std::size_t{1} << 21);
  return kept.get(D, v, M, [&] { return make_play_order(D, v, M); });
}

}  // namespace

PlayedPipeline play_pipeline_by_sweeps(const std::vector<Milliseconds>& forward_ms,
                                      const std::vector<Milliseconds>& backward_ms,
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
  std::vector<double> free(D, 0.0), forward_link(S, 0.0), backward_link(S, 0.0);
  sweep_devices(D, v, M, [&](int d, int s, const PipelinePass& pass) {
    const double ready = pass.forward ? activation[at(s, pass.microbatch)] : gradient[at(s, pass.microbatch)];
    if (ready == kUnknown) return false;
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
    return true;
  });
  return out;
}

namespace {

// The play in the shape's order (play_order): its end, and where
// `last_backward` is given (S + 1 long), each stage's last backward's end
// at [s] (a play that needs only its end skips a store a pass).
Milliseconds play_in_order(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                           const std::vector<Milliseconds>& transfer_ms, int M, int v, double* last_backward) {
  const int S = static_cast<int>(forward_ms.size());
  const int D = S / v;  // devices: virtual stage s on device s mod D
  const auto SM = static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  // When each pass's input arrives: activations of stage s at s M + m
  // (stage 0's at once), gradients at S M + s M + m, and stage 0's
  // backwards' outputs, which no pass reads, at 2 S M + m. Per kind of
  // pass, side by side (one index, one cache line): its duration, its
  // link's transfer and last arrival, its device, and the slots of its
  // input and output for microbatch 0. Passes without a link (the last
  // stage's forwards, whose loss is their own backward's input, and the
  // first stage's backwards) leave by a link of their own with no
  // transfer: a device's passes end one after another, so such a link's
  // last arrival is never later than the pass's end, and the arrival is
  // the end itself. Each device's last end. (Kept per thread: a search
  // plays thousands of times.)
  struct Kind {
    double duration = 0, transfer = 0, sent = 0;
    int device = 0, input = 0, output = 0;
  };
  thread_local std::vector<double> arrival, free;
  thread_local std::vector<Kind> kinds;
  arrival.assign(2 * SM + static_cast<std::size_t>(M), 0.0);
  kinds.assign(2 * static_cast<std::size_t>(S), Kind{});
  free.assign(static_cast<std::size_t>(D), 0.0);
  const int activations = 0, gradients = static_cast<int>(SM), unread = static_cast<int>(2 * SM);
  for (int s = 0; s < S; ++s) {
    const auto i = static_cast<std::size_t>(s);
    Kind& forward = kinds[i];
    Kind& backward = kinds[static_cast<std::size_t>(S) + i];
    forward.duration = forward_ms[i];
    backward.duration = backward_ms[i];
    if (s + 1 < S) forward.transfer = transfer_ms[i];
    if (s > 0) backward.transfer = transfer_ms[i - 1];
    forward.device = backward.device = s % D;
    forward.input = activations + s * M;
    forward.output = s + 1 < S ? activations + (s + 1) * M : gradients + s * M;
    backward.input = gradients + s * M;
    backward.output = s > 0 ? gradients + (s - 1) * M : unread;
  }
  for (const PlayStep& pass : play_order(D, v, M)) {
    Kind& kind = kinds[static_cast<std::size_t>(pass.pass)];
    double& device_free = free[static_cast<std::size_t>(kind.device)];
    const double end = std::max(device_free, arrival[static_cast<std::size_t>(kind.input + pass.microbatch)]) + kind.duration;
    device_free = end;
    kind.sent = std::max(end, kind.sent) + kind.transfer;
    arrival[static_cast<std::size_t>(kind.output + pass.microbatch)] = kind.sent;
    if (last_backward) last_backward[pass.pass >= S ? pass.pass - S : S] = end;
  }
  // A device's passes end one after another: the last pass of all ends
  // last on its device.
  return *std::max_element(free.begin(), free.end());
}

// The play's end (0 for a shape that cannot play), and where
// `last_backward` is given (S + 1 long), each stage's last backward's end
// at [s]: in the shape's order, or by sweeps past the orders kept.
Milliseconds play(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                  const std::vector<Milliseconds>& transfer_ms, int M, int interleave, double* last_backward) {
  const int S = static_cast<int>(forward_ms.size());
  const int v = std::max(1, interleave);
  if (S == 0 || M < 1 || S % v != 0) return 0;
  if (2.0 * S * M <= kMostPassesInOrder) {
    return play_in_order(forward_ms, backward_ms, transfer_ms, M, v, last_backward);
  }
  const PlayedPipeline swept = play_pipeline_by_sweeps(forward_ms, backward_ms, transfer_ms, M, v);
  if (last_backward) std::copy(swept.last_backward_ms.begin(), swept.last_backward_ms.end(), last_backward);
  return swept.end_ms;
}

}  // namespace

PlayedPipeline play_pipeline(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                             const std::vector<Milliseconds>& transfer_ms, int microbatches, int interleave) {
  const auto S = forward_ms.size();
  thread_local std::vector<double> last_backward;  // (slot S: forwards')
  last_backward.assign(S + 1, 0.0);
  PlayedPipeline out;
  out.end_ms = play(forward_ms, backward_ms, transfer_ms, microbatches, interleave, last_backward.data());
  out.last_backward_ms.assign(last_backward.begin(), last_backward.end() - 1);
  return out;
}

namespace {

// Each stage's passes and each boundary's transfer as the cost model
// prices them (into per-thread vectors: a search plays thousands of times).
struct PricedStages {
  const std::vector<Milliseconds>& forward;
  const std::vector<Milliseconds>& backward;
  const std::vector<Milliseconds>& transfer;
};
PricedStages price_stages(const CostModel& cost, const std::vector<Stage>& stages,
                          const std::vector<double>* stage_speeds) {
  thread_local std::vector<Milliseconds> forward, backward, transfer;
  forward.clear();
  backward.clear();
  transfer.clear();
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    const double speed = stage_speeds ? (*stage_speeds)[s] : 1.0;
    forward.push_back(cost.stage_forward_ms(st.layer_begin, st.layer_end, st.gpus) / speed);
    backward.push_back(cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute) / speed);
    if (s + 1 < stages.size()) {
      transfer.push_back(cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus));
    }
  }
  return {forward, backward, transfer};
}

}  // namespace

PlayedPipeline play_pipeline(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                             const std::vector<double>* stage_speeds, int interleave) {
  const PricedStages priced = price_stages(cost, stages, stage_speeds);
  return play_pipeline(priced.forward, priced.backward, priced.transfer, microbatches, interleave);
}

Milliseconds played_end_ms(const std::vector<Milliseconds>& forward_ms, const std::vector<Milliseconds>& backward_ms,
                           const std::vector<Milliseconds>& transfer_ms, int microbatches, int interleave) {
  return play(forward_ms, backward_ms, transfer_ms, microbatches, interleave, nullptr);
}

Milliseconds played_end_ms(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                           int interleave) {
  const PricedStages priced = price_stages(cost, stages, nullptr);
  return played_end_ms(priced.forward, priced.backward, priced.transfer, microbatches, interleave);
}

}  // namespace oobleck::detail
