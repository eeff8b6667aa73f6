// Test support: random small profiles and brute-force references that share
// nothing with the planner's search code beyond the cost model's per-layer
// primitives (which define the problem).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::test {

struct RandomProfileOptions {
  int min_layers = 1;
  int max_layers = 7;
  std::vector<int> gpus_per_node_choices = {1, 2, 4};
  bool memory_bound = false;  // memory tight enough that many layouts do not fit
  // Nonzero: the hardware gets a measured gradient all-reduce table, drawn
  // from its own generator seeded with this (the profile's other draws stay
  // as they are).
  std::uint64_t allreduce_table_seed = 0;
  // Nonzero: layers record one GPU's share of their activations at each
  // tensor-parallel degree (between 1/degree and all of them), adding
  // measured times where there were none, and the profile is sometimes
  // sequence-parallel; drawn from a generator of their own.
  std::uint64_t activation_shares_seed = 0;
};

[[nodiscard]] Profile random_profile(std::mt19937_64& rng, const RandomProfileOptions& options);

// A profile with uniform layers, for hand-checkable cases.
[[nodiscard]] Profile uniform_profile(int layers, int gpus_per_node, double forward_ms, double backward_ms,
                                      Bytes state_bytes_per_layer, Bytes activation_bytes_per_layer,
                                      Bytes gpu_memory_bytes);

struct BruteTemplate {
  double iteration_ms = 0;  // the least T(M), its period over every run of stages
  std::vector<Stage> stages;
  // The least T(M) with the suffixes' round trips alone in the period: what
  // the template search minimises exactly.
  double suffix_iteration_ms = 0;
};

// Every layout that fits on up to max_gpus GPUs: all cut sets x all stage
// kinds (degree, recomputation), placed on nodes in order; visit(stages,
// GPUs used).
void for_each_layout(const CostModel& cost, int max_gpus,
                     const std::function<void(const std::vector<Stage>&, int)>& visit);

// Every layout: all cut sets x all degree assignments, node placement forced
// by filling nodes in order. T(M) summed directly. Indexed by node count.
[[nodiscard]] std::vector<std::optional<BruteTemplate>> brute_force_templates(const CostModel& cost, int max_nodes);

// The same on part of one node: every layout on u GPUs of it, for u in
// 1..G-1 (index u; 0 unused).
[[nodiscard]] std::vector<std::optional<BruteTemplate>> brute_force_shared_node_templates(const CostModel& cost);

// Which round trips bound 1F1B's period: those of every run of consecutive
// stages, or of the suffixes alone.
enum class Runs { every, suffixes };

// T(M) of a layout, summed from the layers' own values.
[[nodiscard]] double direct_iteration_ms(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                                         Runs runs = Runs::every);
// 1F1B's period from stage times and one-way transfers (transfer_ms[s]: s to
// s + 1; the last ignored), counted directly: no faster than any stage or
// link alone, nor than any run of stages s..e's round trip (its stages' times
// and the transfers between them, both ways) over the e - s + 1 microbatches
// its cycle advances; with Runs::suffixes, only runs that end at the last stage.
[[nodiscard]] double direct_period_ms(const std::vector<double>& stage_ms, const std::vector<double>& transfer_ms,
                                      Runs runs = Runs::every);

// The least value of the instantiation's objective over every multiset of
// templates adding up to `nodes` that, with the pipelines of `fixed_sizes`,
// makes at least `min_pipelines` pipelines, and every integer batch split:
// the slowest pipeline's T(q) plus the longest tail among the templates
// used (CostModel::iteration_tail_ms, among all the pipelines).
[[nodiscard]] std::optional<double> brute_force_instantiation(const CostModel& cost, const TemplateSet& templates,
                                                              int nodes, int min_pipelines, int global_microbatches,
                                                              const std::vector<int>& fixed_sizes = {});

// That objective for a plan's own pipelines and split.
[[nodiscard]] double plan_objective_ms(const CostModel& cost, const Plan& plan);

// One pipeline's passes played in 1F1B order by events in time order, as
// the simulator plays them: each stage one pass at a time once its input
// has arrived, each link one transfer at a time per direction.
struct Played {
  double end_ms = 0;
  std::vector<double> last_backward_ms;  // per stage
};
// With `chunks` > 1 the stages are virtual, stage s on device s mod (S /
// chunks), and each device runs one pass at a time in interleaved order.
[[nodiscard]] Played play_1f1b(const std::vector<double>& forward_ms, const std::vector<double>& backward_ms,
                               const std::vector<double>& transfer_ms, int microbatches, int chunks = 1);
// `stages` at speed 1, each stage's passes summed layer by layer.
[[nodiscard]] Played play_1f1b(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                               const std::vector<double>& stage_speeds = {}, int chunks = 1);
// An interleaved pipeline's end, so played.
[[nodiscard]] double play_interleaved(const CostModel& cost, const std::vector<Stage>& stages, int chunks,
                                      int microbatches);

// A plan's iteration counted pipeline by pipeline: each pipeline played
// (play_1f1b), each stage's last backward where it ends there;
// a layer's gradient is final once that pass has gone through it (or at its
// end, with GradientSync::after_backward); its all-reduce among all the
// pipelines starts when the last pipeline's is final; each pipeline's stage
// carries its layers' shards one at a time in the order they start; a
// stage steps (where optimizer steps are priced) after its last backward
// and its all-reduces. At node speeds (node_speeds.h): each stage's passes
// and step at its node's speed, the all-reduces at the slowest node's
// speed where the nodes run them.
[[nodiscard]] double synced_iteration_ms(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds = {});

}  // namespace oobleck::test
