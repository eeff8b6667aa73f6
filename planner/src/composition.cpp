// Instantiation search: which templates, how many of each, and the batch split.
//
// A pipeline of template n given q microbatches takes T_n(q) = a_n +
// (q-1) b_n. Every pipeline holds every layer, so each layer's gradient
// all-reduce waits for the slowest pipeline (synced_iteration.h): a pipeline
// that finishes early gains nothing. The search therefore minimises
//   max over pipelines of T(q)  +  max over the templates used of s_n(p),
// the slowest pipeline plus the longest tail among the templates used
// (gradient synchronisation and optimizer steps after the passes:
// CostModel::iteration_tail_ms, among the p pipelines), and the plan is
// then priced at its synchronised iteration, which for one template
// is exactly this. A planner that instead gave each template its own tail
// (max of T_n(q) + s_n(p)) would hand the templates with long tails fewer
// microbatches and mix in deep templates with short tails, a saving that the
// all-reduces waiting for the slowest pipeline take back (GPT-3 1.3B on
// 2,048 H200s: priced 3.0 s, played 4.1 s).
//
// For a fixed p and a tail threshold sigma (one of the templates' tails),
// the templates with s_n(p) <= sigma are allowed and the value is tau(p,
// sigma) + sigma, tau being the least slowest-pipeline time; the optimum is
// the least of these over p and sigma. For a time limit tau a pipeline of
// template n can take c_n(tau) microbatches: tau is feasible when p allowed
// pipelines whose sizes add up to N can take B in total.
//
//  * Feasibility is exact: a dynamic programme over (pipelines so far, nodes
//    so far), kept to the Steinitz tube (tube_search.cpp).
//  * tau(p, sigma) is the least feasible slot value a_n + (q-1) b_n; the
//    search bisects over slot values between a lower bound and the best
//    solution so far, which jumps the upper end to the time that solution
//    actually takes.
//  * The lower bound is the linear relaxation in the pipeline counts: p times
//    the upper concave envelope of (n, c_n(tau)) at N/p. Pairs (p, sigma)
//    are visited lazily in order of their bounds: first p alone, its
//    relaxation over every template plus a lower bound on any tail (layer
//    0's all-reduce over a node's GPUs); then, with the tails computed, each
//    sigma with that relaxation plus sigma; then the relaxation over the
//    allowed templates plus sigma. Only a pair whose tightest bound is the
//    least is solved, and the search stops when the least bound cannot win.
//    Each relaxation is bisected over the time, and a bisection need not
//    finish before its pair comes first: its lower end is a lower bound on
//    where it ends (RelaxedBound). Its end is found among the few slot
//    times left between its ends, not by evaluating the relaxation 40
//    times, and a higher sigma, allowing more templates, relaxes further,
//    so the levels of sigma at which a count can take B at all are
//    bisected once per count.
//
// The batch split is batch_split.cpp; which pipeline counts a node count
// admits, node_counts.cpp.
#include "composition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <queue>

#include "node_counts.h"
#include "pipeline_kinds.h"
#include "relaxed_bound.h"
#include "tube_search.h"

namespace oobleck::detail {
namespace {

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
  return split_by_kind(problem.kinds, all, problem.B).slowest_ms;
}

// The least slowest-pipeline time for this pipeline count, exactly, with the
// pool multiset achieving it.
// Only a time below `beat_ms` is of use: none, nullopt.
// Each feasibility test adds one to `tests`.
std::optional<Solution> solve_for_count(const Problem& problem, double lower_bound, double beat_ms,
                                        TubeSearch& tube, std::int64_t& tests) {
  ++tests;
  auto counts = feasible(problem, beat_ms == kInfinity ? kInfinity : std::nextafter(beat_ms, 0.0), tube);
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
    ++tests;
    if (auto found = feasible(problem, mid, tube)) {
      best = {solution_time(problem, *found), std::move(*found)};
    } else {
      lo = mid;
    }
  }
  return best;
}

}  // namespace

std::vector<double>& TailMemo::of(const std::vector<Stage>& stages) { return kept_[stages]; }

