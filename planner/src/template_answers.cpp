// Reading a solve's answers out of the template search's value table
// (template_search.h): a node count's least sigma, and of the layouts that
// reach it, one of least suffix period.
#include <cassert>
#include <limits>

#include "template_search.h"

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

// The same on `u` GPUs: whole nodes, or fewer than one node's.
std::optional<std::pair<double, std::vector<Stage>>> TemplateSearch::best_on_gpus(int u) const {
  const int nodes = (u + gpus_ - 1) / gpus_;
  if (u > asked_limit_) return std::nullopt;
  int best_m = 0;
  double best_value = kInfinity;
  for (int m = 1; m <= max_stages_; ++m) {
    const double v = value_at(m, u, 0);
    if (v < best_value) {
      best_value = v;
      best_m = m;
    }
  }
  if (best_m == 0) return std::nullopt;
  // Of the stage counts that reach it, the one whose layout has the least period.
  Choice best = least_period_choice(best_m, u, 0);
  for (int m = best_m + 1; m <= max_stages_; ++m) {
    if (value_at(m, u, 0) == best_value) {
      const Choice choice = least_period_choice(m, u, 0);
      if (choice.period < best.period || (choice.period == best.period && choice.run < best.run)) {
        best = choice;
        best_m = m;
      }
    }
  }
  return std::make_pair(best_value, reconstruct(best_m, u, nodes));
}

// The successors that reach a state's value exactly are its layouts of
// least sigma; of those, the one of least suffix period: the largest of the
// suffix's round trip over its m stages, the first stage's compute, its link
// one way, and the rest's own period, itself least among the rest's ties.
// Ties in that period too go to the layout whose costliest run of
// neighbouring stages (steady_period.h) is cheapest, as far as its first
// kRunStages stages show it: a guide among equals, not part of the claim.
TemplateSearch::Choice TemplateSearch::least_period_choice(int m, int u, int l) const {
  const std::size_t key = static_cast<std::size_t>(row_index(m, u)) * static_cast<std::size_t>(layers_ + 1) +
                          static_cast<std::size_t>(l);
  if (const auto it = choices_.find(key); it != choices_.end()) return it->second;
  const double target = value_at(m, u, l);
  Choice best{kInfinity, kInfinity, 0, -1, {}, {}, 0};
  for (std::size_t k = fitting_start_[u]; k < fitting_start_[u + 1]; ++k) {
    const std::size_t d = fitting_[k];
    const int t = degree(d);
    const double* prefix = prefix_[d].data();
    const int hi = std::min({reach_[d * static_cast<std::size_t>(layers_ + 1) + l], hi_memory_[window_index(d, m, l)],
                             last_boundary(m)});
    if (terminal_allowed(m, u, t) && hi >= layers_ && prefix[layers_] - prefix[l] == target && target < best.period) {
      best = {target, target, d, layers_, {target}, {0.0}, 1};
    }
    const int u_next = u - t;
    if (u_next < 1) continue;
    int lo_alive = layers_ + 1, hi_alive = -1;
    const double* rest = live_row(m - 1, u_next, lo_alive, hi_alive);
    if (!rest) continue;
    const double* transfer = transfers(u_next, d);
    for (int e = std::max(l + 1, lo_alive); e <= std::min(hi, hi_alive); ++e) {
      if (!(transfer[e] < 2 * bound_)) continue;
      const double r = rest[e];
      if (r == kInfinity || (prefix[e] + transfer[e] + r) - prefix[l] != target) continue;
      const double compute = prefix[e] - prefix[l], link = transfer[e] / 2;
      double period = std::max({target / m, compute, link});
      if (period > best.period) continue;
      const Choice after = least_period_choice(m - 1, u_next, e);
      period = std::max(period, after.period);
      if (period > best.period) continue;
      double run = std::max(period, after.run), sum = compute;
      for (int j = 0; j < after.stages; ++j) {
        sum += 2 * (j == 0 ? link : after.link[j - 1]) + after.compute[j];
        run = std::max(run, sum / (j + 2));
      }
      if (period < best.period || run < best.run) {
        best = {period, run, d, e, {compute}, {link}, 1};
        for (int j = 0; j < after.stages && j + 1 < kRunStages; ++j) {
          best.compute[j + 1] = after.compute[j];
          best.link[j + 1] = after.link[j];
          ++best.stages;
        }
      }
    }
  }
  assert(best.end > l && "template reconstruction lost its path");
  choices_.emplace(key, best);
  return best;
}

std::vector<Stage> TemplateSearch::reconstruct(int m, int u, int nodes) const {
  std::vector<Stage> stages;
  int l = 0;
  while (l < layers_) {
    const Choice choice = least_period_choice(m, u, l);
    if (choice.end <= l) return {};
    const int t = degree(choice.variant);
    const int node = nodes - 1 - (u - 1) / gpus_;
    stages.push_back({l, choice.end, t, node, recompute(choice.variant), span(t)});
    --m;
    u -= t;
    l = choice.end;
  }
  return stages;
}

}  // namespace oobleck::detail
