// Instantiation search: which templates, how many of each, and the batch split.
//
// A pipeline of template n given q microbatches takes a_n + (q-1) b_n (its
// T(q)); the iteration takes max over pipelines plus the gradient
// synchronisation, which depends only on the pipeline count p. For a fixed p
// and a time limit tau, pipeline n can take c_n(tau) microbatches, and tau is
// feasible when p pipelines whose sizes add up to N can take B in total.
//
//  * Feasibility is exact: a dynamic programme over (pipelines so far, nodes
//    so far). By the one-dimensional Steinitz lemma the pipelines of any
//    solution can be ordered so that after k of them the node count stays
//    within [k N/p - (N/p - n_min), k N/p + (n_max - N/p)], so only that tube
//    is stored: O(p (n_max - n_min + 1) K) for K templates.
//  * tau*(p) is the least feasible slot value a_n + (q-1) b_n; the search
//    bisects over slot values between a lower bound and the best solution so
//    far, which jumps the upper end to the time that solution actually takes.
//  * The lower bound is the linear relaxation in the pipeline counts: p times
//    the upper concave envelope of (n, c_n(tau)) at N/p. Pipeline counts are
//    visited in order of that bound plus sync(p) and the search stops when
//    the bound cannot win.
#include "composition.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Kind {
  int nodes = 0;
  double first = 0;  // T(1)
  double step = 0;   // bottleneck: T(q+1) - T(q)
  int limit = 0;     // most microbatches (memory, and never more than B)
};

[[nodiscard]] Kind kind_of_template(const PipelineTemplate& t, int global_microbatches) {
  const int limit = t.max_microbatches > 0 ? std::min(t.max_microbatches, global_microbatches) : global_microbatches;
  return {t.nodes, t.first_microbatch_ms, t.bottleneck_ms, limit};
}

std::vector<Kind> kinds_of(const TemplateSet& templates, int max_nodes, int global_microbatches) {
  std::vector<Kind> kinds;
  for (const auto& t : templates.templates) {
    if (t.nodes <= max_nodes) kinds.push_back(kind_of_template(t, global_microbatches));
  }
  return kinds;
}

[[nodiscard]] double slot_time(const Kind& k, int q) { return k.first + (q - 1) * k.step; }

// Microbatches a pipeline of kind k can finish within `limit_ms`.
[[nodiscard]] int capacity(const Kind& k, double limit_ms) {
  if (!(k.first <= limit_ms)) return 0;
  if (k.step <= 0 || limit_ms == kInfinity) return k.limit;
  const double estimate = std::floor((limit_ms - k.first) / k.step) + 1;
  int q = estimate >= k.limit ? k.limit : std::max(1, static_cast<int>(estimate));
  while (q > 1 && slot_time(k, q) > limit_ms) --q;
  while (q < k.limit && slot_time(k, q + 1) <= limit_ms) ++q;
  return q;
}

[[nodiscard]] std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
[[nodiscard]] std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

