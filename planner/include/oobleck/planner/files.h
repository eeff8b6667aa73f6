// The planner's files: hostfiles, templates and plans as JSON, and back.
// Part of the planner's vocabulary: include "oobleck/planner.h".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress
#include "oobleck/planner/plan.h"

namespace oobleck {

// `host slots=G` per line, '#' comments; slots must equal gpus_per_node.
[[nodiscard]] std::vector<std::string> parse_hostfile(std::string_view text, const std::string& origin,
                                                      int gpus_per_node);

[[nodiscard]] std::string templates_to_json(const TemplateSet& templates, const Profile& profile);
[[nodiscard]] std::string plan_to_json(const Plan& plan, const TemplateSet& templates,
                                       const Profile& profile);
// plan_to_json of the chosen size's plan, with "microbatch_size" and
// "microbatch_sizes": [{microbatch_size, chosen, global_microbatches (when
// the size divides the batch), iteration_ms or problem}].
[[nodiscard]] std::string sized_plan_to_json(const SizedClusterPlan& result, const Profile& chosen_profile);
// Checks the plan against the profile's layer count and GPUs per node.
[[nodiscard]] Plan parse_plan(std::string_view json_text, const std::string& origin,
                              const Profile& profile);

}  // namespace oobleck
