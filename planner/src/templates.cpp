// Exact pipeline-template search.
//
// For n nodes of G GPUs, a template is a sequence of stages (contiguous layer
// ranges, each on a tensor-parallel degree t that divides G) laid out over the
// nodes in order: a node holds consecutive stages whose degrees add up to G.
// It minimises T(M) = sigma + (M-1) mu, where sigma = sum of stage compute plus
// twice the transfers and mu = the slowest stage's compute.
//
// The max term does not decompose, so the search is parametric in a bound K
// on the stage compute: a dynamic programme finds, for every n at once, the
// least sigma with every stage strictly under K. Lowering K to the slowest
// stage of the answer walks the Pareto front of (sigma, mu) from the top; the
// walk for n stops once sigma_K + (M-1) * (a lower bound on mu) cannot beat
// the best T found, and K jumps straight below (best - sigma_min) / (M-1).
//
// The dynamic programme runs over suffixes of the layers: state (m, U, l) is
// "layers [l, L) on the last U GPUs in m stages". m matters only through
// memory (stage s keeps min(M, S-s+1) microbatches, i.e. min(M, m) for the
// first stage of the suffix), so m is capped where memory stops telling
// stage counts apart. For fixed (m, U, t) the best successor boundary e of a
// stage starting at l is a sliding-window minimum over e in
// [l+1, hi(l)], with hi non-decreasing in l, so every state costs O(1).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <sstream>

#include "oobleck/planner.h"

namespace oobleck {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

class TemplateSearch {
 public:
  TemplateSearch(const CostModel& cost, int max_nodes)
      : cost_(cost),
        layers_(cost.layers()),
        gpus_(cost.gpus_per_node()),
        degrees_(cost.degrees()),
        max_gpus_(max_nodes * cost.gpus_per_node()) {
    prefix_.assign(degrees_.size(), std::vector<double>(layers_ + 1, 0.0));
    for (std::size_t d = 0; d < degrees_.size(); ++d) {
      for (int l = 1; l <= layers_; ++l) prefix_[d][l] = cost.stage_compute_ms(0, l, degrees_[d]);
    }
    transfer_same_.assign(layers_ + 1, 0.0);
    transfer_cross_.assign(layers_ + 1, 0.0);
    for (int e = 1; e < layers_; ++e) {
      transfer_same_[e] = 2 * cost.transfer_ms(e, true);
      transfer_cross_[e] = 2 * cost.transfer_ms(e, false);
    }
    const int max_stages = std::min(layers_, max_gpus_);
    const int full_cap = std::min(cost.microbatches(), max_stages);
    // Memory tells stage counts apart only up to the largest in-flight limit
    // that some stage has below full_cap.
    int relevant = 0;
    fit_.assign(degrees_.size(), std::vector<std::vector<int>>(layers_ + 1));
    for (std::size_t d = 0; d < degrees_.size(); ++d) {
      for (int l = 0; l < layers_; ++l) {
        fit_[d][l].assign(layers_ + 1, 0);
        for (int e = l + 1; e <= layers_; ++e) {
          const int limit = cost.stage_max_in_flight(l, e, degrees_[d]);
          fit_[d][l][e] = limit;
          if (limit < full_cap) relevant = std::max(relevant, limit);
        }
      }
    }
    cap_ = std::min(full_cap, relevant + 1);
    // hi_memory_[d][k][l]: the last boundary e such that [l, e) fits with k in flight.
    hi_memory_.assign(degrees_.size(), std::vector<std::vector<int>>(cap_ + 1, std::vector<int>(layers_ + 1, 0)));
    for (std::size_t d = 0; d < degrees_.size(); ++d) {
      for (int k = 1; k <= cap_; ++k) {
        auto& hi = hi_memory_[d][k];
        int e = 0;
        for (int l = 0; l < layers_; ++l) {
          e = std::max(e, l);
          while (e + 1 <= layers_ && fit_[d][l][e + 1] >= k) ++e;
          hi[l] = e;  // e == l: not even one layer fits
        }
      }
    }
    // Value table layout: for each m, a block of U in [u_lo, u_hi], each with layers_+1 entries.
    base_.assign(cap_ + 1, 0);
    u_lo_.assign(cap_ + 1, 0);
    u_hi_.assign(cap_ + 1, 0);
    std::size_t offset = 0;
    for (int m = 1; m <= cap_; ++m) {
      u_lo_[m] = m;
      u_hi_[m] = (m < cap_) ? std::min(gpus_ * m, max_gpus_) : max_gpus_;
      base_[m] = offset;
      if (u_hi_[m] >= u_lo_[m]) offset += static_cast<std::size_t>(u_hi_[m] - u_lo_[m] + 1) * (layers_ + 1);
    }
    value_.assign(offset, kInfinity);
    hi_bound_.assign(degrees_.size(), std::vector<int>(layers_ + 1, 0));
  }