// Exact feasibility over (pipelines so far, nodes so far) in the Steinitz
// tube. Returns counts per kind.
class TubeSearch {
 public:
  // Whether `pipelines` pipelines of total size `nodes` can take `target`
  // microbatches when kind i takes at most caps[i] (0: unusable).
  std::optional<std::vector<int>> solve(const std::vector<Kind>& kinds, const std::vector<int>& caps, int nodes,
                                        int pipelines, int target) {
    usable_.clear();
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (caps[i] > 0) usable_.push_back(static_cast<int>(i));
    }
    if (usable_.empty()) return std::nullopt;
    std::int64_t n_lo = INT_MAX, n_hi = 0;
    for (int i : usable_) {
      n_lo = std::min<std::int64_t>(n_lo, kinds[i].nodes);
      n_hi = std::max<std::int64_t>(n_hi, kinds[i].nodes);
    }
    const std::int64_t N = nodes, p = pipelines;
    if (p * n_lo > N || p * n_hi < N) return std::nullopt;
    lo_.assign(p + 1, 0);
    hi_.assign(p + 1, 0);
    offset_.assign(p + 2, 0);
    for (std::int64_t k = 0; k <= p; ++k) {
      lo_[k] = std::max({k * n_lo, N - (p - k) * n_hi, ceil_div(k * N - (N - p * n_lo), p)});
      hi_[k] = std::min({k * n_hi, N - (p - k) * n_lo, floor_div(k * N + (p * n_hi - N), p)});
      if (hi_[k] < lo_[k]) return std::nullopt;
      offset_[k + 1] = offset_[k] + (hi_[k] - lo_[k] + 1);
    }
    constexpr int kUnreachable = INT_MIN / 2;
    const int B = std::max(target, 0);  // values saturate here
    value_.assign(offset_[p + 1], kUnreachable);
    value_[0] = 0;
    for (std::int64_t k = 1; k <= p; ++k) {
      int* cur = value_.data() + offset_[k];
      const int* prev = value_.data() + offset_[k - 1];
      for (int i : usable_) {
        const std::int64_t n = kinds[i].nodes;
        const int c = caps[i];
        const std::int64_t s_begin = std::max(lo_[k], lo_[k - 1] + n);
        const std::int64_t s_end = std::min(hi_[k], hi_[k - 1] + n);
        for (std::int64_t s = s_begin; s <= s_end; ++s) {
          const int candidate = std::min(B, prev[s - n - lo_[k - 1]] + c);
          int& slot = cur[s - lo_[k]];
          slot = std::max(slot, candidate);
        }
      }
      for (std::int64_t s = 0; s <= hi_[k] - lo_[k]; ++s) {
        if (cur[s] < 0) cur[s] = kUnreachable;
      }
    }
    if (cell(p, N) < B) return std::nullopt;
    // Walk back: any kind whose predecessor explains the value.
    std::vector<int> counts(kinds.size(), 0);
    std::int64_t s = N;
    for (std::int64_t k = p; k >= 1; --k) {
      const int v = cell(k, s);
      bool found = false;
      for (int i : usable_) {
        const std::int64_t prev_s = s - kinds[i].nodes;
        if (prev_s < lo_[k - 1] || prev_s > hi_[k - 1]) continue;
        const int pv = cell(k - 1, prev_s);
        if (pv >= 0 && std::min(B, pv + caps[i]) == v) {
          ++counts[i];
          s = prev_s;
          found = true;
          break;
        }
      }
      if (!found) return std::nullopt;  // unreachable by construction
    }
    return counts;
  }

 private:
  [[nodiscard]] int cell(std::int64_t k, std::int64_t s) const { return value_[offset_[k] + (s - lo_[k])]; }
  std::vector<int> usable_;
  std::vector<std::int64_t> lo_, hi_, offset_;
  std::vector<int> value_;
};

// The min-max split of B microbatches over counts[i] pipelines of kind i,
// each at least one and at most its limit. Pipelines of one kind are
// interchangeable, so the greedy raises them a level at a time: per kind, all
// run `level` microbatches except `raised` of them, which run level + 1.
struct KindSplit {
  std::vector<int> level, raised;
  double slowest_ms = kInfinity;  // infinite when B does not fit
};

[[nodiscard]] KindSplit split_by_kind(const std::vector<Kind>& kinds, const std::vector<int>& counts, int B) {
  using Entry = std::pair<double, int>;  // next slot time, kind
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  KindSplit out{std::vector<int>(kinds.size(), 1), std::vector<int>(kinds.size(), 0), 0};
  long long assigned = 0;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (counts[i] == 0) continue;
    assigned += counts[i];
    out.slowest_ms = std::max(out.slowest_ms, slot_time(kinds[i], 1));
    if (kinds[i].limit > 1) next.push({slot_time(kinds[i], 2), static_cast<int>(i)});
  }
  if (assigned > B) out.slowest_ms = kInfinity;
  // Each pop raises pipelines of that kind from `level` to level + 1.
  while (assigned < B) {
    if (next.empty()) {
      out.slowest_ms = kInfinity;
      return out;
    }
    const auto [time, i] = next.top();
    next.pop();
    const int take = static_cast<int>(std::min<long long>(counts[i] - out.raised[i], B - assigned));
    assigned += take;
    out.raised[i] += take;
    out.slowest_ms = std::max(out.slowest_ms, time);
    if (out.raised[i] == counts[i]) {
      out.level[i] += 1;
      out.raised[i] = 0;
      if (out.level[i] < kinds[i].limit) next.push({slot_time(kinds[i], out.level[i] + 1), i});
    } else {
      next.push({time, i});
    }
  }
  return out;
}

