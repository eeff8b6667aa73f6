// Shared by instantiation and reconfiguration.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "composition.h"

namespace oobleck::detail {

// Node names must be non-empty, free of commas and white space, and unique.
void check_node_names(const std::vector<std::string>& names, std::string_view what);

// A plan whose pipeline i runs on pipeline_nodes[i] (in template node order).
[[nodiscard]] Plan plan_from(const CostModel& cost, const TemplateSet& templates, const Composition& composition,
                             const std::vector<std::vector<std::string>>& pipeline_nodes,
                             std::vector<std::string> spare, int fault_tolerance);

// Pipelines sharing nodes (shared_nodes.cpp) with pipelines on at least
// `min_nodes` nodes.
[[nodiscard]] Plan shared_node_plan(const CostModel& cost, const PipelineTemplate& shared,
                                    const std::vector<std::string>& nodes, int min_nodes, int fault_tolerance,
                                    int global_microbatches);

// "2, 3, 4, ..." for messages.
[[nodiscard]] std::string describe_sizes(const TemplateSet& templates);

}  // namespace oobleck::detail