  [[nodiscard]] int memory_cap() const { return cap_; }

  // Least sigma for every state with every stage's compute strictly below
  // `bound`, on at most `gpu_limit` GPUs.
  void solve(double bound, int gpu_limit) {
    bound_ = bound;
    gpu_limit_ = std::min(gpu_limit, max_gpus_);
    std::fill(value_.begin(), value_.end(), kInfinity);
    for (std::size_t d = 0; d < degrees_.size(); ++d) {
      int e = 0;
      for (int l = 0; l < layers_; ++l) {
        e = std::max(e, l);
        while (e + 1 <= layers_ && prefix_[d][e + 1] - prefix_[d][l] < bound) ++e;
        hi_bound_[d][l] = e;
      }
    }
    std::deque<int> window;
    for (int u = 1; u <= gpu_limit_; ++u) {
      for (int m = 1; m <= cap_; ++m) {
        if (u < u_lo_[m] || u > u_hi_[m]) continue;
        for (std::size_t d = 0; d < degrees_.size(); ++d) {
          const int t = degrees_[d];
          if (!fits_in_node(u, t)) continue;
          sweep(m, u, d, window);
        }
      }
    }
  }

  // The best solution of the last solve() for `nodes` nodes: its sigma and stages.
  [[nodiscard]] std::optional<std::pair<double, std::vector<Stage>>> best(int nodes) const {
    const int u = nodes * gpus_;
    if (u > gpu_limit_) return std::nullopt;
    int best_m = 0;
    double best_value = kInfinity;
    for (int m = 1; m <= cap_; ++m) {
      if (u < u_lo_[m] || u > u_hi_[m]) continue;
      const double v = at(m, u, 0);
      if (v < best_value) {
        best_value = v;
        best_m = m;
      }
    }
    if (best_m == 0) return std::nullopt;
    return std::make_pair(best_value, reconstruct(best_m, u, nodes));
  }

 private:
  [[nodiscard]] bool fits_in_node(int u, int t) const { return (u - 1) / gpus_ == (u - t) / gpus_; }

  [[nodiscard]] double at(int m, int u, int l) const {
    return value_[base_[m] + static_cast<std::size_t>(u - u_lo_[m]) * (layers_ + 1) + l];
  }
  double& at(int m, int u, int l) {
    return value_[base_[m] + static_cast<std::size_t>(u - u_lo_[m]) * (layers_ + 1) + l];
  }
  [[nodiscard]] double successor(int m, int u, int e) const {
    // Exactly m-1 stages follow, or (for the capped count) at least cap_.
    double best = (m - 1 >= 1 && u >= u_lo_[m - 1] && u <= u_hi_[m - 1]) ? at(m - 1, u, e) : kInfinity;
    if (m == cap_ && u >= u_lo_[cap_] && u <= u_hi_[cap_]) best = std::min(best, at(cap_, u, e));
    return best;
  }
  [[nodiscard]] int first_layer_limit(int m) const { return layers_ - m; }  // the suffix needs m layers
  [[nodiscard]] int last_boundary(int m) const { return layers_ - (m - 1); }  // successor needs m-1 layers
  [[nodiscard]] int window_end(std::size_t d, int m, int l) const {
    return std::min({hi_bound_[d][l], hi_memory_[d][m][l], last_boundary(m)});
  }
  // sigma of the suffix [e, L) reached from a stage of degree index d ending at e.
  [[nodiscard]] double through(std::size_t d, int m, int u_next, int e) const {
    const double rest = successor(m, u_next, e);
    if (rest == kInfinity) return kInfinity;
    const bool same_node = u_next % gpus_ != 0;
    return prefix_[d][e] + (same_node ? transfer_same_[e] : transfer_cross_[e]) + rest;
  }
  [[nodiscard]] double prefix(std::size_t d, int l) const { return prefix_[d][l]; }
  [[nodiscard]] bool terminal_allowed(int m, int u, int t) const { return u == t && (m == 1 || (m == cap_ && cap_ == 1)); }
  [[nodiscard]] double terminal(std::size_t d, int m, int l) const {
    if (hi_memory_[d][m][l] < layers_ || hi_bound_[d][l] < layers_) return kInfinity;
    return prefix_[d][layers_] - prefix_[d][l];
  }

