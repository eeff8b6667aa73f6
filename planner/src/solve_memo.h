// The template search's earlier answers, kept for later searches of the
// same model at another M (solve_memo.cpp).
//
// A solve at bound K finds, for n nodes, the least sigma among the layouts
// whose every term (a stage's compute, a transfer, a suffix's round trip)
// lies under K. That layout's own period mu lies under K, so it is also the
// least sigma under any bound b in (mu, K]: the layouts under b are a subset
// that still holds it. No layout under K means none under any b <= K. A walk
// whose range of bounds meets such an interval takes the answer instead of a
// solve, and goes on exactly as a solve there would have let it.
//
// The programme depends on M only through memory: a suffix of m stages
// keeps min(M, m) microbatches in flight, and m never exceeds the layer
// count. So the answers hold for every M at or above it, or for the same M,
// with the cost model otherwise the same (build_templates' `earlier`).
#pragma once

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

class SolveMemo {
 public:
  explicit SolveMemo(const CostModel& cost);

  // Whether `earlier`'s answers hold for this memo's programme.
  [[nodiscard]] bool same_programme(const SolveMemo& earlier) const;
  // Takes `earlier`'s answers (same_programme must hold).
  void take(const SolveMemo& earlier) { answers_ = earlier.answers_; }

  // A solve at `bound` found `found` (sigma and stages) for `nodes` nodes,
  // or nothing. `mu`: the found layout's period as the cost model prices it.
  void record(int nodes, double bound, const std::optional<std::pair<double, std::vector<Stage>>>& found,
              double mu);

  struct Hit {
    double bound;  // where in the walk's range the answer holds
    std::optional<std::pair<double, std::vector<Stage>>> found;
  };
  // An answer that holds at some bound in [lowest, highest] for `nodes`
  // nodes: of those that do, the one at the highest bound.
  [[nodiscard]] std::optional<Hit> find(int nodes, double lowest, double highest) const;

  [[nodiscard]] std::size_t size() const;

 private:
  struct Answer {
    double bound;
    double mu;  // the found layout's period; unused without one
    std::optional<std::pair<double, std::vector<Stage>>> found;
  };
  // What the programme depends on besides the profile (the same model, by
  // build_templates' contract).
  struct Programme {
    int layers, gpus_per_node, tensor_parallel_nodes, in_flight_cap;
    RecomputePolicy recompute;
    friend bool operator==(const Programme&, const Programme&) = default;
  };
  Programme programme_;
  std::map<int, std::vector<Answer>> answers_;  // by node count
};

}  // namespace oobleck::detail
