// Pipeline-template search, exact for the suffixes' period.
//
// For n nodes of G GPUs, a template is a sequence of stages (contiguous layer
// ranges, each on a tensor-parallel degree t that divides G, or where the
// cost model allows it a multiple k G: k whole nodes) laid out over the
// nodes in order: a node holds consecutive stages whose degrees add up to G,
// or is one of the k nodes of one stage.
// It minimises T(M) = sigma + (M-1) mu, where sigma = sum of stage compute plus
// twice the transfers and mu = 1F1B's steady period (steady_period.h) as
// bounded by the suffixes: the largest of every stage's compute, every
// transfer (one way) and, for every stage s of S, the round trip
// R_s / (S - s), R_s being the sigma of the suffix of stages s..S-1.
// Every layout the walk below visits is priced with 1F1B's full period
// (every run of stages, not only the suffixes), and the fastest so priced
// is kept, then moved while a single move prices it faster (a boundary by a
// layer, or two neighbours' degrees exchanged: layout_moves.h): it is the
// fastest of all layouts wherever its
// price equals the least T(M) over the suffixes, a lower bound on every
// layout's price.
//
// The max terms do not decompose, so the search is parametric in a bound K
// on mu: a dynamic programme finds, for every n at once, the least sigma
// with every stage, every transfer and every suffix's R / (its stage count)
// strictly under K. The suffix condition is one on the programme's own
// value: the least sigma of a state of m stages must be under K m, or no
// suffix through that state meets it. Lowering K below the mu of each
// answer walks the Pareto front of (sigma, mu) from the top.
// Templates not yet seen have sigma >= the last answer's, so the walk for n
// jumps to K = (best T - sigma) / (M-1) and stops once sigma + (M-1) * (a lower
// bound on mu) cannot beat the best. Any bound from that jump up to just
// below the answer's mu finds the same useful points (the front's points in
// between cannot beat the best), so a solve at the highest bound open
// serves every walk whose range holds it: walks in step share solves. It
// sweeps the rows of the largest node count whose walk asked for that very
// bound, a tenth more, and serves the walks up to there (sweeping every row
// for walks that only happen to be in range costs more than their own
// solves later). A
// balanced layout (min-max split with equal degrees, or with the fewest
// stages over several nodes where no one degree fills them) seeds the best
// T, so that on fronts where sigma is flat (uniform layers) the walk starts
// near its bottom instead of stepping down through every tie.
//
// A stage is one of the cost model's variants: a degree t, and whether it
// recomputes its activations, selectively or fully (when the cost model's
// policy lets it choose, each variant is a stage kind of its own, with its
// compute and memory).
//
// The dynamic programme runs over suffixes of the layers: state (m, U, l) is
// "layers [l, L) on the last U GPUs in m stages". m matters through memory
// (the first stage of the suffix keeps min(M, m) microbatches in flight)
// and through the round trip (R / m). A suffix of m stages uses at most
// m times the largest degree's GPUs, which bounds the rows of each m. A
// stage over k nodes starts where a node does (U a multiple of G). For
// fixed (m, U, t) the best
// successor boundary e of a
// stage starting at l is a sliding-window minimum over e in
// [l+1, hi(l)], with hi non-decreasing in l, so every state costs O(1).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "oobleck/planner.h"
#include "interleaved.h"
#include "layout_moves.h"
#include "period_floor.h"
#include "template_walk.h"