  void sweep(int m, int u, std::size_t d, std::deque<int>& window) {
    const int t = degrees_[d];
    const int u_next = u - t;
    const int l_max = first_layer_limit(m);
    if (l_max < 0) return;
    if (terminal_allowed(m, u, t)) {
      for (int l = 0; l <= l_max; ++l) at(m, u, l) = std::min(at(m, u, l), terminal(d, m, l));
    }
    if (u_next < 1) return;
    // Sliding-window minimum of through(e) over e in [l+1, window_end(l)],
    // l descending: new candidates enter at the front (smallest e), expired
    // ones leave at the back; values decrease from front to back.
    window.clear();
    std::vector<double>& g = scratch_;
    g.assign(layers_ + 1, kInfinity);
    for (int l = l_max; l >= 0; --l) {
      const int e_new = l + 1;
      if (e_new <= last_boundary(m)) {
        g[e_new] = through(d, m, u_next, e_new);
        if (g[e_new] < kInfinity) {
          while (!window.empty() && g[window.front()] >= g[e_new]) window.pop_front();
          window.push_front(e_new);
        }
      }
      const int hi = window_end(d, m, l);
      while (!window.empty() && window.back() > hi) window.pop_back();
      if (!window.empty()) {
        const double v = g[window.back()] - prefix(d, l);
        if (v < at(m, u, l)) at(m, u, l) = v;
      }
    }
  }

