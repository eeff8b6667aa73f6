// Pipelines that share nodes.
//
// A model that fits on u < G GPUs can run as r = G / u pipelines on every
// node instead of spreading each pipeline over whole nodes: each replica
// then keeps its stages within u GPUs (fewer stages, so a shorter 1F1B
// fill and drain, or a lower tensor-parallel degree), and the gradient
// all-reduce among replicas runs first inside each node, on its own
// links, then across the nodes with each of the r shards on its own
// network card (CostModel::gradient_allreduce_ms).
//
// All pipelines are of one template, the best on u GPUs
// (build_shared_node_template), so the split that minimises the slowest
// pipeline is the even one: q = floor(B / P) microbatches each, and B mod
// P of them one more (split_microbatches gives it, within the template's
// memory limit). The plan is priced as every plan is: its pipelines
// played, then the synchronised iteration (batch_split.cpp).
//
// A node's loss takes all r of its pipelines, so "every layer survives f
// losses" needs f+1 nodes holding pipelines, not f+1 pipelines. A node is
// used only when each of its r pipelines gets a microbatch: min(N, floor(B
// / r)) nodes, the rest spares. More nodes never slow the even split down
// (fewer microbatches each), and the all-reduce among more nodes is what
// using them costs, as for whole-node pipelines, which also use every node
// they can.
//
// Plans mixing shared nodes with whole-node pipelines are not searched.
#include <stdexcept>

#include "composition.h"
#include "plan_building.h"

namespace oobleck {
namespace detail {

Plan shared_node_plan(const CostModel& cost, const PipelineTemplate& shared, const std::vector<std::string>& nodes,
                      int min_nodes, int fault_tolerance, int global_microbatches) {
  const int per_node = cost.gpus_per_node();
  if (shared.nodes != 1 || shared.gpus < 1 || per_node % shared.gpus != 0 ||
      cost.pipelines_per_node() != per_node / shared.gpus || shared.gpus == per_node) {
    throw std::invalid_argument("shared-node plan: the template must hold a divisor of the node's GPUs, below all, "
                                "and the cost model that many pipelines per node");
  }
  const int r = cost.pipelines_per_node();
  const int count = static_cast<int>(nodes.size());
  const int used = std::min(count, global_microbatches / r);
  if (used < min_nodes) {
    std::string why = count < min_nodes
                          ? std::to_string(count) + " nodes cannot hold pipelines on f+1 = " +
                                std::to_string(min_nodes) + " nodes (a node's loss takes all " + std::to_string(r) +
                                " of its pipelines)"
                          : std::to_string(global_microbatches) + " microbatches give " + std::to_string(r) +
                                " pipelines a node a microbatch each on only " + std::to_string(used) +
                                " nodes, fewer than f+1 = " + std::to_string(min_nodes);
    throw NoPlanError(why);
  }
  TemplateSet templates;
  templates.microbatches = shared.microbatches;
  templates.max_nodes = 1;
  templates.templates = {shared};
  const Composition composition =
      evaluate_composition(cost, templates, std::vector<int>(static_cast<std::size_t>(used) * r, 1),
                           global_microbatches);
  if (composition.microbatches.empty()) {
    throw NoPlanError(std::to_string(used * r) + " pipelines on " + std::to_string(shared.gpus) +
                      " GPUs each cannot take " + std::to_string(global_microbatches) +
                      " microbatches within their memory limit of " + std::to_string(shared.max_microbatches));
  }
  std::vector<std::vector<std::string>> pipeline_nodes;
  for (int n = 0; n < used; ++n) {
    for (int k = 0; k < r; ++k) pipeline_nodes.push_back({nodes[static_cast<std::size_t>(n)]});
  }
  Plan plan = plan_from(cost, templates, composition, pipeline_nodes,
                        std::vector<std::string>(nodes.begin() + used, nodes.end()), fault_tolerance);
  plan.pipelines_per_node = r;
  return plan;
}

}  // namespace detail

Plan instantiate_sharing_nodes(const CostModel& cost, const PipelineTemplate& shared,
                               const std::vector<std::string>& nodes, int fault_tolerance, int global_microbatches) {
  detail::check_node_names(nodes, "nodes");
  if (nodes.empty()) throw InputError("nodes: expected at least one node");
  if (fault_tolerance < 0) throw InputError("fault-tolerance: expected 0 or more, got " + std::to_string(fault_tolerance));
  if (global_microbatches < 1) throw InputError("global-microbatches: expected at least 1");
  return detail::shared_node_plan(cost, shared, nodes, fault_tolerance + 1, fault_tolerance, global_microbatches);
}

}  // namespace oobleck
