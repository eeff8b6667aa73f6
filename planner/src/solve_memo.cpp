#include "solve_memo.h"

#include <algorithm>

namespace oobleck::detail {

bool SolveMemo::serve(const CostModel& cost) {
  Programme programme{profile_fingerprint(cost.profile()), cost.tensor_parallel_nodes(), cost.recompute_policy()};
  const int cap = std::min(cost.microbatches(), cost.layers());
  if (programme_ != programme) {
    programme_ = std::move(programme);
    answers_.clear();
    answered_at_cap_ = false;
  } else if (cap != cap_) {
    answered_at_cap_ = false;
  }
  cap_ = cap;
  return answered_at_cap_;
}

void SolveMemo::record(int nodes, double bound, const std::optional<std::pair<double, std::vector<Stage>>>& found,
                       const CostModel& cost, int same_down_to_in_flight) {
  answers_[nodes].push_back(
      {bound, found ? cost.suffix_bottleneck_ms(found->second) : 0.0, found, same_down_to_in_flight, cap_});
  answered_at_cap_ = true;
}

std::optional<SolveMemo::Hit> SolveMemo::find(int nodes, double lowest, double highest) const {
  return find_among(nodes, lowest, highest, cap_);
}

std::optional<SolveMemo::Hit> SolveMemo::find_at(int nodes, double bound) const {
  return find_among(nodes, bound, bound, 0);
}

std::optional<SolveMemo::Hit> SolveMemo::find_among(int nodes, double lowest, double highest, int solved_at) const {
  const auto it = answers_.find(nodes);
  if (it == answers_.end()) return std::nullopt;
  const Answer* best = nullptr;
  double best_bound = 0;
  for (const Answer& a : it->second) {
    if (cap_ < a.lowest_cap || cap_ > a.highest_cap || (solved_at != 0 && a.highest_cap != solved_at)) continue;
    // The answer holds for b in (mu, a.bound]; the margin keeps it clear of
    // the few ulps by which the programme's own sums may differ from mu.
    const double top = std::min(a.bound, highest);
    if (top < lowest) continue;
    if (a.found && !(a.mu * (1 + 1e-9) < top)) continue;
    if (!best || top > best_bound) {
      best = &a;
      best_bound = top;
    }
  }
  if (!best) return std::nullopt;
  return Hit{best_bound, best->found};
}

std::size_t SolveMemo::size() const {
  std::size_t count = 0;
  for (const auto& [nodes, answers] : answers_) count += answers.size();
  return count;
}

}  // namespace oobleck::detail
