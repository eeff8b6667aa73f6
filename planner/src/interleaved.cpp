// Interleaved templates (Narayanan et al. 2021; Megatron's virtual
// pipeline stages).
//
// A pipeline of D devices runs 1F1B over D x v virtual stages, virtual
// stage j on device j mod D: each device holds v chunks spread along the
// model. Its bubble shrinks about v-fold, since a microbatch's round trip
// crosses each device v times in passes a v-th as long, at the price of v
// times as many stage-to-stage transfers and more activations in flight
// (the device's warm-up runs (D - d - 1) 2 + (v - 1) D forwards of chunks).
//
// The layouts searched are Megatron's: every device has the same tensor-
// parallel degree t (and recomputation choice) and the devices fill the
// nodes in order, D = n G / t of them (or n / k devices of k whole nodes
// where t = k G); the layers are cut into D v contiguous chunks with the
// least largest chunk (the classic linear partition: a parametric bound,
// checked greedily, then the chunks split further, never above it, until
// there are D v), by compute, and again by memory for where that cut does
// not fit. Megatron cuts equal numbers of blocks; these cuts also balance
// an embedding or a head that costs more than a block. For each
// (t, recomputation, cut) the layout is played (played_pipeline.h: each device
// one pass at a time in interleaved order, each link one transfer at a
// time) at the cost model's M, and the fastest is the node count's
// interleaved template. It is not searched over every cut; the plain
// template search (templates.cpp) stays exact for its own layouts, and
// build_templates keeps, per node count, whichever of the two plays
// faster.
//
// Memory: a device holds its chunks' state and, at any moment, the
// activations of the chunk-microbatches whose forward has run and whose
// backward has not, counted by walking its order; with recomputation the
// working memory of one layer's backward at a time, the largest of its
// chunks'.
//
// Its T(q) for the composition search is linear, as a plain template's:
// the period is the busiest device's passes per microbatch (or the
// slowest transfer), and the intercept is what makes T(M) the played time.
#include "interleaved.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "oobleck/common/one_f_one_b.h"
#include "played_pipeline.h"

namespace oobleck::detail {
namespace {

// Layers [0, L) cut into exactly `count` contiguous chunks, the largest
// chunk's weight least (weight(begin, end) grows with the range); empty
// when there are fewer layers than chunks.
template <typename Weight>
std::vector<int> min_max_cuts(int L, int count, const Weight& weight) {
  if (count > L) return {};
  // The greedy cut under `bound`: chunk ends, or empty when it needs more
  // than `count` chunks (or a layer alone exceeds it).
  const auto greedy = [&](double bound) {
    std::vector<int> ends;
    int begin = 0;
    while (begin < L) {
      int end = begin + 1;
      if (weight(begin, end) > bound) return std::vector<int>{};
      while (end < L && weight(begin, end + 1) <= bound) ++end;
      ends.push_back(end);
      if (static_cast<int>(ends.size()) > count) return std::vector<int>{};
      begin = end;
    }
    return ends;
  };
  double low = 0, high = weight(0, L);
  for (int l = 0; l < L; ++l) low = std::max(low, weight(l, l + 1));
  if (greedy(low).empty()) {
    for (int i = 0; i < 100 && high - low > 1e-12 * high; ++i) {
      const double mid = (low + high) / 2;
      (greedy(mid).empty() ? low : high) = mid;
    }
  } else {
    high = low;
  }
  std::vector<int> ends = greedy(high);
  // Fewer chunks than wanted: split the heaviest splittable chunk at its
  // middle layer; neither half exceeds it.
  while (static_cast<int>(ends.size()) < count) {
    int best = -1;
    double heaviest = -1;
    for (std::size_t i = 0; i < ends.size(); ++i) {
      const int begin = i == 0 ? 0 : ends[i - 1];
      if (ends[i] - begin < 2) continue;
      const double w = weight(begin, ends[i]);
      if (w > heaviest) heaviest = w, best = static_cast<int>(i);
    }
    const int begin = best == 0 ? 0 : ends[static_cast<std::size_t>(best) - 1];
    ends.insert(ends.begin() + best, begin + (ends[static_cast<std::size_t>(best)] - begin) / 2);
  }
  return ends;
}

// The most bytes device `d` of `devices` holds running `microbatches` in
// interleaved order: its chunks' state, the activations in flight, and
// the largest working memory of one layer's backward.
Bytes device_peak_bytes(const CostModel& cost, const std::vector<Stage>& stages, int devices, int chunks, int d,
                        int microbatches) {
  std::vector<Bytes> per_microbatch(static_cast<std::size_t>(chunks));
  Bytes fixed = 0, working = 0;
  for (int c = 0; c < chunks; ++c) {
    const Stage& st = stages[static_cast<std::size_t>(c * devices + d)];
    const Bytes none = cost.stage_memory_bytes(st.layer_begin, st.layer_end, st.gpus, 0, st.recompute);
    const Bytes work = cost.stage_working_bytes(st.layer_begin, st.layer_end, st.gpus, st.recompute);
    per_microbatch[static_cast<std::size_t>(c)] =
        cost.stage_memory_bytes(st.layer_begin, st.layer_end, st.gpus, 1, st.recompute) - none;
    fixed += none - work;
    working = std::max(working, work);
  }
  Bytes held = 0, most = 0;
  for (const PipelinePass& pass : interleaved_one_f_one_b(d, devices, chunks, microbatches)) {
    const Bytes b = per_microbatch[static_cast<std::size_t>(pass.chunk)];
    held += pass.forward ? b : -b;
    most = std::max(most, held);
  }
  return fixed + working + most;
}

}  // namespace

bool interleaved_fits(const CostModel& cost, const std::vector<Stage>& stages, int chunks, int microbatches) {
  const int S = static_cast<int>(stages.size());
  if (chunks < 1 || S % chunks != 0) return false;
  const int devices = S / chunks;
  const Bytes memory = cost.profile().hardware.gpu_memory_bytes;
  for (int d = 0; d < devices; ++d) {
    if (device_peak_bytes(cost, stages, devices, chunks, d, microbatches) > memory) return false;
  }
  return true;
}

}  // namespace oobleck::detail