[[nodiscard]] double split_time(const std::vector<Kind>& kinds, const std::vector<int>& counts, int B) {
  return split_by_kind(kinds, counts, B).slowest_ms;
}

// Upper concave envelope of points sorted by x, at x; -inf outside their range.
[[nodiscard]] double envelope_at(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.empty() || x < points.front().first || x > points.back().first) return -kInfinity;
  std::vector<std::pair<double, double>> hull;
  for (const auto& p : points) {
    while (hull.size() >= 2) {
      const auto& a = hull[hull.size() - 2];
      const auto& b = hull.back();
      // Drop b when it lies on or below the chord from a to p.
      if ((b.second - a.second) * (p.first - a.first) <= (p.second - a.second) * (b.first - a.first)) {
        hull.pop_back();
      } else {
        break;
      }
    }
    hull.push_back(p);
  }
  for (std::size_t j = 0; j + 1 < hull.size(); ++j) {
    if (x <= hull[j + 1].first) {
      const auto& [x0, y0] = hull[j];
      const auto& [x1, y1] = hull[j + 1];
      return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    }
  }
  return hull.back().second;
}

// The search for one pipeline count: `nodes` pool nodes in exactly `pool`
// pipelines, next to `fixed` pipelines (counts per kind) that are there
// regardless. Pool pipelines use kinds with at most `nodes` nodes.
struct Problem {
  const std::vector<Kind>& kinds;
  const std::vector<int>& fixed;
  int nodes;
  int pool;
  int B;

  // Microbatches the fixed pipelines take within tau; -1 if one cannot run.
  [[nodiscard]] int fixed_capacity(double tau) const {
    long long total = 0;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (fixed[i] == 0) continue;
      const int c = capacity(kinds[i], tau);
      if (c == 0) return -1;
      total += static_cast<long long>(fixed[i]) * c;
    }
    return static_cast<int>(std::min<long long>(total, B));
  }
  [[nodiscard]] int pool_capacity_cap(std::size_t i, double tau) const {
    return kinds[i].nodes <= nodes ? capacity(kinds[i], tau) : 0;
  }
};

// Linear relaxation: the most microbatches the pool could take within tau
// when its pipeline counts may be fractional, plus the fixed pipelines.
[[nodiscard]] double relaxed_capacity(const Problem& problem, double tau) {
  const int fixed = problem.fixed_capacity(tau);
  if (fixed < 0) return -kInfinity;
  if (problem.pool == 0) return problem.nodes == 0 ? fixed : -kInfinity;
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < problem.kinds.size(); ++i) {
    const int c = problem.pool_capacity_cap(i, tau);
    if (c > 0) points.emplace_back(problem.kinds[i].nodes, c);
  }
  return fixed + problem.pool * envelope_at(points, static_cast<double>(problem.nodes) / problem.pool);
}

