// The composition search's lower bounds (composition.cpp): the linear
// relaxation of one pipeline count's problem in its pipeline counts per
// template, and its bisection over the time (relaxed_bound.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipeline_kinds.h"

namespace oobleck::detail {

// The search for one pipeline count: `nodes` pool nodes in exactly `pool`
// pipelines, next to `fixed` pipelines (counts per kind) that are there
// regardless. Pool pipelines use kinds with at most `nodes` nodes.
struct Problem {
  const std::vector<Kind>& kinds;
  const std::vector<int>& fixed;
  int nodes;
  int pool;
  int B;
  std::int64_t* evaluations = nullptr;  // counts relaxed_capacity's (the search's work)

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
[[nodiscard]] double relaxed_capacity(const Problem& problem, double tau);

// Whether the relaxation takes B at all: at the range's end every allowed
// kind runs its most microbatches.
[[nodiscard]] bool relaxed_fits(const Problem& problem);

// A time that the relaxation proves infeasible (so the optimum is larger),
// for a problem where it takes B at all (relaxed_fits): where a bisection
// from just below the earliest first microbatch to the latest last slot,
// to a relative 1e-12, stops.
//
// The relaxation is a step function of the time, below B before some t*
// and at or above it from there, and it changes only at the kinds' slot
// times, so t* is one of them. Each of the bisection's tests is whether
// its midpoint lies below t*. So once few slot times lie between its ends,
// a bisection over those finds t*, and the bisection runs on to its end
// without evaluating the relaxation again. (The relaxation's value, fixed
// + p x the envelope at N / p of integer capacities, is a multiple of one
// over a difference of node counts: far from B (1 - 1e-12) unless at least
// B, so rounding never turns a test.)
//
// The bisection can also stop and resume: its lo only rises, so at every
// step lo is a lower bound on the time it ends with, and the composition
// search orders its pairs by such partial bounds, finishing a bisection
// only where their order needs it. Stopped or not, it takes the same
// steps, so it ends with the same time bit for bit.
class RelaxedBound {
 public:
  // For a problem whose relaxation takes B at all (relaxed_fits).
  explicit RelaxedBound(const Problem& problem);
  // Takes the steps `other` (of another problem, from the same range, not
  // started here yet) took, where this problem's t* lies between other's
  // ends: every one of its midpoints then lies on the same side of both
  // t*s, so this bisection would take the very same steps. Two
  // evaluations instead of other's steps; whether it took them.
  bool follow(const Problem& problem, const RelaxedBound& other);
  // Up to `steps` more steps, each evaluating the relaxation.
  void advance(const Problem& problem, int steps) {
    for (; steps > 0 && !done(); --steps) step(relaxed_capacity(problem, mid()) < need_);
  }
  // Every step left.
  void finish(const Problem& problem);
  [[nodiscard]] bool done() const { return iteration_ >= 100 || !(hi_ - lo_ > 1e-12 * hi_); }
  [[nodiscard]] double lo() const { return lo_; }

 private:
  [[nodiscard]] double mid() const { return lo_ + (hi_ - lo_) / 2; }
  void step(bool below) {
    const double m = mid();
    (below ? lo_ : hi_) = m;
    ++iteration_;
  }
  [[nodiscard]] long long slots_between_ends(const Problem& problem) const;
  // t*: the least slot time in (lo, hi] at which the relaxation takes B
  // (hi takes it, and so does the last slot time at or below hi).
  [[nodiscard]] double least_slot_time(const Problem& problem) const;

  double need_, lo_ = 0, hi_ = 0;
  double start_lo_ = 0, start_hi_ = 0;
  int iteration_ = 0;
};

}  // namespace oobleck::detail