  [[nodiscard]] std::vector<Stage> reconstruct(int m, int u, int nodes) const {
    std::vector<Stage> stages;
    int l = 0;
    while (true) {
      const double target = at(m, u, l);
      bool found = false;
      for (std::size_t d = 0; d < degrees_.size() && !found; ++d) {
        const int t = degrees_[d];
        if (!fits_in_node(u, t)) continue;
        const int node = nodes - 1 - (u - 1) / gpus_;
        if (terminal_allowed(m, u, t) && terminal(d, m, l) == target) {
          stages.push_back({l, layers_, t, node});
          return stages;
        }
        const int u_next = u - t;
        if (u_next < 1) continue;
        const int hi = window_end(d, m, l);
        for (int e = l + 1; e <= hi; ++e) {
          const double through_e = through(d, m, u_next, e);
          if (through_e == kInfinity || through_e - prefix(d, l) != target) continue;
          stages.push_back({l, e, t, node});
          // Which successor count carried the value.
          const bool exact = m - 1 >= 1 && u_next >= u_lo_[m - 1] && u_next <= u_hi_[m - 1] &&
                             at(m - 1, u_next, e) == successor(m, u_next, e);
          m = exact ? m - 1 : cap_;
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

  const CostModel& cost_;
  int layers_;
  int gpus_;
  std::vector<int> degrees_;
  int max_gpus_;
  int cap_ = 1;
  std::vector<std::vector<double>> prefix_;  // compute prefix sums per degree
  std::vector<double> transfer_same_, transfer_cross_;  // 2 C at each boundary
  std::vector<std::vector<std::vector<int>>> fit_;
  std::vector<std::vector<std::vector<int>>> hi_memory_;
  std::vector<std::vector<int>> hi_bound_;
  std::vector<std::size_t> base_;
  std::vector<int> u_lo_, u_hi_;
  std::vector<double> value_;
  std::vector<double> scratch_;
  double bound_ = kInfinity;
  int gpu_limit_ = 0;
};

PipelineTemplate make_template(const CostModel& cost, int nodes, std::vector<Stage> stages) {
  PipelineTemplate out;
  out.nodes = nodes;
  out.microbatches = cost.microbatches();
  out.first_microbatch_ms = cost.first_microbatch_ms(stages);
  out.bottleneck_ms = cost.bottleneck_ms(stages);
  out.iteration_ms = out.iteration_ms_for(out.microbatches);
  // Past S microbatches, 1F1B keeps no more in flight; below, memory may cap them.
  const int count = static_cast<int>(stages.size());
  int cap = 0;
  for (int s = 0; s < count; ++s) {
    const int limit = cost.stage_max_in_flight(stages[s].layer_begin, stages[s].layer_end, stages[s].gpus);
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
  // Every node holds at least one stage of at least one layer.
  const int searched = std::min(max_nodes, cost.layers());
  const int gpus = cost.gpus_per_node();
  const double mult = cost.microbatches() - 1;

  // Lower bounds on mu for n nodes: the costliest single layer at its best
  // degree, and the least GPU-time of all layers spread over n*G GPUs.
  double layer_floor = 0, gpu_time = 0;
  for (int l = 0; l < cost.layers(); ++l) {
    double cheapest = kInfinity, least_gpu_time = kInfinity;
    for (int t : cost.degrees()) {
      const double c = cost.stage_compute_ms(l, l + 1, t);
      cheapest = std::min(cheapest, c);
      least_gpu_time = std::min(least_gpu_time, c * t);
    }
    layer_floor = std::max(layer_floor, cheapest);
    gpu_time += least_gpu_time;
  }

  TemplateSearch search(cost, searched);
  struct Walk {
    bool active = true;
    double bound = kInfinity;      // next solve: every stage strictly below this
    double sigma_min = kInfinity;  // least sigma with no bound
    double best = kInfinity;
    std::vector<Stage> stages;
  };
  std::vector<Walk> walk(searched + 1);
  walk[0].active = false;
  int runs = 0;
  while (true) {
    double bound = -1;
    int gpu_limit = 0;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound > bound) bound = walk[n].bound;
    }
    if (bound < 0) break;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound == bound) gpu_limit = n * gpus;
    }
    search.solve(bound, gpu_limit);
    ++runs;
    int still_active = 0;
    for (int n = 1; n <= searched; ++n) {
      Walk& w = walk[n];
      if (!w.active || w.bound != bound) {
        still_active += w.active;
        continue;
      }
      auto found = search.best(n);
      if (!found) {
        w.active = false;
        continue;
      }
      auto& [sigma, stages] = *found;
      const double mu = cost.bottleneck_ms(stages);
      const double t = cost.first_microbatch_ms(stages) + mult * mu;
      if (w.sigma_min == kInfinity) w.sigma_min = sigma;
      if (t < w.best) {
        w.best = t;
        w.stages = std::move(stages);
      }
      const double mu_floor = std::max(layer_floor, gpu_time / (n * gpus));
      // Any better template has sigma >= this solve's sigma and mu >= mu_floor,
      // and mu < (best - sigma_min) / (M - 1).
      const double slack = 1e-12 * std::fabs(w.best);
      if (mult == 0 || sigma + mult * mu_floor >= w.best - slack) {
        w.active = false;
        continue;
      }
      w.bound = std::min(mu, (w.best - w.sigma_min) / mult);
      still_active += 1;
    }
    if (progress) {
      std::ostringstream line;
      line << "templates: search " << runs << " (stage bound " << bound << " ms), " << still_active
           << " node counts still open";
      progress(line.str());
    }
  }
  for (int n = 1; n <= searched; ++n) {
    if (!walk[n].stages.empty()) set.templates.push_back(make_template(cost, n, std::move(walk[n].stages)));
  }
  return set;
}

}  // namespace oobleck
