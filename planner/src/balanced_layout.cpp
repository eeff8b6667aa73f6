// The balanced layout that seeds the exact template search (templates.cpp).
#include "balanced_layout.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

// A balanced layout: j stages of G/j GPUs on every node (or one stage on
// every k nodes, at degree k G), layers split by
// min-max bisection with a greedy that respects memory. Not optimal; it seeds
// the exact search with an upper bound whose slowest stage is near the least
// possible, so the walk down the Pareto front can start near its bottom.
std::optional<std::vector<Stage>> balanced_layout(const CostModel& cost, int nodes) {
  const int layers = cost.layers();
  const int gpus = cost.gpus_per_node();
  std::optional<std::vector<Stage>> best;
  double best_time = kInfinity;
  // Recomputing where the templates may choose not to costs time for
  // nothing here: the seed recomputes only when every stage must.
  const Recompute r = cost.recompute_choices().front();
  for (int t : cost.degrees()) {
    const int span = t > gpus ? t / gpus : 1;  // nodes a stage takes
    if (nodes % span != 0) continue;
    const int per_node = t > gpus ? 1 : gpus / t;
    const int count = nodes / span * per_node;
    if (count > layers) continue;
    auto greedy = [&](double limit) -> std::optional<std::vector<Stage>> {
      std::vector<Stage> stages;
      int begin = 0;
      for (int s = 0; s < count; ++s) {
        const int in_flight = std::min(cost.microbatches(), count - s);
        const int last_end = layers - (count - s - 1);
        int end = begin + 1;
        if (cost.stage_compute_ms(begin, end, t, r) > limit || !cost.stage_fits(begin, end, t, in_flight, r)) {
          return std::nullopt;
        }
        while (end + 1 <= last_end && cost.stage_compute_ms(begin, end + 1, t, r) <= limit &&
               cost.stage_fits(begin, end + 1, t, in_flight, r)) {
          ++end;
        }
        if (s == count - 1 && end != layers) return std::nullopt;
        stages.push_back({begin, end, t, s / per_node * span, r, span});
        begin = end;
      }
      return stages;
    };
    double lo = 0, hi = cost.stage_compute_ms(0, layers, t, r);
    auto found = greedy(hi);
    if (!found) continue;
    for (int iteration = 0; iteration < 60 && hi - lo > 1e-9 * hi; ++iteration) {
      const double mid = lo + (hi - lo) / 2;
      if (auto stages = greedy(mid)) {
        found = std::move(stages);
        hi = mid;
      } else {
        lo = mid;
      }
    }
    const double time = cost.pipeline_ms(*found, cost.microbatches());
    if (time < best_time) {
      best_time = time;
      best = std::move(found);
    }
  }
  return best;
}

}  // namespace oobleck::detail