namespace oobleck {
namespace {

using detail::seeded_walks;
using detail::step_down;
using detail::Walk;

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kMaxCells = 2.5e8;  // 2 GiB of doubles

class TemplateSearch {
 public:
  TemplateSearch(const CostModel& cost, int max_nodes)
      : layers_(cost.layers()), gpus_(cost.gpus_per_node()), max_gpus_(max_nodes * cost.gpus_per_node()) {
    for (int t : cost.degrees()) {
      for (Recompute r : cost.recompute_choices()) variants_.push_back({t, r});
    }
    const int widest = std::max(gpus_, cost.degrees().back());
    widest_ = widest;
    const std::size_t degree_count = variants_.size();
    prefix_.assign(degree_count, std::vector<double>(layers_ + 1, 0.0));
    for (std::size_t d = 0; d < degree_count; ++d) {
      for (int l = 1; l <= layers_; ++l) prefix_[d][l] = cost.stage_compute_ms(0, l, degree(d), recompute(d));
    }
    // Across nodes a boundary's transfers go over the cards of the stage
    // before it, so they depend on that stage's degree.
    transfer_same_.assign(layers_ + 1, 0.0);
    transfer_cross_.assign(degree_count, std::vector<double>(layers_ + 1, 0.0));
    for (int e = 1; e < layers_; ++e) {
      transfer_same_[e] = 2 * cost.transfer_ms(e, true);
      for (std::size_t d = 0; d < degree_count; ++d) transfer_cross_[d][e] = 2 * cost.transfer_ms(e, false, degree(d));
    }
    // Stage counts are exact (the round-trip bound divides a suffix's sum by
    // its count); a suffix of m stages starts with min(M, m) in flight.
    max_stages_ = std::min(layers_, max_gpus_);
    // hi_memory_: per (degree, m, l), the last boundary e such that [l, e)
    // fits with min(M, m) in flight.
    hi_memory_.assign(degree_count * (max_stages_ + 1) * (layers_ + 1), 0);
    for (std::size_t d = 0; d < degree_count; ++d) {
      for (int m = 1; m <= max_stages_; ++m) {
        const int in_flight = std::min(m, cost.microbatches());
        if (m > 1 && in_flight < m) {  // as for m - 1
          for (int l = 0; l < layers_; ++l) hi_memory_[window_index(d, m, l)] = hi_memory_[window_index(d, m - 1, l)];
          continue;
        }
        int e = 0;
        for (int l = 0; l < layers_; ++l) {
          e = std::max(e, l);
          while (e + 1 <= layers_ && cost.stage_max_in_flight(l, e + 1, degree(d), recompute(d)) >= in_flight) ++e;
          hi_memory_[window_index(d, m, l)] = e;  // e == l: not even one layer fits
        }
      }
    }
    hi_.assign(hi_memory_.size(), 0);
    // Value rows: for each m, U in [u_lo, u_hi], each with layers_+1 entries.
    row_base_.assign(max_stages_ + 1, 0);
    u_lo_.assign(max_stages_ + 1, 0);
    u_hi_.assign(max_stages_ + 1, -1);
    std::size_t rows = 0;
    for (int m = 1; m <= max_stages_; ++m) {
      u_lo_[m] = m;
      u_hi_[m] = std::min(widest * m, max_gpus_);  // m stages hold at most m of the widest
      row_base_[m] = rows;
      if (u_hi_[m] >= u_lo_[m]) rows += static_cast<std::size_t>(u_hi_[m] - u_lo_[m] + 1);
    }
    // The exact search needs a table of (stage counts x GPUs x layers).
    const double cells = static_cast<double>(rows) * (layers_ + 1);
    if (cells > kMaxCells) {
      throw InputError("exact template search for " + std::to_string(layers_) + " layers on up to " +
                       std::to_string(max_nodes) + " nodes of " + std::to_string(gpus_) + " GPUs needs " +
                       std::to_string(static_cast<long long>(cells * 8 / (1 << 20))) +
                       " MiB; lower --max-nodes or profile coarser layers");
    }
    value_.assign(rows * (layers_ + 1), kInfinity);
    alive_lo_.assign(rows, layers_ + 1);
    alive_hi_.assign(rows, -1);
    through_.assign(layers_ + 1, kInfinity);
    window_.assign(layers_ + 2, 0);
  }

