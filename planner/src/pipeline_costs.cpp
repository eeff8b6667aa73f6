// A pipeline's costs from its stages': the first microbatch's time, 1F1B's
// steady period (steady_period.h), T(M) = first + (M - 1) x period, which
// the template and composition searches weigh, and whether it fits memory
// with M microbatches. A plan's pipelines are priced as they play
// (played_pipeline.h).
#include <algorithm>
#include <utility>
#include <vector>

#include "oobleck/planner.h"
#include "steady_period.h"

namespace oobleck {

Milliseconds CostModel::first_microbatch_ms(const std::vector<Stage>& stages) const {
  double total = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    total += stage_compute_ms(stages[s].layer_begin, stages[s].layer_end, stages[s].gpus, stages[s].recompute);
    if (s + 1 < stages.size()) {
      total += 2 * transfer_ms(stages[s].layer_end, stages[s].node == stages[s + 1].node, stages[s].gpus);
    }
  }
  return total;
}

namespace {
// Each stage's F + B, and each boundary's transfer one way.
std::pair<std::vector<Milliseconds>, std::vector<Milliseconds>> stage_costs(const CostModel& cost,
                                                                            const std::vector<Stage>& stages) {
  std::vector<Milliseconds> compute, transfers;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    compute.push_back(cost.stage_compute_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute));
    if (s + 1 < stages.size()) {
      transfers.push_back(cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus));
    }
  }
  return {std::move(compute), std::move(transfers)};
}
}  // namespace

Milliseconds CostModel::bottleneck_ms(const std::vector<Stage>& stages) const {
  const auto [compute, transfers] = stage_costs(*this, stages);
  return detail::steady_period_ms(compute, transfers);
}

Milliseconds CostModel::suffix_bottleneck_ms(const std::vector<Stage>& stages) const {
  const auto [compute, transfers] = stage_costs(*this, stages);
  return detail::suffix_period_ms(compute, transfers);
}

Milliseconds CostModel::pipeline_ms(const std::vector<Stage>& stages, int microbatches) const {
  return first_microbatch_ms(stages) + (microbatches - 1) * bottleneck_ms(stages);
}

bool CostModel::pipeline_fits(const std::vector<Stage>& stages, int microbatches) const {
  const int count = static_cast<int>(stages.size());
  for (int s = 0; s < count; ++s) {
    const int in_flight = std::min(microbatches, count - s);
    if (!stage_fits(stages[s].layer_begin, stages[s].layer_end, stages[s].gpus, in_flight, stages[s].recompute))
      return false;
  }
  return true;
}

}  // namespace oobleck
