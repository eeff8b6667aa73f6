// Lower bounds on mu on u GPUs. Every layout's period is at least its
// costliest stage, so at least the least such maximum over all layouts of
// at most u GPUs (node boundaries and memory set aside: a relaxation). For a
// limit x, the fewest GPUs that cover the layers with stages each of
// compute <= x take, for each degree, the longest stage from a layer on
// (covering fewer layers never needs more GPUs); that count falls as x
// grows, so the least x whose count fits u is found by bisection over the
// stages' costs. The period is also at least the costliest layer at its
// cheapest and the least GPU-time of all layers spread over the u GPUs
// (all there is for models of so many layers that their stages' costs
// would not be kept).
#include "period_floor.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {

PeriodFloor::PeriodFloor(const CostModel& cost) : gpus_(cost.gpus_per_node()), layers_(cost.layers()) {
  for (int t : cost.degrees()) {
    for (Recompute r : cost.recompute_choices()) variants_.push_back({t, r});
  }
  for (int l = 0; l < layers_; ++l) {
    double least_gpu_time = std::numeric_limits<double>::infinity();
    double cheapest = std::numeric_limits<double>::infinity();
    for (const auto& [t, r] : variants_) {
      const double c = cost.stage_compute_ms(l, l + 1, t, r);
      least_gpu_time = std::min(least_gpu_time, c * t);
      cheapest = std::min(cheapest, c);
    }
    gpu_time_ += least_gpu_time;
    layer_floor_ = std::max(layer_floor_, cheapest);
  }
  // Every stage's cost is kept (L^2 / 2 per stage kind); past a limit, only
  // the floors above (the costliest layer, the GPU-time) are.
  constexpr double kMostLimits = 2e7;
  if (static_cast<double>(variants_.size()) * layers_ * (layers_ + 1) / 2 > kMostLimits) return;
  compute_.resize(variants_.size());
  for (std::size_t v = 0; v < variants_.size(); ++v) {
    auto& prefix = compute_[v];
    prefix.resize(static_cast<std::size_t>(layers_ + 1));
    for (int l = 0; l <= layers_; ++l) prefix[l] = cost.stage_compute_ms(0, l, variants_[v].degree, variants_[v].recompute);
    for (int b = 0; b < layers_; ++b) {
      for (int e = b + 1; e <= layers_; ++e) limits_.push_back(prefix[e] - prefix[b]);
    }
  }
  std::sort(limits_.begin(), limits_.end());
  limits_.erase(std::unique(limits_.begin(), limits_.end()), limits_.end());
}

double PeriodFloor::on_gpus(int gpus) {
  if (const auto it = cache_.find(gpus); it != cache_.end()) return it->second;
  double floor = std::max(layer_floor_, gpu_time_ / gpus);
  // The least limit whose cover fits; the largest (a whole model's) fits
  // wherever any does.
  std::size_t lo = 0, hi = limits_.empty() ? 0 : limits_.size() - 1;
  if (!limits_.empty() && fewest_gpus(limits_[hi]) <= gpus) {
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (fewest_gpus(limits_[mid]) <= gpus) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    floor = std::max(floor, limits_[lo]);
  }
  return cache_[gpus] = floor;
}

// The fewest GPUs covering every layer with stages of compute <= limit.
long PeriodFloor::fewest_gpus(double limit) {
  constexpr long kNone = std::numeric_limits<long>::max() / 2;
  fewest_.assign(static_cast<std::size_t>(layers_ + 1), kNone);
  fewest_[layers_] = 0;
  reach_.assign(variants_.size(), layers_);
  for (int b = layers_ - 1; b >= 0; --b) {
    for (std::size_t v = 0; v < variants_.size(); ++v) {
      const auto& prefix = compute_[v];
      int& e = reach_[v];  // the longest stage's end falls as b does
      while (e > b && prefix[e] - prefix[b] > limit) --e;
      if (e > b) fewest_[b] = std::min(fewest_[b], fewest_[e] + variants_[v].degree);
    }
  }
  return fewest_[0];
}

}  // namespace oobleck::detail