// A time that the relaxation proves infeasible (so the optimum is larger),
// or nullopt when no time is feasible.
[[nodiscard]] std::optional<double> relaxed_lower_bound(const Problem& problem) {
  double min_first = kInfinity, max_time = 0;
  for (const auto& k : problem.kinds) {
    min_first = std::min(min_first, k.first);
    max_time = std::max(max_time, slot_time(k, k.limit));
  }
  const double need = problem.B * (1 - 1e-12);
  double lo = std::nextafter(min_first, -kInfinity);
  double hi = max_time;
  if (relaxed_capacity(problem, hi) < need) return std::nullopt;
  for (int iteration = 0; iteration < 100 && hi - lo > 1e-12 * hi; ++iteration) {
    const double mid = lo + (hi - lo) / 2;
    if (relaxed_capacity(problem, mid) < need) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Distinct slot values strictly between lo and hi, or nullopt when more than `most`.
[[nodiscard]] std::optional<std::vector<double>> slots_between(const std::vector<Kind>& kinds, double lo, double hi,
                                                               std::size_t most) {
  std::vector<double> values;
  for (const auto& k : kinds) {
    if (!(k.first < hi)) continue;
    int q = 1;
    if (k.step > 0 && k.first <= lo) {
      q = static_cast<int>(std::clamp(std::floor((lo - k.first) / k.step), 1.0, static_cast<double>(k.limit) + 1));
    }
    for (; q <= k.limit; ++q) {
      const double t = slot_time(k, q);
      if (t >= hi) break;
      if (t > lo) {
        values.push_back(t);
        if (values.size() > 4 * most) return std::nullopt;
      }
      if (k.step <= 0) break;
    }
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  if (values.size() > most) return std::nullopt;
  return values;
}

struct Solution {
  double pipelines_ms = kInfinity;
  std::vector<int> counts;  // pool pipelines per kind
};

// Pool counts that, with the fixed pipelines, take B within tau.
std::optional<std::vector<int>> feasible(const Problem& problem, double tau, TubeSearch& tube) {
  const int fixed = problem.fixed_capacity(tau);
  if (fixed < 0) return std::nullopt;
  if (problem.pool == 0) {
    if (problem.nodes != 0 || fixed < problem.B) return std::nullopt;
    return std::vector<int>(problem.kinds.size(), 0);
  }
  std::vector<int> caps(problem.kinds.size());
  for (std::size_t i = 0; i < caps.size(); ++i) caps[i] = problem.pool_capacity_cap(i, tau);
  return tube.solve(problem.kinds, caps, problem.nodes, problem.pool, problem.B - fixed);
}

[[nodiscard]] double solution_time(const Problem& problem, const std::vector<int>& pool_counts) {
  std::vector<int> all = pool_counts;
  for (std::size_t i = 0; i < all.size(); ++i) all[i] += problem.fixed[i];
  return split_time(problem.kinds, all, problem.B);
}

// The least slowest-pipeline time for this pipeline count, exactly, with the
// pool multiset achieving it.
std::optional<Solution> solve_for_count(const Problem& problem, double lower_bound, TubeSearch& tube) {
  auto counts = feasible(problem, kInfinity, tube);
  if (!counts) return std::nullopt;
  Solution best{solution_time(problem, *counts), std::move(*counts)};
  double lo = lower_bound;
  while (true) {
    double mid;
    if (auto slots = slots_between(problem.kinds, lo, best.pipelines_ms, 64)) {
      if (slots->empty()) break;
      mid = (*slots)[slots->size() / 2];
    } else {
      mid = lo + (best.pipelines_ms - lo) / 2;
      if (!(mid > lo && mid < best.pipelines_ms)) break;
    }
    if (auto found = feasible(problem, mid, tube)) {
      best = {solution_time(problem, *found), std::move(*found)};
    } else {
      lo = mid;
    }
  }
  return best;
}

// Pipeline counts with which templates add up to exactly m nodes, as a bitset
// over counts 0..max_count, for m = 0, 1, ..., nodes in turn. Only the last
// n_max + 1 sets are kept, so memory stays O(n_max * max_count).
class CountSets {
 public:
  CountSets(const TemplateSet& templates, int max_count) : words_(static_cast<std::size_t>(max_count) / 64 + 1) {
    for (const auto& t : templates.templates) sizes_.push_back(t.nodes);
    span_ = sizes_.empty() ? 1 : sizes_.back() + 1;
    ring_.assign(static_cast<std::size_t>(span_), std::vector<std::uint64_t>(words_, 0));
    tail_mask_ = (static_cast<unsigned>(max_count % 64) + 1 < 64)
                     ? (std::uint64_t{1} << (static_cast<unsigned>(max_count % 64) + 1)) - 1
                     : ~std::uint64_t{0};
  }

  // Calls visit(m, bits) for m = 0..nodes.
  template <typename Visit>
  void run(int nodes, Visit&& visit) {
    for (int m = 0; m <= nodes; ++m) {
      auto& bits = ring_[static_cast<std::size_t>(m % span_)];
      std::fill(bits.begin(), bits.end(), 0);
      if (m == 0) bits[0] = 1;
      for (int n : sizes_) {
        if (n > m) break;
        const auto& from = ring_[static_cast<std::size_t>((m - n) % span_)];
        std::uint64_t carry = 0;
        for (std::size_t w = 0; w < words_; ++w) {  // bits << 1: one more pipeline
          bits[w] |= (from[w] << 1) | carry;
          carry = from[w] >> 63;
        }
      }
      bits[words_ - 1] &= tail_mask_;
      visit(m, bits);
    }
  }

 private:
  std::size_t words_;
  std::vector<int> sizes_;  // increasing
  int span_ = 1;
  std::vector<std::vector<std::uint64_t>> ring_;
  std::uint64_t tail_mask_;
};

[[nodiscard]] bool has(const std::vector<std::uint64_t>& bits, int c) {
  return (bits[static_cast<std::size_t>(c) / 64] >> (c % 64)) & 1u;
}

// The count set of exactly `nodes` nodes.
[[nodiscard]] std::vector<std::uint64_t> counts_for(const TemplateSet& templates, int nodes, int max_count) {
  std::vector<std::uint64_t> out;
  CountSets(templates, max_count).run(nodes, [&](int m, const std::vector<std::uint64_t>& bits) {
    if (m == nodes) out = bits;
  });
  return out;
}

[[nodiscard]] int pipeline_limit(const TemplateSet& templates, int nodes, int global_microbatches) {
  const int smallest = templates.min_nodes();
  if (smallest <= 0 || nodes < smallest) return 0;
  return std::min(global_microbatches, nodes / smallest);
}

}  // namespace

std::vector<int> split_microbatches(const std::vector<const PipelineTemplate*>& pipelines, int global_microbatches) {
  // One kind per distinct template.
  std::vector<const PipelineTemplate*> distinct;
  std::vector<std::size_t> kind_of(pipelines.size());
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    auto it = std::find(distinct.begin(), distinct.end(), pipelines[p]);
    kind_of[p] = static_cast<std::size_t>(it - distinct.begin());
    if (it == distinct.end()) distinct.push_back(pipelines[p]);
  }
  std::vector<Kind> kinds;
  std::vector<int> counts(distinct.size(), 0);
  for (const auto* t : distinct) kinds.push_back(kind_of_template(*t, global_microbatches));
  for (std::size_t k : kind_of) counts[k] += 1;
  KindSplit split = split_by_kind(kinds, counts, global_microbatches);
  if (pipelines.empty() || split.slowest_ms == kInfinity) return {};
  std::vector<int> given(pipelines.size());
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    const std::size_t k = kind_of[p];
    given[p] = split.level[k] + (split.raised[k] > 0 ? 1 : 0);
    if (split.raised[k] > 0) split.raised[k] -= 1;
  }
  return given;
}

