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
// not fit; and into equal numbers of layers, Megatron's cut. The first two
// balance an embedding or a head that costs more than a block; the third
// often plays faster where the least largest chunk leaves the others
// uneven (a bubble is set by every chunk, not only the largest). For each
// (t, recomputation, cut) the layout is played (played_pipeline.h: each device
// one pass at a time in interleaved order, each link one transfer at a
// time) at the cost model's M; those within 5 % of the fastest are moved to
// a local optimum (a boundary by a layer, else two or three neighbouring
// ones together: a chunk shifted whole), and the fastest of them is the
// node count's interleaved template. It is not searched over every cut
// (against brute force: mean 0.30 % slower, worst 9.6 %); the plain
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
#include <map>
#include <tuple>

#include "interleaved_orders.h"
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

// Layers [0, L) cut into `count` chunks of equal layer counts, the first
// L mod count of them one layer longer (Megatron's cut, where the count
// divides L); empty when there are fewer layers than chunks.
std::vector<int> equal_cuts(int L, int count) {
  if (count > L) return {};
  std::vector<int> ends;
  for (int j = 0, end = 0; j < count; ++j) ends.push_back(end += L / count + (j < L % count ? 1 : 0));
  return ends;
}

// The most bytes device `d` of `devices` holds running its passes in
// interleaved order (`in_flight`: its undominated counts of chunk-
// microbatches held, interleaved_orders.h): its chunks' state, the
// activations in flight, and the largest working memory of one layer's
// backward.
Bytes device_peak_bytes(const CostModel& cost, const std::vector<Stage>& stages, int devices, int chunks, int d,
                        const std::vector<std::vector<int>>& in_flight) {
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
  Bytes most = 0;
  for (const std::vector<int>& counts : in_flight) {
    Bytes held = 0;
    for (int c = 0; c < chunks; ++c)
      held += counts[static_cast<std::size_t>(c)] * per_microbatch[static_cast<std::size_t>(c)];
    most = std::max(most, held);
  }
  return fixed + working + most;
}

// Whether the devices of virtual stages [first, last] fit (every device
// where that range covers them all).
bool devices_fit(const CostModel& cost, const std::vector<Stage>& stages, int chunks, int microbatches, int first,
                 int last) {
  const int S = static_cast<int>(stages.size());
  if (chunks < 1 || S % chunks != 0) return false;
  const int devices = S / chunks;
  const Bytes memory = cost.profile().hardware.gpu_memory_bytes;
  const InterleavedOrders& orders = interleaved_orders(devices, chunks, microbatches);
  const int checked = std::min(devices, last - first + 1);
  for (int i = 0; i < checked; ++i) {
    const int d = (first + i) % devices;
    const auto peak = device_peak_bytes(cost, stages, devices, chunks, d, orders.in_flight[static_cast<std::size_t>(d)]);
    if (peak > memory) return false;
  }
  return true;
}

}  // namespace

bool interleaved_fits(const CostModel& cost, const std::vector<Stage>& stages, int chunks, int microbatches) {
  return devices_fit(cost, stages, chunks, microbatches, 0, static_cast<int>(stages.size()) - 1);
}