namespace oobleck {

std::optional<PipelineTemplate> build_interleaved_template(const CostModel& cost, int nodes, int chunks) {
  using namespace detail;
  const int G = cost.gpus_per_node();
  const int M = cost.microbatches();
  std::optional<PipelineTemplate> best;
  for (int t : cost.degrees()) {
    const int span = t > G ? t / G : 1;
    if (t > G && nodes % span != 0) continue;
    const int devices = t > G ? nodes / span : nodes * G / t;
    if (devices < 2 || devices * chunks > cost.layers()) continue;
    for (Recompute r : cost.recompute_choices()) {
     // Two cuts: of least largest compute, and of least largest memory
     // (state and one microbatch's activations), for where the first does
     // not fit.
     const auto compute = [&](int b, int e) { return cost.stage_compute_ms(b, e, t, r); };
     const auto memory = [&](int b, int e) { return static_cast<double>(cost.stage_memory_bytes(b, e, t, 1, r)); };
     for (const std::vector<int>& ends : {min_max_cuts(cost.layers(), devices * chunks, compute),
                                          min_max_cuts(cost.layers(), devices * chunks, memory)}) {
      if (ends.empty()) continue;
      std::vector<Stage> stages;
      for (std::size_t j = 0; j < ends.size(); ++j) {
        const int d = static_cast<int>(j) % devices;
        const int node = t > G ? d * span : d * t / G;
        stages.push_back({j == 0 ? 0 : ends[j - 1], ends[j], t, node, r, span});
      }
      if (!interleaved_fits(cost, stages, chunks, M)) continue;
      const PlayedPipeline played = play_pipeline(cost, stages, M, nullptr, chunks);
      if (best && played.end_ms >= best->iteration_ms) continue;
      PipelineTemplate out;
      out.nodes = nodes;
      out.gpus = nodes * G;
      out.microbatches = M;
      out.interleave = chunks;
      out.iteration_ms = played.end_ms;
      // The busiest device's passes per microbatch, or the slowest link.
      double period = 0;
      std::vector<double> load(static_cast<std::size_t>(devices), 0.0);
      for (std::size_t j = 0; j < stages.size(); ++j) {
        const Stage& st = stages[j];
        load[j % static_cast<std::size_t>(devices)] += cost.stage_compute_ms(st.layer_begin, st.layer_end, t, r);
        if (j + 1 < stages.size()) period = std::max(period, cost.transfer_ms(st.layer_end, st.node == stages[j + 1].node, t));
      }
      out.bottleneck_ms = std::max(period, *std::max_element(load.begin(), load.end()));
      out.first_microbatch_ms = std::max(0.0, played.end_ms - (M - 1) * out.bottleneck_ms);
      // The most microbatches it fits with, once more than its warm-up
      // (where the activations in flight stop growing) do not fit.
      const int saturated = devices * (chunks + 2);
      if (!interleaved_fits(cost, stages, chunks, saturated)) {
        int q = M;
        while (q + 1 < saturated && interleaved_fits(cost, stages, chunks, q + 1)) ++q;
        out.max_microbatches = q;
      }
      out.stages = std::move(stages);
      best = std::move(out);
     }
    }
  }
  return best;
}

}  // namespace oobleck

namespace oobleck::detail {

void keep_faster_interleaved(const CostModel& cost, int nodes, std::optional<PipelineTemplate>& chosen) {
  double fastest = std::numeric_limits<double>::infinity();  // the plain template's, played once needed
  for (int v = 2; v <= cost.interleave(); ++v) {
    auto interleaved = build_interleaved_template(cost, nodes, v);
    if (!interleaved) continue;
    if (std::isinf(fastest) && chosen) fastest = play_pipeline(cost, chosen->stages, cost.microbatches()).end_ms;
    if (interleaved->iteration_ms < fastest * (1 - 1e-12)) {
      fastest = interleaved->iteration_ms;
      chosen = std::move(interleaved);
    }
  }
}

}  // namespace oobleck::detail
