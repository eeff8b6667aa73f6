// The walk down the Pareto front of (sigma, mu) that the template search
// (templates.cpp) takes for each node count: where it starts, and how each
// solve's answer lowers its bound or ends it.
#pragma once

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "oobleck/planner.h"
#include "balanced_layout.h"

namespace oobleck::detail {

inline constexpr double kNoBound = std::numeric_limits<double>::infinity();

// One node count's walk down the Pareto front of (sigma, mu).
struct Walk {
  bool active = true;
  // The next solve's bound on the steady period (every stage strictly
  // below it) may be anything from `bound` to `highest_bound`: the front's
  // points in between cannot beat the best, so a solve there returns the
  // same useful points as one at `bound`. Walks whose ranges meet share a
  // solve.
  double bound = kNoBound;
  double highest_bound = kNoBound;
  // The least T(M) seen with the suffixes' period, which steers the walk,
  // and the layout seen with the least full price, which it returns.
  double best_suffix = kNoBound;
  double best = kNoBound;
  std::vector<Stage> stages;
};

// A walk per node count 0..searched (0 never active), each with the balanced
// layout as its best so far (its layer splits kept in `splits`, if given).
std::vector<Walk> seeded_walks(const CostModel& cost, int searched, BalancedSplits* splits = nullptr);

// Offers the walk another starting layout on its node count (a template
// searched at another M): kept as its best where it fits in memory at this
// M and plays faster than the best so far. A lower best ends the walk
// sooner; the walk stays exact for the suffixes' period.
void offer_seed(Walk& w, std::vector<Stage> stages, const CostModel& cost);

// Takes the answer of a solve at `w.bound` for the walk's node count: keeps
// it when it beats the best, then ends the walk or lowers its bounds.
// Whether it goes on.
bool step_down(Walk& w, std::optional<std::pair<double, std::vector<Stage>>> found, const CostModel& cost,
               double mu_floor);

}  // namespace oobleck::detail
