// Interleaved templates: each device holds v model chunks (interleaved.cpp
// has the derivation).
#pragma once

#include <optional>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// The fastest interleaved layout on `nodes` nodes with `chunks` chunks a
// device, played at the cost model's M; nullopt when none fits or there
// are too few layers (each of the D x chunks virtual stages needs one).
[[nodiscard]] std::optional<PipelineTemplate> interleaved_template(const CostModel& cost, int nodes, int chunks);

// Whether every device of an interleaved pipeline (its D x chunks virtual
// stages) fits its memory while running `microbatches` in Megatron's
// interleaved order.
[[nodiscard]] bool interleaved_fits(const CostModel& cost, const std::vector<Stage>& stages, int chunks,
                                    int microbatches);

}  // namespace oobleck::detail