int most_pipelines(const TemplateSet& templates, int nodes, int limit) {
  // Nodes may stay unused, so pipelines of the smallest template are the most.
  return pipeline_limit(templates, nodes, limit);
}

int usable_nodes(const TemplateSet& templates, int nodes, int min_pipelines, int global_microbatches) {
  const int count_limit = pipeline_limit(templates, nodes, global_microbatches);
  if (count_limit == 0 || count_limit < min_pipelines) return 0;
  const int n_min = templates.min_nodes();
  const int n_max = templates.templates.back().nodes;
  if (static_cast<int>(templates.templates.size()) == n_max - n_min + 1) {
    // Every size in [n_min, n_max]: c pipelines make exactly the node counts
    // in [c n_min, c n_max].
    for (int m = nodes; m >= 1; --m) {
      const int c_lo = std::max({min_pipelines, 1, (m + n_max - 1) / n_max});
      const int c_hi = std::min(count_limit, m / n_min);
      if (c_lo <= c_hi) return m;
    }
    return 0;
  }
  int best = 0;
  CountSets(templates, count_limit).run(nodes, [&](int m, const std::vector<std::uint64_t>& bits) {
    for (int c = std::max(min_pipelines, 1); c <= count_limit; ++c) {
      if (has(bits, c)) {
        best = m;
        return;
      }
    }
  });
  return best;
}

bool may_take(const TemplateSet& templates, int nodes, int global_microbatches) {
  long long most_each = 0;
  for (const auto& t : templates.templates) {
    if (t.nodes > nodes) continue;
    if (t.max_microbatches == 0) return true;  // no memory limit on microbatches
    most_each = std::max<long long>(most_each, t.max_microbatches);
  }
  const int smallest = templates.min_nodes();
  if (smallest <= 0 || nodes < smallest) return false;
  return static_cast<long long>(nodes / smallest) * most_each >= global_microbatches;
}

