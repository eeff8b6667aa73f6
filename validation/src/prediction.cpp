// A measured run rebuilt as oobleck sees a job, and played.
//
// Megatron places ranks tensor-parallel first, then data-parallel, then
// pipeline stages: the GPUs of stage k of replica i start at rank
// k (d t) + i t, and a node holds gpus_per_node consecutive ranks. Each
// replica is a pipeline of p stages of t GPUs; stage k holds blocks
// [k L/p, (k+1) L/p), the first also the embedding and the last the final
// LayerNorm with the head. With v virtual stages a device (interleaved
// 1F1B), the pipeline has p v stages of L/(p v) blocks, virtual stage j on
// device j mod p. Megatron splits the embedding and the head over
// the tensor-parallel GPUs (vocabulary-parallel), so no layer is replicated;
// the analytic profile gives every layer's time at each degree.
// Data-parallel replicas of a stage that share a node all-reduce over its
// links; replicas on different nodes over the network.
//
// Every run trains in mixed precision (fp16 weights and gradients, fp32
// master weights and AdamW moments: the analytic profile's bf16 accounting),
// ties the embedding and the head, clips the gradient norm (one all-reduce
// of a number), and all-reduces the gradients after the whole backward (no
// buckets, no overlap), which is how both datasets' frameworks were run.
#include <map>
#include <stdexcept>

#include "oobleck/sim/iteration.h"
#include "oobleck/validation.h"

namespace oobleck::validation {

std::string unsupported(const MeasuredRun& run) {
  if (run.feedforward != 4 * run.model.hidden) return "a feed-forward width other than 4 h";
  return {};
}

Milliseconds predict_ms(const MeasuredRun& run, const executor::HardwareDescription& hardware,
                        const DatasetCluster& cluster, Milliseconds microbatch_overhead_ms) {
  if (const std::string why = unsupported(run); !why.empty()) {
    throw std::invalid_argument(run.dataset + " row " + std::to_string(run.row) + ": not expressible: " + why);
  }
  executor::HardwareDescription hw = hardware;
  if (cluster.intra_node_bytes_per_s > 0) hw.intra_node_bytes_per_s = cluster.intra_node_bytes_per_s;
  if (cluster.inter_node_bytes_per_s > 0) hw.inter_node_bytes_per_s = cluster.inter_node_bytes_per_s;
  // Megatron recomputes the transformer blocks only (whole, or their
  // attention core): the embedding and the head keep their activations.
  executor::AnalyticOptions analytic;
  analytic.vocabulary_parallel = true;
  analytic.sequence_parallel = run.sequence_parallel;
  analytic.recompute = run.recompute == "full" ? executor::AnalyticRecompute::blocks
                                               : executor::AnalyticRecompute::selective;
  Profile profile = executor::analytic_profile(run.model, hw, run.microbatch, "bf16", analytic);
  const int per_node = hw.gpus_per_node;
  const int t = run.tensor, d = run.data, p = run.pipeline, v = run.interleave, L = run.model.layers;
  profile.hardware.allreduce_bytes_per_s = d * t <= per_node ? hw.intra_node_bytes_per_s : hw.inter_node_bytes_per_s;

  const int microbatches = run.global_batch / (run.microbatch * d);
  const CostModel cost(profile, microbatches);
  Plan plan;
  plan.global_microbatches = microbatches * d;
  plan.template_microbatches = microbatches;
  for (int i = 0; i < d; ++i) {
    Pipeline pipeline;
    pipeline.microbatches = microbatches;
    std::map<int, int> position;  // node id -> its index in the pipeline's nodes
    const int chunks = p * v;  // virtual stage j on device j mod p
    for (int j = 0; j < chunks; ++j) {
      const int node = (j % p * d * t + i * t) / per_node;
      const auto [it, fresh] = position.try_emplace(node, static_cast<int>(pipeline.nodes.size()));
      if (fresh) pipeline.nodes.push_back("node" + std::to_string(node));
      Stage stage;
      stage.layer_begin = j == 0 ? 0 : 1 + j * L / chunks;
      stage.layer_end = j == chunks - 1 ? L + 2 : 1 + (j + 1) * L / chunks;
      stage.gpus = t;
      stage.node = it->second;
      pipeline.stages.push_back(stage);
    }
    pipeline.template_nodes = static_cast<int>(pipeline.nodes.size());
    plan.pipelines.push_back(std::move(pipeline));
  }
  sim::IterationOptions options;
  options.optimizer_bytes_per_s = hw.memory_bytes_per_s * hw.memory_efficiency;
  options.tied_embedding = true;
  options.gradient_norm = true;
  options.gradient_sync = GradientSync::after_backward;
  options.interleave = v;
  if (microbatch_overhead_ms > 0) {
    options.extra_forward_ms.assign(plan.pipelines.size(), std::vector<Milliseconds>(p * v, microbatch_overhead_ms));
  }
  return sim::simulate_iteration(cost, plan, options).iteration_ms;
}

}  // namespace oobleck::validation
