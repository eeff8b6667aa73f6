// Interleaved templates: each device holds v model chunks (interleaved.cpp
// has the derivation).
#pragma once

#include <optional>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// Replaces `chosen` (the plain template on `nodes` nodes, if any) by the
// fastest interleaved layout of 2..cost.interleave() chunks a device where
// one plays faster at M than it does.
void keep_faster_interleaved(const CostModel& cost, int nodes, std::optional<PipelineTemplate>& chosen);

// Whether every device of an interleaved pipeline (its D x chunks virtual
// stages) fits its memory while running `microbatches` in Megatron's
// interleaved order.
[[nodiscard]] bool interleaved_fits(const CostModel& cost, const std::vector<Stage>& stages, int chunks,
                                    int microbatches);

}  // namespace oobleck::detail
