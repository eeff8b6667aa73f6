// One training iteration of a plan, op by op: every microbatch's forward and
// backward on every stage in 1F1B order (with a tensor-parallel stage's
// all-reduces inside its node after each), the stage-to-stage transfers on
// their links, the layer-wise gradient all-reduce across the pipelines that
// hold each layer, and the optimizer step.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::sim {

struct IterationOptions {
  // Device memory bandwidth the optimizer step streams the stage's state at
  // (it reads and writes every byte once); 0 leaves the step out.
  double optimizer_bytes_per_s = 0;
  // Per pipeline, per stage: forward work added to every microbatch (the
  // successor's layers recomputed under redundant computation). Empty: none.
  std::vector<std::vector<Milliseconds>> extra_forward_ms;
  bool record_ops = false;  // keep every op, for a Chrome trace
  // All-reduced gradient bytes per parameter byte of the profile (2 for a
  // run that sums fp32 weights' gradients in float64, as oobleck-run does).
  double gradient_scale = 1;
  // Every stage computes on one device (workers sharing a GPU): a forward
  // or backward waits for the device as well as for its inputs, and the
  // device serves waiting stages in the order they became ready.
  bool shared_device = false;
  // The LM head's weight is the token embedding's (GPT): the gradients of
  // the first and the last layer are all-reduced together, among the
  // holders of either, a pipeline's first and last stages included.
  bool tied_embedding = false;
  // What a node sends arrives this much later than its link's latency says
  // (a distant node, or a slow path at it; one way, as a netem delay on its
  // interface): its stage-to-stage transfers, and every ring step of an
  // all-reduce it takes part in, since each step waits for its slowest
  // sender. Empty: none.
  std::map<std::string, Milliseconds> node_send_delay_ms;
  // The global gradient norm (for clipping) is all-reduced among every
  // trainer once all gradients are summed, before any optimizer step, as
  // oobleck-run does: one number, so its latency alone counts.
  bool gradient_norm = false;
  // When gradients go to the all-reduce (planner.h): per layer, or all
  // once the backward ends.
  GradientSync gradient_sync = GradientSync::per_layer;
  double gradient_bucket_bytes = kDefaultGradientBucketBytes;  // with GradientSync::buckets
  // Interleaved 1F1B (Narayanan et al. 2021): each pipeline's stages are
  // virtual stages, `interleave` to a device, stage j on device j mod
  // (S / interleave), so that each device holds chunks spread along the
  // model. A device runs its passes one at a time in Megatron's
  // interleaved order (interleaved_one_f_one_b). S must be a multiple of
  // it. A pipeline whose own `interleave` is above 1 (a plan's) uses that.
  int interleave = 1;
};

// tp_allreduce_*: a tensor-parallel stage's all-reduces of one forward or
// backward pass, among its GPUs, right after the pass's compute.
enum class OpKind : std::uint8_t {
  forward,
  backward,
  send_activation,
  send_gradient,
  allreduce,
  optimizer,
  tp_allreduce_forward,
  tp_allreduce_backward
};

struct OpRecord {
  OpKind kind = OpKind::forward;
  int pipeline = 0;
  int stage = 0;       // the sender for sends; -1 for (gradient) all-reduces
  int index = 0;       // microbatch, or layer for (gradient) all-reduces
  Milliseconds start_ms = 0;
  Milliseconds end_ms = 0;
};

struct StageTimes {
  int pipeline = 0;
  int stage = 0;
  std::string node;
  int node_index = 0;             // the node's position in the pipeline (Stage::node)
  int gpus = 1;                   // the tensor-parallel degree
  int microbatches = 0;
  // All-reduces per forward (and per backward) pass: two per layer split
  // over the GPUs; 0 at degree 1 or when every layer is replicated.
  int tp_allreduces_per_pass = 0;
  Milliseconds compute_ms = 0;        // forward and backward work, the tensor-parallel all-reduces aside
  Milliseconds tp_allreduce_ms = 0;   // the tensor-parallel all-reduces of all its passes
  Milliseconds optimizer_ms = 0;
  Milliseconds idle_ms = 0;       // the rest of the iteration
  Milliseconds finished_ms = 0;   // its optimizer step ends
  Milliseconds passes_end_ms = 0; // its last forward or backward pass ends (0: it has none)
};

struct IterationResult {
  Milliseconds iteration_ms = 0;         // the last optimizer step ends
  Milliseconds last_backward_ms = 0;     // the last backward ends
  Milliseconds sync_exposed_ms = 0;      // from the last backward to the last all-reduce
  std::vector<StageTimes> stages;        // pipeline by pipeline, stage by stage
  std::vector<OpRecord> ops;             // when recorded, in order of completion
  std::uint64_t events = 0;
};

// The plan's stages are read against `cost` (its profile's layers and links).
[[nodiscard]] IterationResult simulate_iteration(const CostModel& cost, const Plan& plan,
                                                 const IterationOptions& options = {});

// {"iteration_ms", "last_backward_ms", "sync_exposed_ms", "planner_iteration_ms", "stages": [...]}; per
// stage its node (name and node_index), gpus = tp_degree, and busy time as
// compute_ms + tp_allreduce_ms + optimizer_ms.
[[nodiscard]] std::string iteration_to_json(const IterationResult& result, const Plan& plan);

// Chrome trace event format (Perfetto opens it): one process per pipeline,
// one thread per stage (passes, "TP all-reduce F<m>"/"B<m>", optimizer), a
// thread per link direction for its sends (each saying "intra-node" or
// "inter-node"), one process for the gradient all-reduces. Needs the ops
// recorded.
[[nodiscard]] std::string chrome_trace_json(const IterationResult& result, const Plan& plan, const Profile& profile);

}  // namespace oobleck::sim