  // Least sigma for every state whose steady period is strictly below
  // `bound` (every stage's compute, every transfer one way, and every
  // suffix's sum over its stage count), on at most `gpu_limit` GPUs.
  void solve(double bound, int gpu_limit) {
    gpu_limit_ = std::min(gpu_limit, max_gpus_);
    bound_ = bound;
    // Only the layers each row made finite last time need clearing.
    for (std::size_t r = 0; r < alive_lo_.size(); ++r) {
      if (alive_lo_[r] <= alive_hi_[r]) {
        double* row_values = value_.data() + r * static_cast<std::size_t>(layers_ + 1);
        std::fill(row_values + alive_lo_[r], row_values + alive_hi_[r] + 1, kInfinity);
      }
      alive_lo_[r] = layers_ + 1;
      alive_hi_[r] = -1;
    }
    for (std::size_t d = 0; d < variants_.size(); ++d) {
      int e = 0;
      const double* prefix = prefix_[d].data();
      for (int l = 0; l < layers_; ++l) {
        e = std::max(e, l);
        while (e + 1 <= layers_ && prefix[e + 1] - prefix[l] < bound) ++e;
        for (int m = 1; m <= max_stages_; ++m) {
          const std::size_t i = window_index(d, m, l);
          hi_[i] = std::min({e, hi_memory_[i], last_boundary(m)});
        }
      }
    }
    // Rows of m stages depend on rows of m - 1 alone, and only on those
    // that hold some finite value: a row of m stages on u GPUs can be live
    // only if u lies a degree above a live row of m - 1 (or, for m = 1, u
    // is a degree).
    int live_lo = 0, live_hi = 0;  // the live rows of m - 1: GPU counts [lo, hi]
    for (int m = 1; m <= max_stages_; ++m) {
      const int lo = std::max(u_lo_[m], m == 1 ? 1 : live_lo + 1);
      const int hi = std::min({u_hi_[m], gpu_limit_, m == 1 ? widest_ : live_hi + widest_});
      int next_lo = gpu_limit_ + 1, next_hi = 0;
      for (int u = lo; u <= hi; ++u) {
        for (std::size_t d = 0; d < variants_.size(); ++d) {
          if (fits_in_node(u, degree(d))) sweep(m, u, d);
        }
        const auto r = row_index(m, u);
        if (alive_lo_[r] <= alive_hi_[r]) {
          next_lo = std::min(next_lo, u);
          next_hi = u;
        }
      }
      if (next_hi == 0) break;  // no row of m stages lives, so none of more
      live_lo = next_lo;
      live_hi = next_hi;
    }
  }

  // The best solution of the last solve() for `nodes` nodes: its sigma and stages.
  [[nodiscard]] std::optional<std::pair<double, std::vector<Stage>>> best(int nodes) const {
    return best_on_gpus(nodes * gpus_);
  }

  // The same on `u` GPUs: whole nodes, or fewer than one node's.
  [[nodiscard]] std::optional<std::pair<double, std::vector<Stage>>> best_on_gpus(int u) const {
    const int nodes = (u + gpus_ - 1) / gpus_;
    if (u > gpu_limit_) return std::nullopt;
    int best_m = 0;
    double best_value = kInfinity;
    for (int m = 1; m <= max_stages_; ++m) {
      const double* r = row(m, u);
      if (r && r[0] < best_value) {
        best_value = r[0];
        best_m = m;
      }
    }
    if (best_m == 0) return std::nullopt;
    return std::make_pair(best_value, reconstruct(best_m, u, nodes));
  }

  // States (m, U, l) swept by all solves so far.
  [[nodiscard]] std::int64_t states() const { return states_; }

