// Polishing a template under 1F1B's full period (layout_moves.cpp).
#pragma once

#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// Makes single moves while one lowers T(M) = first microbatch + (M - 1) x
// the full steady period and every stage still fits, until none does:
// a stage boundary moved by one layer, or two neighbouring stages'
// degrees (and recomputation) exchanged where both are on whole nodes, or
// both on the same node.
void move_to_local_optimum(const CostModel& cost, std::vector<Stage>& stages);

}  // namespace oobleck::detail