std::optional<Composition> best_composition(const CostModel& cost, const TemplateSet& templates, int nodes,
                                            int min_pipelines, int global_microbatches,
                                            const std::vector<int>& fixed_sizes, TailMemo* tails) {
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

  // Steps a relaxed bound's bisection takes when it starts (RelaxedBound):
  // pairs far from the optimum are passed over on such partial bounds, and
  // a bisection is finished only when its pair comes first on it.
  // (A threshold's tight bound starts with none: its loose bound orders it
  // until it comes first.)
  constexpr int kFirstCountSteps = 16;
  struct Candidate {
    int pool;
    RelaxedBound lower;  // on pipelines_ms, over every template
    double sync_ms;      // a lower bound on every template's tail
  };
  std::vector<Candidate> candidates;
  // The search's work: the relaxation's evaluations and the feasibility tests.
  std::int64_t evaluations = 0, tests = 0;
  for (int p = pool_min; p <= pool_limit; ++p) {
    if (!has(reach, p) || p + fixed_count == 0) continue;
    const Problem problem{kinds, fixed, nodes, p, B, &evaluations};
    if (relaxed_fits(problem)) {
      // (Neighbouring counts' relaxations take B at nearly the same time,
      // so a count mostly takes its neighbour's first steps.)
      RelaxedBound lower(problem);
      if (candidates.empty() || !lower.follow(problem, candidates.back().lower)) {
        lower.advance(problem, kFirstCountSteps);
      }
      candidates.push_back({p, lower, cost.sync_tail_lower_bound_ms(p + fixed_count)});
    }
  }
  struct Tails {
    std::vector<double> of_kind;  // s_n(p) per kind
    std::vector<double> levels;   // the distinct thresholds worth trying, increasing
    int fits_from = -1;           // the first level whose relaxation takes B; -1: not known yet
    // Per level, once its pair was tightened: the relaxation over the kinds it allows.
    std::vector<std::optional<RelaxedBound>> tight;
  };
  std::map<std::size_t, Tails> tails_of;
  // (p, sigma) pairs in order of their bounds, lazily tightened (top
  // comment): level -1 stands for a count whose tails are not computed yet.
  // A pair's place in the queue is its bound from the bisections so far
  // (key_of), never above the bound that finished ones give: so pairs are
  // solved in the order, and with the bounds, that finished bisections
  // would give them, and the plan is the same.
  struct Entry {
    double bound;
    std::size_t candidate;
    int level;  // index into the count's sorted tails; -1: not yet split by tail
    bool tight;
    bool operator>(const Entry& o) const {
      if (bound != o.bound) return bound > o.bound;
      if (candidate != o.candidate) return candidate > o.candidate;
      return level > o.level;
    }
  };
  // The entry's bound from its bisections so far, and whether they are done.
  const auto key_of = [&](const Entry& e) -> std::pair<double, bool> {
    const Candidate& c = candidates[e.candidate];
    double bound = c.lower.lo() + c.sync_ms;
    if (e.level < 0) return {bound, c.lower.done()};
    const Tails& t = tails_of.at(e.candidate);
    const auto j = static_cast<std::size_t>(e.level);
    bound = std::max(bound, c.lower.lo() + t.levels[j]);
    if (!e.tight) return {bound, c.lower.done()};
    return {std::max(t.tight[j]->lo() + t.levels[j], bound), c.lower.done() && t.tight[j]->done()};
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](Entry e) {
    e.bound = key_of(e).first;
    queue.push(e);
  };
  for (std::size_t i = 0; i < candidates.size(); ++i) push({0, i, -1, false});
  // Each kind's tail at a pipeline count: from the memo where it was priced
  // before, else gathered once (at the first count that needs it) and priced.
  std::vector<std::optional<CostModel::Tail>> kind_tails(kinds.size());
  std::vector<std::vector<double>*> kept_tails(kinds.size(), nullptr);
  for (std::size_t i = 0; tails && i < kinds.size(); ++i) {
    kept_tails[i] = &tails->of(templates.find(kinds[i].nodes)->stages);
  }
  const auto tail_of = [&](std::size_t i, int pipelines) {
    if (fixed[i] == 0 && kinds[i].nodes > nodes) return kInfinity;
    std::vector<double>* kept = kept_tails[i];
    const auto at = static_cast<std::size_t>(pipelines);
    if (kept && at < kept->size() && !std::isnan((*kept)[at])) return (*kept)[at];
    if (!kind_tails[i]) kind_tails[i] = cost.iteration_tail(templates.find(kinds[i].nodes)->stages);
    const double tail = kind_tails[i]->ms(pipelines);
    if (kept) {
      if (kept->size() <= at) kept->resize(at + 1, std::numeric_limits<double>::quiet_NaN());
      (*kept)[at] = tail;
    }
    return tail;
  };
  // The kinds a threshold allows: the others get no capacity.
  auto allowed = [&](const Tails& t, double sigma) {
    std::vector<Kind> out = kinds;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (t.of_kind[i] > sigma) out[i].limit = 0;
    }
    return out;
  };
  // A higher threshold allows more kinds, and the relaxation at the range's
  // end only grows with them (relaxed_fits), so the levels where it takes B
  // are those from one on: found by bisection, once per count.
  const auto fits_from = [&](std::size_t candidate) {
    Tails& t = tails_of.at(candidate);
    if (t.fits_from >= 0) return t.fits_from;
    int lo = 0, hi = static_cast<int>(t.levels.size());
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      const std::vector<Kind> restricted = allowed(t, t.levels[static_cast<std::size_t>(mid)]);
      if (relaxed_fits(Problem{restricted, fixed, nodes, candidates[candidate].pool, B, &evaluations})) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return t.fits_from = lo;
  };
  TubeSearch tube;
  double best_total = kInfinity;
  std::optional<std::vector<int>> best_counts;
  while (!queue.empty() && queue.top().bound < best_total * (1 - 1e-12)) {
    const Entry e = queue.top();
    queue.pop();
    Candidate& c = candidates[e.candidate];
    const auto [bound, exact] = key_of(e);
    if (bound > e.bound) {  // a bisection its count shares went on since it was queued
      push(e);
      continue;
    }
    if (e.level < 0) {
      Tails& t = tails_of[e.candidate];
      double floor = 0;  // the fixed pipelines' tails are there regardless
      for (std::size_t i = 0; i < kinds.size(); ++i) {
        t.of_kind.push_back(tail_of(i, c.pool + fixed_count));
        if (fixed[i] > 0) floor = std::max(floor, t.of_kind.back());
      }
      for (double tail : t.of_kind) {
        if (tail >= floor && tail != kInfinity) t.levels.push_back(tail);
      }
      std::sort(t.levels.begin(), t.levels.end());
      t.levels.erase(std::unique(t.levels.begin(), t.levels.end()), t.levels.end());
      t.tight.resize(t.levels.size());
      for (std::size_t j = 0; j < t.levels.size(); ++j) push({0, e.candidate, static_cast<int>(j), false});
      continue;
    }
    Tails& t = tails_of.at(e.candidate);
    const auto j = static_cast<std::size_t>(e.level);
    const double sigma = t.levels[j];
    if (!e.tight) {
      if (fits_from(e.candidate) <= e.level) {
        const std::vector<Kind> restricted = allowed(t, sigma);
        const Problem problem{restricted, fixed, nodes, c.pool, B, &evaluations};
        t.tight[j].emplace(problem);
        push({0, e.candidate, e.level, true});
      }
      continue;
    }
    const std::vector<Kind> restricted = allowed(t, sigma);
    const Problem problem{restricted, fixed, nodes, c.pool, B, &evaluations};
    if (!exact) {  // its count's bound first: the count's other pairs share it
      if (!c.lower.done()) {
        c.lower.finish(Problem{kinds, fixed, nodes, c.pool, B, &evaluations});
      } else {
        t.tight[j]->finish(problem);
      }
      push(e);
      continue;
    }
    auto solution = solve_for_count(problem, e.bound - sigma, best_total * (1 - 1e-12) - sigma, tube, tests);
    if (!solution) continue;
    if (solution->pipelines_ms + sigma < best_total * (1 - 1e-12)) {
      best_total = solution->pipelines_ms + sigma;
      best_counts = std::move(solution->counts);
    }
  }
  if (!best_counts) return std::nullopt;
  std::vector<int> sizes = fixed_sizes;
  for (std::size_t i = 0; i < kinds.size(); ++i) sizes.insert(sizes.end(), (*best_counts)[i], kinds[i].nodes);
  Composition out = evaluate_composition(cost, templates, std::move(sizes), B);
  out.steps = evaluations + tests;
  return out;
}

std::optional<Composition> best_composition_on_most_nodes(const CostModel& cost, const TemplateSet& templates,
                                                          int nodes, int min_pipelines, int global_microbatches,
                                                          TailMemo* tails) {
  for (int m = usable_nodes(templates, nodes, min_pipelines, global_microbatches);
       m >= 1 && may_take(templates, m, global_microbatches); --m) {
    if (auto composition = best_composition(cost, templates, m, min_pipelines, global_microbatches, {}, tails)) {
      return composition;
    }
  }
  return std::nullopt;
}

}  // namespace oobleck::detail