 private:
  [[nodiscard]] std::size_t window_index(std::size_t d, int m, int l) const {
    return (d * static_cast<std::size_t>(max_stages_ + 1) + static_cast<std::size_t>(m)) *
               static_cast<std::size_t>(layers_ + 1) +
           static_cast<std::size_t>(l);
  }
  // A stage on the GPUs (u - t, u] from the end: inside one node, or on
  // whole nodes.
  [[nodiscard]] bool fits_in_node(int u, int t) const {
    if (t <= gpus_) return (u - 1) / gpus_ == (u - t) / gpus_;
    return t % gpus_ == 0 && u % gpus_ == 0 && u >= t;
  }
  [[nodiscard]] std::ptrdiff_t row_index(int m, int u) const {
    if (m < 1 || m > max_stages_ || u < u_lo_[m] || u > u_hi_[m]) return -1;
    return static_cast<std::ptrdiff_t>(row_base_[m] + static_cast<std::size_t>(u - u_lo_[m]));
  }
  [[nodiscard]] const double* row(int m, int u) const {
    const auto i = row_index(m, u);
    return i < 0 ? nullptr : value_.data() + static_cast<std::size_t>(i) * (layers_ + 1);
  }
  // A successor row only if it holds some finite value; widens [lo, hi] to
  // the layers where it does.
  [[nodiscard]] const double* live_row(int m, int u, int& lo, int& hi) const {
    const auto i = row_index(m, u);
    if (i < 0 || alive_lo_[i] > alive_hi_[i]) return nullptr;
    lo = std::min(lo, alive_lo_[i]);
    hi = std::max(hi, alive_hi_[i]);
    return value_.data() + static_cast<std::size_t>(i) * (layers_ + 1);
  }
  [[nodiscard]] int last_boundary(int m) const { return layers_ - (m - 1); }  // successor needs m-1 layers
  [[nodiscard]] bool terminal_allowed(int m, int u, int t) const { return u == t && m == 1; }
  // 2 C after a stage of variant d whose successor ends on GPU u_next.
  [[nodiscard]] const double* transfers(int u_next, std::size_t d) const {
    return (u_next % gpus_ != 0) ? transfer_same_.data() : transfer_cross_[d].data();
  }

  void sweep(int m, int u, std::size_t d) {
    const int t = degree(d);
    const int u_next = u - t;
    const int l_max = layers_ - m;  // the suffix needs m layers
    if (l_max < 0) return;
    states_ += l_max + 1;
    const auto out_index = row_index(m, u);
    double* out = value_.data() + static_cast<std::size_t>(out_index) * (layers_ + 1);
    const double* prefix = prefix_[d].data();
    const int* hi = hi_.data() + window_index(d, m, 0);
    int out_lo = alive_lo_[out_index], out_hi = alive_hi_[out_index];
    const double round_trip_limit = bound_ * m;  // the suffix's sum over m stages below the bound
    auto improve = [&](int l, double v) {
      if (v < out[l] && v < round_trip_limit) {
        out[l] = v;
        out_lo = std::min(out_lo, l);
        out_hi = std::max(out_hi, l);
      }
    };
    if (terminal_allowed(m, u, t)) {
      for (int l = 0; l <= l_max; ++l) {
        if (hi[l] >= layers_) improve(l, prefix[layers_] - prefix[l]);
      }
    }
    int succ_lo = layers_ + 1, succ_hi = -1;
    // Exactly m-1 stages follow.
    const double* rest = (u_next >= 1) ? live_row(m - 1, u_next, succ_lo, succ_hi) : nullptr;
    if (rest) {
      // Sliding-window minimum of through(e) over e in [l+1, hi[l]], l
      // descending: candidates enter at the front (smallest e), expired ones
      // leave at the back; values decrease from front to back. Successors
      // exist only for e in [succ_lo, succ_hi].
      const double* transfer = transfers(u_next, d);
      double* through = through_.data();
      int* window = window_.data();
      int head = layers_ + 1, tail = layers_ + 1;  // window[head, tail)
      const int last = std::min(last_boundary(m), succ_hi);
      for (int l = std::min(l_max, last - 1); l >= 0; --l) {
        const int e = l + 1;
        if (e >= succ_lo && transfer[e] < 2 * bound_) {
          const double r = rest[e];
          if (r < kInfinity) {
            through[e] = prefix[e] + transfer[e] + r;
            while (head < tail && through[window[head]] >= through[e]) ++head;
            window[--head] = e;
          }
        }
        while (head < tail && window[tail - 1] > hi[l]) --tail;
        if (head < tail) {
          improve(l, through[window[tail - 1]] - prefix[l]);
        } else if (l < succ_lo) {
          break;  // no candidate left, none to come
        }
      }
    }
    alive_lo_[out_index] = out_lo;
    alive_hi_[out_index] = out_hi;
  }

