#include "template_walk.h"

#include <algorithm>
#include <cmath>

#include "balanced_layout.h"

namespace oobleck::detail {

namespace {

// Keeps `stages` as the walk's best where they play faster, and lowers the
// bound the suffixes' price sets.
void keep_if_faster(Walk& w, std::vector<Stage> stages, const CostModel& cost) {
  const double mult = cost.microbatches() - 1;
  const double first = cost.first_microbatch_ms(stages);
  w.best_suffix = std::min(w.best_suffix, first + mult * cost.suffix_bottleneck_ms(stages));
  const double t = first + mult * cost.bottleneck_ms(stages);
  if (t < w.best) {
    w.best = t;
    w.stages = std::move(stages);
  }
}

}  // namespace

// A walk per node count 0..searched (0 never active), each with the balanced
// layout as its best so far.
std::vector<Walk> seeded_walks(const CostModel& cost, int searched, BalancedSplits* splits) {
  std::vector<Walk> walk(searched + 1);
  walk[0].active = false;
  BalancedSplits own(false);  // (where no one keeps them for later searches)
  BalancedSplits& kept = splits ? *splits : own;
  if (splits) splits->serve(cost);
  for (int n = 1; n <= searched; ++n) {
    if (auto seed = balanced_layout(cost, n, kept)) keep_if_faster(walk[n], std::move(*seed), cost);
  }
  return walk;
}

void offer_seed(Walk& w, std::vector<Stage> stages, const CostModel& cost) {
  if (cost.pipeline_fits(stages, cost.microbatches())) keep_if_faster(w, std::move(stages), cost);
}

// Takes a solve's answer for the walk's node count: keeps it when it beats
// the best, then ends the walk or lowers its bound. Whether it goes on.
bool step_down(Walk& w, std::optional<std::pair<double, std::vector<Stage>>> found, const CostModel& cost,
               double mu_floor) {
  if (!found) {
    w.active = false;
    return false;
  }
  const double mult = cost.microbatches() - 1;
  auto& [sigma, stages] = *found;
  const double mu = cost.suffix_bottleneck_ms(stages);
  const double first = cost.first_microbatch_ms(stages);
  w.best_suffix = std::min(w.best_suffix, first + mult * mu);
  const double t = first + mult * cost.bottleneck_ms(stages);
  if (t < w.best) {
    w.best = t;
    w.stages = std::move(stages);
  }
  // Templates not yet seen have mu < this solution's mu, so they obeyed
  // this solve's bound and have sigma >= this sigma: to beat the best they
  // need mu < (best - sigma) / (M - 1), and mu >= mu_floor always. (With
  // the suffixes' price: the walk visits what the exact search for it does.)
  const double slack = 1e-12 * std::fabs(w.best_suffix);
  if (mult == 0 || sigma + mult * mu_floor >= w.best_suffix - slack) {
    w.active = false;
    return false;
  }
  // The programme sums the answer's stages in another order than mu does,
  // so its own period may lie a few ulps under mu or under the bound: a
  // next bound one ulp lower would find the same answer again, solve after
  // solve. Going a relative 1e-12 lower skips only layouts with mu within
  // that of this answer's and sigma no less, which cannot beat it by more
  // than the slack above.
  w.highest_bound = std::min(mu, w.bound) * (1 - 1e-12);
  w.bound = std::min(w.highest_bound, (w.best_suffix - sigma) / mult);
  return true;
}

}  // namespace oobleck::detail