namespace {

// Boundaries are moved only in layouts that start within this factor of
// the plain template's time.
constexpr double kImproveWithin = 1.10;

// An interleaved pipeline's layout: every device's degree and
// recomputation, the chunks' ends, and its time played at M.
struct Layout {
  int degree = 0;
  Recompute recompute{};
  std::vector<int> ends;
  Milliseconds played_ms = std::numeric_limits<double>::infinity();
};

// The layout's virtual stages, into `stages` (kept by callers that make
// many: a search moves boundaries thousands of times).
void write_stages(const CostModel& cost, int chunks, const Layout& layout, std::vector<Stage>& stages) {
  const int G = cost.gpus_per_node();
  const int t = layout.degree;
  const int span = t > G ? t / G : 1;
  const int devices = static_cast<int>(layout.ends.size()) / chunks;
  stages.clear();
  for (std::size_t j = 0; j < layout.ends.size(); ++j) {
    const int d = static_cast<int>(j) % devices;
    const int node = t > G ? d * span : d * t / G;
    stages.push_back({j == 0 ? 0 : layout.ends[j - 1], layout.ends[j], t, node, layout.recompute, span});
  }
}

std::vector<Stage> stages_of(const CostModel& cost, int chunks, const Layout& layout) {
  std::vector<Stage> stages;
  write_stages(cost, chunks, layout, stages);
  return stages;
}

// The busiest device's passes per microbatch: a device runs its chunks'
// passes of a microbatch one after another. (`load`: scratch, reused.)
Milliseconds busiest_device_ms(const CostModel& cost, int chunks, const Layout& layout, std::vector<double>& load) {
  load.assign(layout.ends.size() / static_cast<std::size_t>(chunks), 0.0);
  for (std::size_t j = 0; j < layout.ends.size(); ++j) {
    load[j % load.size()] +=
        cost.stage_compute_ms(j == 0 ? 0 : layout.ends[j - 1], layout.ends[j], layout.degree, layout.recompute);
  }
  return *std::max_element(load.begin(), load.end());
}

// The busiest device's passes per microbatch, or the slowest link: the
// steady increment of the played time in M. (`stages`: the layout's.)
Milliseconds bottleneck_ms(const CostModel& cost, int chunks, const Layout& layout, const std::vector<Stage>& stages) {
  thread_local std::vector<double> load;
  double period = busiest_device_ms(cost, chunks, layout, load);
  for (std::size_t j = 0; j + 1 < stages.size(); ++j) {
    const Stage& st = stages[j];
    period = std::max(period, cost.transfer_ms(st.layer_end, st.node == stages[j + 1].node, st.gpus));
  }
  return period;
}

// No play of the layout at M ends sooner, nor does a weighing (played
// at fewer microbatches plus steady increments, each at least a device's
// passes): device d starts only once the first microbatch has crossed
// virtual stages 0 .. d - 1 (forwards and transfers), then runs M times
// its chunks' passes one at a time, and its last pass, a backward, still
// has to cross those stages back. (`stages`: the layout's.)
Milliseconds played_floor_ms(const CostModel& cost, int chunks, const std::vector<Stage>& stages) {
  const int M = cost.microbatches();
  const auto devices = stages.size() / static_cast<std::size_t>(chunks);
  thread_local std::vector<double> stage_passes, device_passes;  // (kept: called for every move)
  stage_passes.assign(stages.size(), 0.0);
  device_passes.assign(devices, 0.0);
  for (std::size_t j = 0; j < stages.size(); ++j) {
    const Stage& st = stages[j];
    stage_passes[j] = cost.stage_forward_ms(st.layer_begin, st.layer_end, st.gpus) +
                      cost.stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
    device_passes[j % devices] += stage_passes[j];
  }
  Milliseconds floor = 0, crossed = 0;  // crossed: stages 0 .. d - 1 there and back
  for (std::size_t d = 0; d < devices; ++d) {
    floor = std::max(floor, crossed + M * device_passes[d]);
    if (d + 1 == devices) break;
    const Stage& st = stages[d];
    crossed += stage_passes[d] + 2 * cost.transfer_ms(st.layer_end, st.node == stages[d + 1].node, st.gpus);
  }
  return floor;
}

// The microbatches after which a device's activations in flight stop
// growing: its warm-up is at most (D - 1) 2 + (v - 1) D chunk forwards.
int saturated_microbatches(int devices, int chunks) { return devices * (chunks + 2); }

// The layout's time played at `microbatches` (at most M), plus (M -
// microbatches) steady increments (`stages`: the layout's); infinity
// where a device does not fit at M. At `microbatches` = M it is the
// played time. Only the devices of virtual stages [changed_first,
// changed_last] are checked for memory (the caller knows the others fit);
// by default all.
Milliseconds played_ms(const CostModel& cost, int chunks, const Layout& layout, const std::vector<Stage>& stages,
                       int microbatches, int changed_first = 0,
                       int changed_last = std::numeric_limits<int>::max()) {
  const int M = cost.microbatches();
  const int devices = static_cast<int>(stages.size()) / chunks;
  const int last = std::min(changed_last, static_cast<int>(stages.size()) - 1);
  if (!devices_fit(cost, stages, chunks, std::min(M, saturated_microbatches(devices, chunks)), changed_first, last)) {
    return std::numeric_limits<double>::infinity();
  }
  const Milliseconds played = played_end_ms(cost, stages, microbatches, chunks);
  return microbatches == M ? played : played + (M - microbatches) * bottleneck_ms(cost, chunks, layout, stages);
}

// Cuts are improved where they start within this factor of the fastest
// (improve_best): a cut a little slower than the first often leads to a
// faster optimum.
constexpr double kStartsWithin = 1.05;

// The three cuts over every degree and recomputation choice that gives at
// least two devices, each that fits with its played time, fastest first
// (ties in the order made); none where nothing fits. Cuts that would play
// slower than kStartsWithin times the fastest, or than `beaten_ms` (the
// fastest of other chunk counts), are left out unplayed: none of them
// could be improved nor chosen. They are played in the order of their
// floors (played_floor_ms), so that the fastest is known early.
std::vector<Layout> cut_layers(const CostModel& cost, int nodes, int chunks,
                               Milliseconds beaten_ms = std::numeric_limits<double>::infinity()) {
  const int G = cost.gpus_per_node();
  const int L = cost.layers();
  struct Candidate {
    Layout layout;
    std::vector<Stage> stages;
    Milliseconds floor_ms;
  };
  std::vector<Candidate> made;
  for (int t : cost.degrees()) {
    const int span = t > G ? t / G : 1;
    if (t > G && nodes % span != 0) continue;
    const int devices = t > G ? nodes / span : nodes * G / t;
    if (devices < 2 || devices * chunks > L) continue;
    for (Recompute r : cost.recompute_choices()) {
      const auto compute = [&](int b, int e) { return cost.stage_compute_ms(b, e, t, r); };
      const auto memory = [&](int b, int e) { return static_cast<double>(cost.stage_memory_bytes(b, e, t, 1, r)); };
      for (const std::vector<int>& ends :
           {min_max_cuts(L, devices * chunks, compute), min_max_cuts(L, devices * chunks, memory),
            equal_cuts(L, devices * chunks)}) {
        if (ends.empty()) continue;
        const bool seen = std::any_of(made.begin(), made.end(), [&](const Candidate& o) {
          return o.layout.degree == t && o.layout.recompute == r && o.layout.ends == ends;
        });
        if (seen) continue;
        Layout layout{t, r, ends};
        std::vector<Stage> stages = stages_of(cost, chunks, layout);
        const Milliseconds floor = played_floor_ms(cost, chunks, stages);
        made.push_back({std::move(layout), std::move(stages), floor});
      }
    }
  }
  std::vector<std::size_t> by_floor(made.size());
  for (std::size_t i = 0; i < made.size(); ++i) by_floor[i] = i;
  std::stable_sort(by_floor.begin(), by_floor.end(),
                   [&](std::size_t a, std::size_t b) { return made[a].floor_ms < made[b].floor_ms; });
  const int M = cost.microbatches();
  Milliseconds fastest = beaten_ms;
  for (const std::size_t i : by_floor) {
    // (a margin for rounding: the floor sums the passes in another order)
    if (made[i].floor_ms * (1 - 1e-9) > fastest * kStartsWithin) break;
    Candidate& c = made[i];
    const int devices = static_cast<int>(c.stages.size()) / chunks;
    if (!interleaved_fits(cost, c.stages, chunks, std::min(M, saturated_microbatches(devices, chunks)))) continue;
    c.layout.played_ms = played_end_ms(cost, c.stages, M, chunks);
    fastest = std::min(fastest, c.layout.played_ms);
  }
  std::vector<Layout> out;  // those played (the others' played_ms is still infinite)
  for (Candidate& c : made) {
    if (!std::isinf(c.layout.played_ms)) out.push_back(std::move(c.layout));
  }
  std::stable_sort(out.begin(), out.end(), [](const Layout& a, const Layout& b) { return a.played_ms < b.played_ms; });
  return out;
}

// Layouts already weighed, by degree, recomputation and cut: the local
// searches from several cuts often cross the same layouts.
using WeighedLayouts = std::map<std::tuple<int, int, std::vector<int>>, Milliseconds>;

// Moves chunk boundaries by a layer while that plays faster (and fits),
// until no move does: a local optimum. Moves are weighed
// played at up to 2 D microbatches plus the steady increments to M (a
// play at M would cost each move M / 2 D times as much); the result
// replaces the layout only where it plays faster at M.
void move_boundaries(const CostModel& cost, int chunks, Layout& layout, WeighedLayouts& weighed) {
  const int devices = static_cast<int>(layout.ends.size()) / chunks;
  const int weighed_at = std::min(cost.microbatches(), 2 * devices);
  // A move changes virtual stages [first, last] alone, and the layout it
  // moves fits (it was weighed finite), so only their devices are checked
  // for memory: the value is that of a full check.
  std::vector<Stage> stages;  // the layout weighed's (kept: one per move)
  const auto weigh = [&](const Layout& l, int first, int last) {
    const auto key = std::make_tuple(l.degree, static_cast<int>(l.recompute), l.ends);
    if (const auto it = weighed.find(key); it != weighed.end()) return it->second;
    return weighed[key] = played_ms(cost, chunks, l, stages, weighed_at, first, last);
  };
  // The play is skipped, with a margin for rounding, where the layout's
  // floor already reaches `time` (`stages`: the layout's).
  const auto cannot_beat = [&](Milliseconds time) {
    return played_floor_ms(cost, chunks, stages) * (1 - 1e-9) >= time;
  };
  Layout moving = layout;
  write_stages(cost, chunks, moving, stages);
  moving.played_ms = weigh(moving, 0, std::numeric_limits<int>::max());
  bool improved = false;
  // Boundaries j .. j + width - 1 moved together by a layer: one boundary,
  // or two or three (the chunks between them shifted whole); wider moves
  // are tried only once no narrower one plays faster.
  const auto try_moves = [&](std::size_t width) {
    bool moved = false;
    for (std::size_t j = 0; j + width < moving.ends.size(); ++j) {
      for (int step : {-1, 1}) {
        Layout next = moving;
        bool valid = true;
        for (std::size_t k = j; k < j + width; ++k) next.ends[k] += step;
        for (std::size_t k = j; k < j + width && valid; ++k) {
          valid = next.ends[k] > (k == 0 ? 0 : next.ends[k - 1]) && next.ends[k] < next.ends[k + 1];
        }
        if (!valid) continue;
        write_stages(cost, chunks, next, stages);
        if (cannot_beat(moving.played_ms)) continue;
        next.played_ms = weigh(next, static_cast<int>(j), static_cast<int>(j + width));
        if (next.played_ms < moving.played_ms * (1 - 1e-12)) {
          moving = std::move(next);
          moved = improved = true;
        }
      }
    }
    return moved;
  };
  while (try_moves(1) || try_moves(2) || try_moves(3)) {
  }
  if (!improved) return;
  moving.played_ms = played_ms(cost, chunks, moving, stages_of(cost, chunks, moving), cost.microbatches());
  if (moving.played_ms < layout.played_ms) layout = std::move(moving);
}

// The fastest of `cuts` (fastest first) once each that starts within
// kStartsWithin of the first is moved to its local optimum.
Layout improve_best(const CostModel& cost, int chunks, std::vector<Layout> cuts) {
  Layout best = cuts.front();
  const Milliseconds fastest = best.played_ms;  // (the first start is improved in place)
  WeighedLayouts weighed;
  for (Layout& start : cuts) {
    if (start.played_ms > fastest * kStartsWithin) break;
    move_boundaries(cost, chunks, start, weighed);
    if (start.played_ms < best.played_ms) best = std::move(start);
  }
  return best;
}

PipelineTemplate make_interleaved_template(const CostModel& cost, int nodes, int chunks, const Layout& layout) {
  const int M = cost.microbatches();
  std::vector<Stage> stages = stages_of(cost, chunks, layout);
  const int devices = static_cast<int>(stages.size()) / chunks;
  PipelineTemplate out;
  out.nodes = nodes;
  out.gpus = nodes * cost.gpus_per_node();
  out.microbatches = M;
  out.interleave = chunks;
  out.iteration_ms = layout.played_ms;
  out.bottleneck_ms = bottleneck_ms(cost, chunks, layout, stages);
  out.first_microbatch_ms = std::max(0.0, layout.played_ms - (M - 1) * out.bottleneck_ms);
  // The most microbatches it fits with, once more than its warm-up (where
  // the activations in flight stop growing) do not fit.
  const int saturated = saturated_microbatches(devices, chunks);
  if (!interleaved_fits(cost, stages, chunks, saturated)) {
    int q = M;
    while (q + 1 < saturated && interleaved_fits(cost, stages, chunks, q + 1)) ++q;
    out.max_microbatches = q;
  }
  out.stages = std::move(stages);
  return out;
}

}  // namespace