  [[nodiscard]] std::vector<Stage> reconstruct(int m, int u, int nodes) const {
    std::vector<Stage> stages;
    int l = 0;
    while (true) {
      const double target = row(m, u)[l];
      bool found = false;
      for (std::size_t d = 0; d < variants_.size() && !found; ++d) {
        const int t = degree(d);
        if (!fits_in_node(u, t)) continue;
        const int node = nodes - 1 - (u - 1) / gpus_;
        const double* prefix = prefix_[d].data();
        const int hi = hi_[window_index(d, m, l)];
        if (terminal_allowed(m, u, t) && hi >= layers_ && prefix[layers_] - prefix[l] == target) {
          stages.push_back({l, layers_, t, node, recompute(d), span(t)});
          return stages;
        }
        const int u_next = u - t;
        if (u_next < 1) continue;
        int lo = layers_ + 1, hi_alive = -1;
        const double* rest = live_row(m - 1, u_next, lo, hi_alive);
        if (!rest) continue;
        const double* transfer = transfers(u_next, d);
        for (int e = l + 1; e <= hi; ++e) {
          if (!(transfer[e] < 2 * bound_)) continue;
          const double r = rest[e];
          if (r == kInfinity || (prefix[e] + transfer[e] + r) - prefix[l] != target) continue;
          stages.push_back({l, e, t, node, recompute(d), span(t)});
          --m;
          u = u_next;
          l = e;
          found = true;
          break;
        }
      }
      assert(found && "template reconstruction lost its path");
      if (!found) return {};
    }
  }

  // The stage kinds: a tensor-parallel degree and a recomputation choice.
  struct Variant {
    int degree;
    Recompute recompute;
  };
  [[nodiscard]] int degree(std::size_t d) const { return variants_[d].degree; }
  [[nodiscard]] int span(int t) const { return t > gpus_ ? t / gpus_ : 1; }
  [[nodiscard]] Recompute recompute(std::size_t d) const { return variants_[d].recompute; }

