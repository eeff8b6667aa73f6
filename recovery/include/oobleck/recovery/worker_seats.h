// A worker per GPU. A template lays a pipeline's stages over its nodes; a
// node's stages take its GPUs in stage order, a stage of tensor-parallel
// degree t the next t of them, and the GPU at offset k of a stage holds
// shard k of each of the stage's layers: the interval [k/t, (k+1)/t) of
// every split parameter (the model says which parameters split, and how).
//
// Ranks: node rank x G + GPU, where node ranks follow recovery::ranked_nodes
// (pipelines' nodes, then spares) and G is gpus_per_node. The trainers'
// ranks come first, as nodes do.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::recovery {

struct WorkerSeat {
  int pipeline = 0;
  int stage = 0, stages = 1;           // the stage's index in its pipeline, and their count
  int node_position = 0, gpu = 0;      // its node in the pipeline, its GPU on the node
  int layer_begin = 0, layer_end = 0;  // [begin, end)
  int degree = 1, shard = 0;           // tensor parallel: the group's size, this GPU's place in it
  int first_rank = 0;                  // of the stage's group (its shard 0)
  [[nodiscard]] bool holds(int layer) const { return layer_begin <= layer && layer < layer_end; }
};

// G seats per node, in rank order; where pipelines share a node, they take
// its GPUs in plan order, G / pipelines_per_node each. InputError, naming
// the pipeline and node, when a node's stages do not cover its GPUs (its
// share of them) exactly.
[[nodiscard]] std::vector<WorkerSeat> worker_seats(const Plan& plan, int gpus_per_node);

// Whether shard a of degree da and shard b of degree db share some of the layer.
[[nodiscard]] bool shards_overlap(int degree_a, int shard_a, int degree_b, int shard_b);

// A layer's split parameters cut into `count` equal pieces, count = the
// least common multiple of its holders' degrees, so that every holder's
// shard is a whole number of pieces. Each piece's gradient is summed over
// `holders[j]`: one worker of each stage holding the layer (increasing
// ranks). `everyone`: every worker holding the layer, for the parameters
// that do not split (each stage's shard 0 gives its gradient, the others
// zeros, so that each replica counts once).
struct LayerPieces {
  int count = 1;
  std::vector<std::vector<int>> holders;
  std::vector<int> everyone;
};
[[nodiscard]] LayerPieces layer_pieces(const std::vector<WorkerSeat>& seats, int layer);

// One shard of a layer's state, sent from rank `from` (which holds it at
// from_degree / from_shard) to rank `to`, ranks of the next generation's
// world. from == to: the worker re-cuts what it holds itself.
struct ShardCopy {
  int layer = 0;
  int from = 0, to = 0;
  int from_degree = 1, from_shard = 0;
  friend bool operator==(const ShardCopy&, const ShardCopy&) = default;
};

// The copies that give every trainer of `next` its shards after the
// planner's node-to-node `transfers`: a layer a node receives comes from
// the sending node's holders, a layer it kept from its own; a worker that
// already holds its shard copies nothing, and otherwise receives every
// source shard that overlaps its own (one, when one matches exactly).
[[nodiscard]] std::vector<ShardCopy> shard_copies(const Plan& base, const Plan& next,
                                                  const std::vector<Transfer>& transfers, int gpus_per_node);

// What each (node, GPU) of `plan` holds: its seat, by node name and GPU.
[[nodiscard]] std::map<std::pair<std::string, int>, WorkerSeat> seats_by_node(const Plan& plan, int gpus_per_node);

}  // namespace oobleck::recovery