void keep_faster_interleaved(const CostModel& cost, int nodes, std::optional<PipelineTemplate>& chosen) {
  // The cuts of the v whose fastest cut is fastest; they are then improved
  // (improve_best), unless the fastest starts far behind the plain template
  // (moving boundaries gains a few per cent, and each move costs a play).
  std::vector<Layout> best;
  int best_chunks = 0;
  for (int v = 2; v <= cost.interleave(); ++v) {
    std::vector<Layout> cuts =
        cut_layers(cost, nodes, v, best.empty() ? std::numeric_limits<double>::infinity() : best.front().played_ms);
    if (!cuts.empty() && (best.empty() || cuts.front().played_ms < best.front().played_ms)) {
      best = std::move(cuts), best_chunks = v;
    }
  }
  if (best.empty()) return;
  const Milliseconds plain_ms = chosen ? played_end_ms(cost, chosen->stages, cost.microbatches())
                                       : std::numeric_limits<double>::infinity();
  Layout layout = best.front();
  if (layout.played_ms < plain_ms * kImproveWithin) layout = improve_best(cost, best_chunks, std::move(best));
  if (layout.played_ms < plain_ms * (1 - 1e-12)) chosen = make_interleaved_template(cost, nodes, best_chunks, layout);
}

}  // namespace oobleck::detail

namespace oobleck {

std::optional<PipelineTemplate> build_interleaved_template(const CostModel& cost, int nodes, int chunks) {
  std::vector<detail::Layout> cuts = detail::cut_layers(cost, nodes, chunks);
  if (cuts.empty()) return std::nullopt;
  return detail::make_interleaved_template(cost, nodes, chunks, detail::improve_best(cost, chunks, std::move(cuts)));
}

}  // namespace oobleck