  int layers_;
  int gpus_;
  std::vector<Variant> variants_;
  int max_gpus_;
  int max_stages_ = 1;
  int widest_ = 1;  // the largest degree
  int gpu_limit_ = 0;
  double bound_ = kInfinity;  // the last solve's bound on the steady period
  std::vector<std::vector<double>> prefix_;             // compute prefix sums per variant
  std::vector<double> transfer_same_;               // 2 C at each boundary inside a node
  std::vector<std::vector<double>> transfer_cross_;  // per variant: 2 C at each boundary between nodes
  std::vector<int> hi_memory_;                          // memory limit on the window end
  std::vector<int> hi_;                                 // this solve's window end per (d, m, l)
  std::vector<std::size_t> row_base_;
  std::vector<int> u_lo_, u_hi_;
  std::vector<double> value_;
  std::vector<int> alive_lo_, alive_hi_;  // per row: the layers with finite values
  std::vector<double> through_;
  std::vector<int> window_;
  std::int64_t states_ = 0;
};

PipelineTemplate make_template(const CostModel& cost, int nodes, std::vector<Stage> stages) {
  PipelineTemplate out;
  out.nodes = nodes;
  out.gpus = 0;
  for (const Stage& stage : stages) out.gpus += stage.gpus;
  out.microbatches = cost.microbatches();
  out.first_microbatch_ms = cost.first_microbatch_ms(stages);
  out.bottleneck_ms = cost.bottleneck_ms(stages);
  out.iteration_ms = out.iteration_ms_for(out.microbatches);
  // Past S microbatches, 1F1B keeps no more in flight; below, memory may cap them.
  const int count = static_cast<int>(stages.size());
  int cap = 0;
  for (int s = 0; s < count; ++s) {
    const int limit =
        cost.stage_max_in_flight(stages[s].layer_begin, stages[s].layer_end, stages[s].gpus, stages[s].recompute);
    if (limit < count - s) cap = (cap == 0) ? limit : std::min(cap, limit);
  }
  out.max_microbatches = cap;
  out.stages = std::move(stages);
  return out;
}

}  // namespace

const PipelineTemplate* TemplateSet::find(int nodes) const {
  auto it = std::lower_bound(templates.begin(), templates.end(), nodes,
                             [](const PipelineTemplate& t, int n) { return t.nodes < n; });
  return (it != templates.end() && it->nodes == nodes) ? &*it : nullptr;
}

TemplateSet build_templates(const CostModel& cost, int max_nodes, const Progress& progress) {
  if (max_nodes < 1) throw InputError("max-nodes: expected at least 1, got " + std::to_string(max_nodes));
  TemplateSet set;
  set.microbatches = cost.microbatches();
  set.max_nodes = max_nodes;
  // Every stage holds at least one layer on at most tensor_parallel_nodes() nodes.
  const int searched = static_cast<int>(
      std::min<std::int64_t>(max_nodes, std::int64_t{cost.layers()} * cost.tensor_parallel_nodes()));
  const int gpus = cost.gpus_per_node();
  TemplateSearch search(cost, searched);  // (first: it refuses tables too large)
  detail::PeriodFloor mu_floors(cost);
  std::vector<Walk> walk = seeded_walks(cost, searched);
  int runs = 0;
  // Each solve is at the highest bound still open, over the rows of the
  // largest node count whose walk is at it (and a tenth more), and serves
  // every walk up to there whose range of bounds holds it.
  const auto serves = [](const Walk& w, double bound) {
    return w.active && w.bound <= bound && bound <= w.highest_bound;
  };
  while (true) {
    double bound = -1;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound > bound) bound = walk[n].bound;
    }
    if (bound < 0) break;
    int gpu_limit = 0;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound == bound) gpu_limit = n * gpus;
    }
    // A tenth more rows serve the walks in range just above: their rows
    // cost little beside the solves they would need on their own.
    const int extended = gpu_limit + gpu_limit / 10;
    for (int n = 1; n <= searched && n * gpus <= extended; ++n) {
      if (serves(walk[n], bound)) gpu_limit = std::max(gpu_limit, n * gpus);
    }
    search.solve(bound, gpu_limit);
    ++runs;
    int still_active = 0;
    for (int n = 1; n <= searched; ++n) {
      Walk& w = walk[n];
      if (!serves(w, bound) || n * gpus > gpu_limit) {
        still_active += w.active;
        continue;
      }
      w.bound = bound;
      still_active += step_down(w, search.best(n), cost, mu_floors.at(n));
    }
    if (progress) {
      std::ostringstream line;
      line << "templates: search " << runs << " (period bound " << bound << " ms), " << still_active
           << " node counts still open";
      progress(line.str());
    }
  }
  for (int n = 1; n <= searched; ++n) {
    std::optional<PipelineTemplate> chosen;
    if (!walk[n].stages.empty()) {
      detail::move_to_local_optimum(cost, walk[n].stages);
      chosen = make_template(cost, n, std::move(walk[n].stages));
    }
    if (cost.interleave() > 1) detail::keep_faster_interleaved(cost, n, chosen);
    if (chosen) set.templates.push_back(std::move(*chosen));
  }
  set.search_solves = runs;
  set.search_states = search.states();
  return set;
}

std::optional<PipelineTemplate> build_shared_node_template(const CostModel& cost, int gpus) {
  const int per_node = cost.gpus_per_node();
  if (gpus < 1 || gpus >= per_node) {
    throw InputError("shared-node template: expected 1 to " + std::to_string(per_node - 1) + " GPUs, got " +
                     std::to_string(gpus));
  }
  // The same walk down the Pareto front as a node count's, on the rows of
  // `gpus` GPUs (the programme's suffix states on part of a node).
  TemplateSearch search(cost, 1);
  detail::PeriodFloor mu_floors(cost);
  Walk walk;
  while (walk.active) {
    search.solve(walk.bound, gpus);
    step_down(walk, search.best_on_gpus(gpus), cost, mu_floors.on_gpus(gpus));
  }
  if (walk.stages.empty()) return std::nullopt;
  detail::move_to_local_optimum(cost, walk.stages);
  return make_template(cost, 1, std::move(walk.stages));
}

}  // namespace oobleck
