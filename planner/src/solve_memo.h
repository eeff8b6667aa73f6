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
// rounds over M), for the same profile and the same stage kinds. Below it,
// an answer holds for a cap min(M, layers) down to where its solve found
// the cap changing none of its windows (TemplateSearch::
// same_down_to_in_flight): where memory did not bind, or bound alike.
// Such answers stand in for a solve at their bound only (find_at): a walk
// served at another bound of its range would step down another way.
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
  // came from its programme at some cap on the microbatches in flight,
  // drops them otherwise. Whether any were kept at this very cap.
  bool serve(const CostModel& cost);

  // A solve at `bound` found `found` (sigma and stages) for `nodes` nodes,
  // or nothing; `cost` prices the found layout's period. The solve was the
  // same for caps down to `same_down_to_in_flight`.
  void record(int nodes, double bound, const std::optional<std::pair<double, std::vector<Stage>>>& found,
              const CostModel& cost, int same_down_to_in_flight);

  struct Hit {
    double bound;  // where in the walk's range the answer holds
    std::optional<std::pair<double, std::vector<Stage>>> found;
  };
  // An answer solved at this cap that holds at some bound in [lowest,
  // highest] for `nodes` nodes: of those that do, the one at the highest
  // bound.
  [[nodiscard]] std::optional<Hit> find(int nodes, double lowest, double highest) const;
  // An answer solved at this cap or a higher one that holds at `bound`:
  // what a solve at `bound` would find, bit for bit.
  [[nodiscard]] std::optional<Hit> find_at(int nodes, double bound) const;

  [[nodiscard]] std::size_t size() const;

 private:
  struct Answer {
    double bound;
    double mu;  // the found layout's period; unused without one
    std::optional<std::pair<double, std::vector<Stage>>> found;
    int lowest_cap, highest_cap;  // the caps on microbatches in flight it holds for
  };
  // What the programme depends on but the cap: the profile (its costs,
  // memory and links) and the stage kinds.
  struct Programme {
    std::string profile;  // profile_fingerprint
    int tensor_parallel_nodes;
    RecomputePolicy recompute;
    friend bool operator==(const Programme&, const Programme&) = default;
  };
  // find(), among the answers solved at cap `solved_at` (0: any).
  [[nodiscard]] std::optional<Hit> find_among(int nodes, double lowest, double highest, int solved_at) const;
  std::optional<Programme> programme_;
  int cap_ = 0;  // min(M, layers) of the search served now
  bool answered_at_cap_ = false;
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