std::optional<Composition> best_composition_on_most_nodes(const CostModel& cost, const TemplateSet& templates,
                                                          int nodes, int min_pipelines, int global_microbatches) {
  for (int m = usable_nodes(templates, nodes, min_pipelines, global_microbatches);
       m >= 1 && may_take(templates, m, global_microbatches); --m) {
    if (auto composition = best_composition(cost, templates, m, min_pipelines, global_microbatches)) return composition;
  }
  return std::nullopt;
}

Composition evaluate_composition(const CostModel& cost, const TemplateSet& templates, std::vector<int> template_nodes,
                                 int global_microbatches) {
  std::sort(template_nodes.begin(), template_nodes.end(), std::greater<>());
  Composition out;
  std::vector<const PipelineTemplate*> chosen;
  for (int n : template_nodes) chosen.push_back(templates.find(n));
  out.template_nodes = std::move(template_nodes);
  out.microbatches = split_microbatches(chosen, global_microbatches);
  if (out.microbatches.empty()) {
    out.iteration_ms = kInfinity;
    return out;
  }
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    out.pipelines_ms = std::max(out.pipelines_ms, chosen[i]->iteration_ms_for(out.microbatches[i]));
  }
  out.sync_ms = cost.gradient_sync_ms(static_cast<int>(chosen.size()));
  out.iteration_ms = out.pipelines_ms + out.sync_ms;
  return out;
}

std::optional<Composition> best_composition(const CostModel& cost, const TemplateSet& templates, int nodes,
                                            int min_pipelines, int global_microbatches,
                                            const std::vector<int>& fixed_sizes) {
  const int B = global_microbatches;
  int largest_fixed = 0;
  for (int size : fixed_sizes) largest_fixed = std::max(largest_fixed, size);
  const std::vector<Kind> kinds = kinds_of(templates, std::max(nodes, largest_fixed), B);
  std::vector<int> fixed(kinds.size(), 0);
  for (int size : fixed_sizes) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.nodes == size; });
    if (it == kinds.end()) return std::nullopt;  // no template of that size
    fixed[static_cast<std::size_t>(it - kinds.begin())] += 1;
  }
  const int fixed_count = static_cast<int>(fixed_sizes.size());
  const int pool_limit = std::min(pipeline_limit(templates, nodes, B), B - fixed_count);
  const int pool_min = std::max(min_pipelines - fixed_count, nodes > 0 ? 1 : 0);
  if (kinds.empty() || fixed_count > B || pool_limit < pool_min) return std::nullopt;
  const auto reach = counts_for(templates, nodes, std::max(pool_limit, 0));

  struct Candidate {
    int pool;
    double lower_bound;  // on pipelines_ms
    double sync_ms;
  };
  std::vector<Candidate> candidates;
  for (int p = pool_min; p <= pool_limit; ++p) {
    if (!has(reach, p) || p + fixed_count == 0) continue;
    if (auto bound = relaxed_lower_bound(Problem{kinds, fixed, nodes, p, B})) {
      candidates.push_back({p, *bound, cost.gradient_sync_ms(p + fixed_count)});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.lower_bound + a.sync_ms < b.lower_bound + b.sync_ms;
  });

  TubeSearch tube;
  double best_total = kInfinity;
  std::optional<std::vector<int>> best_counts;
  for (const auto& c : candidates) {
    if (c.lower_bound + c.sync_ms >= best_total * (1 - 1e-12)) break;
    auto solution = solve_for_count(Problem{kinds, fixed, nodes, c.pool, B}, c.lower_bound, tube);
    if (!solution) continue;
    const double total = solution->pipelines_ms + c.sync_ms;
    if (total < best_total * (1 - 1e-12)) {
      best_total = total;
      best_counts = std::move(solution->counts);
    }
  }
  if (!best_counts) return std::nullopt;
  std::vector<int> sizes = fixed_sizes;
  for (std::size_t i = 0; i < kinds.size(); ++i) sizes.insert(sizes.end(), (*best_counts)[i], kinds[i].nodes);
  return evaluate_composition(cost, templates, std::move(sizes), B);
}

}  // namespace oobleck::detail
