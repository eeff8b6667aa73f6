// A quick, balanced template layout (balanced_layout.cpp).
#pragma once

#include <optional>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// j stages of G/j GPUs on every one of `nodes` nodes, layers split evenly by
// compute within memory; the best such layout over j, nullopt when none fits.
[[nodiscard]] std::optional<std::vector<Stage>> balanced_layout(const CostModel& cost, int nodes);

}  // namespace oobleck::detail
