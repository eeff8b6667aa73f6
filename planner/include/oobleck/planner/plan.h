// Plans: pipelines instantiated from templates on named nodes, and the batch split among them.
// Part of the planner's vocabulary: include "oobleck/planner.h".
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress
#include "oobleck/planner/templates.h"

namespace oobleck {

struct Pipeline {
  int template_nodes = 0;
  std::vector<std::string> nodes;
  int microbatches = 0;
  Milliseconds iteration_ms = 0;  // T(microbatches) of its own stages
  std::vector<Stage> stages;
  // Model chunks a device holds (interleaved 1F1B; 1: none): `stages` are
  // then its S = p v virtual stages in model order, virtual stage j on the
  // device of stage j mod p (same node, GPUs and degree).
  int interleave = 1;
};

struct Plan {
  RecomputePolicy recompute = RecomputePolicy::none;  // what its templates could choose
  GradientSync gradient_sync = GradientSync::per_layer;  // what its iteration time assumes
  double gradient_bucket_bytes = kDefaultGradientBucketBytes;  // with GradientSync::buckets
  int tensor_parallel_nodes = 1;  // the most nodes its templates' stages could span
  // 1: every pipeline on nodes of its own. r > 1: every node holds r
  // pipelines, each on G / r of its GPUs (the k-th pipeline naming a node
  // on GPUs [k G / r, (k + 1) G / r)), all of one template
  // (instantiate_sharing_nodes).
  int pipelines_per_node = 1;
  // The model chunks a device could hold in its templates (CostModel::
  // set_interleave; 1: none); each pipeline records its own.
  int interleave = 1;
  int fault_tolerance = 0;
  int global_microbatches = 0;
  int template_microbatches = 0;
  Milliseconds iteration_ms = 0;  // slowest pipeline plus gradient synchronisation and optimizer steps
  Milliseconds pipelines_ms = 0;  // slowest pipeline
  Milliseconds sync_ms = 0;       // the rest: iteration_ms - pipelines_ms
  std::vector<Pipeline> pipelines;
  std::vector<std::string> spare_nodes;  // nodes no template combination could use
  std::string profile_fingerprint;       // of the profile it was made from
  // The composition search's evaluations of its linear relaxations and
  // feasibility tests for this plan (work, for the benchmarks; not part of
  // the plan's file).
  std::int64_t composition_steps = 0;
};

// Uses all nodes in at least f+1 pipelines (fewer nodes only when no
// combination of templates adds up to all of them) and splits B microbatches.
[[nodiscard]] Plan instantiate(const CostModel& cost, const TemplateSet& templates,
                               const std::vector<std::string>& nodes, int fault_tolerance,
                               int global_microbatches);

// Pipelines that share nodes: every node used holds r = G / shared.gpus
// pipelines of the template `shared` (build_shared_node_template, on a
// CostModel with set_pipelines_per_node(r); std::invalid_argument
// otherwise), and the batch is split evenly among them. A node's loss takes
// its r pipelines, so the f+1 condition is on nodes: at least f+1 of them
// hold pipelines. It uses as many nodes as can give each of their
// pipelines a microbatch, the rest are spares; NoPlanError when fewer than
// f+1 can, or when the split does not fit the template's memory limit.
[[nodiscard]] Plan instantiate_sharing_nodes(const CostModel& cost, const PipelineTemplate& shared,
                                             const std::vector<std::string>& nodes, int fault_tolerance,
                                             int global_microbatches);

// node0 .. node{count-1}: names for a cluster given by its size alone.
[[nodiscard]] std::vector<std::string> numbered_nodes(int count);

// Nodes a plan names: its pipelines' and the spare ones.
[[nodiscard]] int plan_node_count(const Plan& plan);

// The template sizes (node counts) a plan's pipelines use.
[[nodiscard]] std::set<int> template_sizes_used(const Plan& plan);

// Pipelines alike in template size and microbatches: one row of a large
// plan's summary.
struct PipelineGroup {
  int template_nodes = 0;
  int microbatches = 0;
  int count = 0;
  Milliseconds iteration_ms = 0;  // of the group's last pipeline in plan order
};

// By decreasing template size, then decreasing microbatches.
[[nodiscard]] std::vector<PipelineGroup> group_pipelines(const Plan& plan);

struct ClusterPlan {
  TemplateSet templates;
  Plan plan;
  // Every template search the M search ran, the ones it discarded included
  // (work, for the benchmarks).
  int template_searches = 0;
  std::int64_t template_states = 0;
};

// Templates and instantiation together. With `microbatches` > 0 the templates
// are optimised for that M. With 0, M starts at ceil(B / (f+1)), halved while
// no plan exists (a large M keeps more microbatches in flight than memory
// allows), then follows the largest microbatch count the plan gives a
// pipeline, re-planning while that changes and the plan improves (at most
// four rounds); the best plan wins.
// `pipelines_per_node` r > 1 (a divisor of G) plans pipelines that share
// nodes instead: the template on G / r GPUs, optimised for M = the
// microbatches each pipeline runs (or `microbatches`), instantiated with
// instantiate_sharing_nodes; the template set holds that template alone.
// 0 chooses: every divisor r of G (1 included) is planned, and the plan with
// the shortest iteration wins, the smallest r on a tie; NoPlanError (r = 1's
// reason) when none gives one. `interleave` V > 1 lets whole-node templates
// give each device 2..V model chunks (CostModel::set_interleave); the plan
// so made is kept where it is faster than the plan without (whose
// `interleave` is then 1). InputError outside 1..64.
[[nodiscard]] ClusterPlan plan_cluster(const Profile& profile, const std::vector<std::string>& nodes,
                                       int fault_tolerance, int global_microbatches, int microbatches = 0,
                                       const Progress& progress = {},
                                       RecomputePolicy recompute = RecomputePolicy::none,
                                       GradientSync gradient_sync = GradientSync::per_layer,
                                       double gradient_bucket_bytes = kDefaultGradientBucketBytes,
                                       int tensor_parallel_nodes = 1, int pipelines_per_node = 1,
                                       int interleave = 1);

// The microbatch size as a planning choice. `profiles` are one model on one
// kind of node profiled at different microbatch sizes (checked: the same
// model, layer names, GPUs per node; sizes all different); the global batch
// is `global_batch_samples` sequences. Every size that divides it is
// planned with plan_cluster (B = samples / size, M searched as there); the
// plan with the shortest iteration wins, the first given on a tie. Throws
// NoPlanError when no size gives a plan (naming each size's reason), and
// InputError when no size divides the batch.
struct MicrobatchSizeChoice {
  int microbatch_size = 0;
  int global_microbatches = 0;  // 0: the size does not divide the batch
  bool planned = false;
  Milliseconds iteration_ms = 0;
  std::string problem;  // why there is no plan, when none
};
struct SizedClusterPlan {
  std::size_t chosen = 0;  // index into the profiles
  ClusterPlan cluster;
  std::vector<MicrobatchSizeChoice> choices;  // one per profile, in their order
};
[[nodiscard]] SizedClusterPlan plan_cluster_over_sizes(const std::vector<const Profile*>& profiles,
                                                       const std::vector<std::string>& nodes, int fault_tolerance,
                                                       int global_batch_samples, const Progress& progress = {},
                                                       RecomputePolicy recompute = RecomputePolicy::none,
                                                       GradientSync gradient_sync = GradientSync::per_layer,
                                                       double gradient_bucket_bytes = kDefaultGradientBucketBytes,
                                                       int tensor_parallel_nodes = 1, int pipelines_per_node = 1,
                                                       int interleave = 1);

// Speed factors by node name: 1 computes as profiled, 0.5 takes twice as
// long. Nodes not named run at 1 (node_speeds.h: plans at node speeds).
using NodeSpeeds = std::map<std::string, double>;

// False when the plan records the fingerprint of a profile with other costs.
[[nodiscard]] bool plan_matches_profile(const Plan& plan, const Profile& profile);

}  // namespace oobleck
