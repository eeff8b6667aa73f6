// Who is where in a plan: every node's pipeline, its position in it and
// the contiguous layers its stages cover. Ranks follow the plan: pipelines
// in order, nodes in order, then the spare nodes, which hold nothing. Where
// pipelines share a node (pipelines_per_node > 1), the node has one rank,
// at its first pipeline.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::recovery {

struct Seat {
  int pipeline = 0;
  int position = 0;
  int layer_begin = 0, layer_end = 0;  // [begin, end)
};

// One seat per pipeline and node of it, in plan order (rank order, where no
// pipelines share a node). InputError when a node of a pipeline holds no
// stage.
[[nodiscard]] std::vector<Seat> seats_of(const Plan& plan);

// Every node of the plan in rank order: pipelines' nodes, then spares.
[[nodiscard]] std::vector<std::string> ranked_nodes(const Plan& plan);

// How many nodes the plan has, spares included.
[[nodiscard]] int node_count(const Plan& plan);

// The nodes that train (the pipelines' nodes), in rank order.
[[nodiscard]] std::vector<std::string> trainer_nodes(const Plan& plan);

// The layers [begin, end) each pipeline node holds (over all its pipelines,
// where several share it: each of them holds the whole model).
using LayerRange = std::pair<int, int>;
[[nodiscard]] std::map<std::string, LayerRange> node_layers(const Plan& plan);

// "3+2": the node counts of a plan's pipelines.
[[nodiscard]] std::string pipeline_shape(const Plan& plan);

}  // namespace oobleck::recovery
