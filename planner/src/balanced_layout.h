// A quick, balanced template layout (balanced_layout.cpp).
#pragma once

#include <optional>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// j stages of G/j GPUs on every one of `nodes` nodes (or one on every k
// nodes), layers split evenly by compute within memory; the best such
// layout over j, or where none fills the nodes with at most a stage a layer,
// the fewest stages over k nodes beside one a node; nullopt when none fits.
[[nodiscard]] std::optional<std::vector<Stage>> balanced_layout(const CostModel& cost, int nodes);

}  // namespace oobleck::detail
