// The linear relaxation and its resumable bisection (relaxed_bound.h).
#include "relaxed_bound.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace oobleck::detail {
namespace {

// Upper concave envelope of points sorted by x, at x; -inf outside their range.
[[nodiscard]] double envelope_at(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.empty() || x < points.front().first || x > points.back().first) return -kInfinity;
  thread_local std::vector<std::pair<double, double>> hull;  // (kept between the bisection's many calls)
  hull.clear();
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

// Where the relaxed bound's bisection starts: from just below the earliest
// first microbatch to the latest last slot; nullopt when the problem allows
// no kind.
struct RelaxedRange {
  double lo, hi;
};
[[nodiscard]] std::optional<RelaxedRange> relaxed_range(const Problem& problem) {
  double min_first = kInfinity, max_time = 0;
  for (const auto& k : problem.kinds) {
    if (k.limit < 1) continue;  // not allowed
    min_first = std::min(min_first, k.first);
    max_time = std::max(max_time, slot_time(k, k.limit));
  }
  if (min_first == kInfinity) return std::nullopt;
  return RelaxedRange{std::nextafter(min_first, -kInfinity), max_time};
}

[[nodiscard]] double relaxed_need(const Problem& problem) { return problem.B * (1 - 1e-12); }

}  // namespace

// Linear relaxation: the most microbatches the pool could take within tau
// when its pipeline counts may be fractional, plus the fixed pipelines.
[[nodiscard]] double relaxed_capacity(const Problem& problem, double tau) {
  if (problem.evaluations) ++*problem.evaluations;
  const int fixed = problem.fixed_capacity(tau);
  if (fixed < 0) return -kInfinity;
  if (problem.pool == 0) return problem.nodes == 0 ? fixed : -kInfinity;
  thread_local std::vector<std::pair<double, double>> points;  // (as the hull's)
  points.clear();
  for (std::size_t i = 0; i < problem.kinds.size(); ++i) {
    const int c = problem.pool_capacity_cap(i, tau);
    if (c > 0) points.emplace_back(problem.kinds[i].nodes, c);
  }
  return fixed + problem.pool * envelope_at(points, static_cast<double>(problem.nodes) / problem.pool);
}

// Whether the relaxation takes B at all: at the range's end every allowed
// kind runs its most microbatches.
[[nodiscard]] bool relaxed_fits(const Problem& problem) {
  const auto range = relaxed_range(problem);
  return range && relaxed_capacity(problem, range->hi) >= relaxed_need(problem);
}

RelaxedBound::RelaxedBound(const Problem& problem) : need_(relaxed_need(problem)) {
  const RelaxedRange range = *relaxed_range(problem);
  lo_ = start_lo_ = range.lo;
  hi_ = start_hi_ = range.hi;
}

bool RelaxedBound::follow(const Problem& problem, const RelaxedBound& other) {
  if (iteration_ > 0 || other.iteration_ == 0 || other.start_lo_ != start_lo_ || other.start_hi_ != start_hi_ ||
      other.need_ != need_) {
    return false;
  }
  if (!(relaxed_capacity(problem, other.lo_) < need_) || relaxed_capacity(problem, other.hi_) < need_) return false;
  lo_ = other.lo_;
  hi_ = other.hi_;
  iteration_ = other.iteration_;
  return true;
}

void RelaxedBound::finish(const Problem& problem) {
  constexpr long long kFewSlots = 32;
  while (!done() && slots_between_ends(problem) > kFewSlots) step(relaxed_capacity(problem, mid()) < need_);
  if (done()) return;
  const double least = least_slot_time(problem);
  while (!done()) step(mid() < least);
}

long long RelaxedBound::slots_between_ends(const Problem& problem) const {
  long long count = 0;
  for (const auto& k : problem.kinds) count += capacity(k, hi_) - capacity(k, lo_);
  return count;
}

double RelaxedBound::least_slot_time(const Problem& problem) const {
  thread_local std::vector<double> slots;  // (kept between calls)
  slots.clear();
  for (const auto& k : problem.kinds) {
    for (int q = capacity(k, lo_) + 1; q <= capacity(k, hi_); ++q) slots.push_back(slot_time(k, q));
  }
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  std::size_t first = 0, last = slots.size();
  while (first < last) {
    const std::size_t mid = first + (last - first) / 2;
    if (relaxed_capacity(problem, slots[mid]) < need_) {
      first = mid + 1;
    } else {
      last = mid;
    }
  }
  return first < slots.size() ? slots[first] : hi_;
}

}  // namespace oobleck::detail
