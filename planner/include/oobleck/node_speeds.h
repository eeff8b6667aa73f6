// Plans on nodes that are not all as fast as the profile: speed factors by
// node, a plan priced, re-split and placed at them (planner.h includes this
// header; node_speeds.cpp has the derivations).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck {

// NodeSpeeds (planner.h): speed factors by node name; node_speeds.cpp has
// the derivations.
inline constexpr double kMinNodeSpeed = 0.01, kMaxNodeSpeed = 100;

// InputError (prefixed by `what`) for a node not among `nodes` or a factor
// outside [kMinNodeSpeed, kMaxNodeSpeed].
void check_node_speeds(const NodeSpeeds& speeds, const std::vector<std::string>& nodes, std::string_view what);

// InputError unless every pipeline of `plan` is a plain one on whole nodes
// (neither interleaved nor sharing a node): what plans at node speeds are.
void check_plain_pipelines(const Plan& plan);

// T(m) = first + (m - 1) x period of a pipeline whose stages compute at
// their nodes' speeds: what the split weighs (a plan's pipelines are priced
// as they play, planner/src/played_pipeline.h).
[[nodiscard]] Milliseconds pipeline_ms_at_speeds(const CostModel& cost, const Pipeline& pipeline,
                                                 const NodeSpeeds& speeds, int microbatches);

// `plan` on nodes of these speeds: within each pipeline the slowest nodes
// take the lightest node positions of its template (exact with one stage
// per node), and the global batch is re-split among the pipelines, exactly,
// to minimise the slowest one's time at those speeds plus its own
// synchronisation tail plus its slowest optimizer step at those speeds,
// where the cost model prices optimizer steps. The iteration is then
// priced as the simulator plays it: the synchronised iteration
// (synced_iteration.h) at those speeds, each layer's all-reduce after its
// slowest holder, each stage's optimizer step after its all-reduces (the
// plan's sync_ms counts these steps too). The templates, and which nodes form each pipeline, stay
// as given. With every factor 1 the iteration time is the plan's own.
// Throws NoPlanError when no split fits memory (speeds change no memory,
// so only for a plan that did not fit).
[[nodiscard]] Plan apply_node_speeds(const CostModel& cost, Plan plan, const NodeSpeeds& speeds);
// The split alone: `plan`'s nodes stay where they are and the global batch
// is re-split as apply_node_speeds splits it (exact min-max). A re-split
// moves no state: only which pipeline trains which microbatch changes.
[[nodiscard]] Plan split_at_speeds(const CostModel& cost, Plan plan, const NodeSpeeds& speeds);
// What instantiate plans on `nodes`, chosen with their speeds in view: the
// templates the pipelines get, which pipeline each slow node joins and
// where in it, the split, and the spares (the slowest nodes, when not every
// node can be used). Exact (the fastest iteration at these speeds over every
// composition on the nodes instantiate uses, every assignment of nodes and
// every split) with one stage per node position, on up to 64 nodes with up
// to 8 not at speed 1 and at most 2,000 compositions; beyond,
// instantiate's composition, and the slow nodes placed one at a time
// (instantiate_at_speeds.cpp). Throws as instantiate does.
[[nodiscard]] Plan instantiate_at_speeds(const CostModel& cost, const TemplateSet& templates,
                                         const std::vector<std::string>& nodes, int fault_tolerance,
                                         int global_microbatches, const NodeSpeeds& speeds);
// `plan`'s iteration time when its nodes compute at these speeds: the
// synchronised iteration of its pipelines, each ending its passes at its
// T(m) at its nodes' speeds, each stage stepping after its all-reduces at
// its node's speed (where optimizer steps are priced). With every factor 1,
// the plan's own.
[[nodiscard]] Milliseconds iteration_ms_at_speeds(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds);

}  // namespace oobleck
