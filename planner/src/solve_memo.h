// The template search's answers, kept from one search to the next of the
// same programme (solve_memo.cpp).
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
// count. So the answers hold across every M at or above it (instantiation's
// rounds over M), for the same profile and the same stage kinds.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/planner.h"
#include "balanced_layout.h"
#include "template_search.h"

namespace oobleck::detail {

class SolveMemo {
 public:
  // Readies the memo for a search with `cost`: keeps the answers when they
  // came from its programme, drops them otherwise. Whether any were kept.
  bool serve(const CostModel& cost);

  // A solve at `bound` found `found` (sigma and stages) for `nodes` nodes,
  // or nothing; `cost` prices the found layout's period.
  void record(int nodes, double bound, const std::optional<std::pair<double, std::vector<Stage>>>& found,
              const CostModel& cost);

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
  // What the programme depends on: the profile (its costs, memory and
  // links), the stage kinds, and the microbatches a stage may keep in flight.
  struct Programme {
    std::string profile;  // profile_fingerprint
    int tensor_parallel_nodes, in_flight_cap;
    RecomputePolicy recompute;
    friend bool operator==(const Programme&, const Programme&) = default;
  };
  std::optional<Programme> programme_;
  std::map<int, std::vector<Answer>> answers_;  // by node count
};

// What else one search leaves to the next at another M: the value table's
// memory, and the balanced seeds' layer splits (balanced_layout.h).
struct SearchScratch {
  TemplateSearch::Storage table;
  BalancedSplits splits;
};

// build_templates, taking the answers in `memo` where they hold and adding
// this search's: instantiation's rounds over M pass one memo from round to
// round, and one scratch. Probes near the period floors (templates.cpp)
// are made only when the memo had nothing for this programme.
[[nodiscard]] TemplateSet build_templates_remembering(const CostModel& cost, int max_nodes, const Progress& progress,
                                                      const TemplateSet* earlier, SolveMemo& memo,
                                                      SearchScratch* scratch = nullptr);

}  // namespace oobleck::detail
