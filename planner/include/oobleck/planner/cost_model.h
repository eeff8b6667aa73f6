// The cost model: what a stage's passes, transfers, all-reduces, optimizer
// step and memory cost.
// Part of the planner's vocabulary: include "oobleck/planner.h".
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress
#include "oobleck/planner/profile.h"

namespace oobleck {

// Activation recomputation of a stage (Korthikanti et al. 2022).
//  * full, as Megatron's "uniform" method with one layer per checkpoint: in
//    the forward pass each layer keeps only its input, and its backward first
//    runs its forward again. Each backward pass then also costs the forward;
//    each microbatch in flight keeps only the layers' inputs (whole on every
//    GPU of the stage), and one layer's activations live at a time, while its
//    backward runs.
//  * selective: only the attention core is run again (the profile's
//    attention_forward_ms, split over the stage's GPUs as its heads are); a
//    microbatch in flight keeps the layers' activations but the attention
//    core's, and one layer's attention activations live while its backward
//    runs. Much of the memory for a few per cent of the time, on long
//    sequences.
enum class Recompute : std::uint8_t { none, selective, full };
// Which stages the planner may make recompute: none, each one where that is
// best (a stage that does not fit otherwise, or fits more microbatches in
// flight; selective only where the profile records attention cores), or
// every one, selectively or fully.
enum class RecomputePolicy : std::uint8_t { none, automatic, selective, full };
[[nodiscard]] std::string_view recompute_name(Recompute recompute);  // none, selective, full
[[nodiscard]] std::optional<Recompute> recompute_named(std::string_view name);
[[nodiscard]] std::string_view recompute_policy_name(RecomputePolicy policy);  // none, auto, selective, full
[[nodiscard]] std::optional<RecomputePolicy> recompute_policy_named(std::string_view name);

// When a stage's gradients go to the all-reduce across pipelines: each
// layer's as soon as the last backward has gone through it (overlapping the
// rest of that backward), all of them once that backward ends (what
// oobleck-run does: it sums the gradients after the step's passes; also
// Megatron-DeepSpeed without overlap), or in buckets (PyTorch DDP: several
// layers' gradients all-reduced as one message once the last of them is
// ready, gradient_buckets below).
enum class GradientSync : std::uint8_t { per_layer, after_backward, buckets };
[[nodiscard]] std::string_view gradient_sync_name(GradientSync sync);  // per-layer, after-backward, buckets
[[nodiscard]] std::optional<GradientSync> gradient_sync_named(std::string_view name);
// PyTorch DDP's default bucket_cap_mb.
inline constexpr double kDefaultGradientBucketBytes = 25.0 * (1 << 20);


// Tensor-parallel groups may span at most this many nodes.
inline constexpr int kMaxTensorParallelNodes = 8;

// An all-reduce of `bytes` among k nodes' G GPUs each, as NCCL runs one
// over nodes whose GPUs each have a network card: a reduce-scatter inside
// each node, the G shards all-reduced across the nodes at once (a ring of
// k, one card each), an all-gather inside each node. `intra_node_ms` is
// the all-reduce of `bytes` among one node's G GPUs (the reduce-scatter
// and the all-gather together move what it moves).
[[nodiscard]] Milliseconds hierarchical_allreduce_ms(double bytes, int nodes, int gpus_per_node,
                                                     Milliseconds intra_node_ms, double inter_node_bytes_per_s,
                                                     Milliseconds latency_ms);

// A ring all-reduce of `bytes` over `ranks` ranks: each rank sends and
// receives 2(k-1)/k of the bytes at `bytes_per_s`, in 2(k-1) rounds of
// `latency_ms` each. 0 for one rank.
[[nodiscard]] Milliseconds ring_allreduce_ms(double bytes, int ranks, double bytes_per_s, Milliseconds latency_ms);
// The same priced from measured all-reduces (allreduces.cpp derives
// the rule; an empty table gives the ring).
[[nodiscard]] Milliseconds table_allreduce_ms(const std::vector<AllreducePoint>& table, double bytes, int ranks,
                                              double bytes_per_s, Milliseconds latency_ms);

// A stage: layers [layer_begin, layer_end) on `gpus` GPUs (the tensor-parallel
// degree) of node `node` (0-based position within its pipeline). A degree
// above the GPUs per node G is a whole number of nodes, node_span = gpus /
// G: the stage holds nodes node .. node + node_span - 1, all of their GPUs.
struct Stage {
  int layer_begin = 0;
  int layer_end = 0;
  int gpus = 1;
  int node = 0;
  Recompute recompute = Recompute::none;
  int node_span = 1;
  friend auto operator<=>(const Stage&, const Stage&) = default;  // (field by field: layouts as map keys)
  friend bool operator==(const Stage&, const Stage&) = default;
};

// Whether the stage is on its pipeline's node at `position`.
[[nodiscard]] inline bool stage_on_node(const Stage& stage, int position) {
  return position >= stage.node && position < stage.node + stage.node_span;
}

// The buckets of GradientSync::buckets, as DDP fills them: from the last
// layer down, a bucket closes once its layers' gradients (param_bytes,
// whole) reach `bucket_bytes`, and wherever a stage of any of `layouts`
// begins (each stage's GPUs reduce their own layers, and every holder of a
// bucket must cut it alike). Returns each layer's bucket, numbered from
// the last layer's (0) down. DDP also caps its first bucket at 1 MiB; that
// is not modelled.
[[nodiscard]] std::vector<int> gradient_buckets(const Profile& profile, double bucket_bytes,
                                                const std::vector<const std::vector<Stage>*>& layouts);

// The cost model of DESIGN.md, with tensor parallelism and gradient
// synchronisation as documented in README.md ("Cost model").
class CostModel {
 public:
  CostModel(const Profile& profile, int microbatches);
  CostModel(const Profile&&, int) = delete;  // keeps a reference: the profile must outlive it

  [[nodiscard]] const Profile& profile() const { return *profile_; }
  [[nodiscard]] int layers() const { return static_cast<int>(profile_->layers.size()); }
  [[nodiscard]] int gpus_per_node() const { return profile_->hardware.gpus_per_node; }
  [[nodiscard]] int microbatches() const { return microbatches_; }
  // Tensor-parallel degrees a template's stage may use: the divisors of
  // gpus_per_node, and with set_tensor_parallel_nodes(K) the multiples of
  // it up to K nodes, of those the ones the model's layers split over
  // (splits_over in profile.h: its heads, key/value heads and MLP units
  // divide among them). Every cost below prices all of them up to
  // kMaxTensorParallelNodes nodes in any case (a plan read from a file may
  // hold them).
  [[nodiscard]] const std::vector<int>& degrees() const { return degrees_; }
  // Lets templates put one stage on up to `nodes` whole nodes (1, the
  // default: a stage within a node; InputError outside 1..kMaxTensorParallelNodes).
  void set_tensor_parallel_nodes(int nodes);
  [[nodiscard]] int tensor_parallel_nodes() const { return tensor_parallel_nodes_; }
  // What templates may choose for their stages (none by default). Selective
  // recomputation needs a profile that records attention cores: asked for
  // on one that records none, set_recompute throws InputError.
  void set_recompute(RecomputePolicy policy);
  [[nodiscard]] RecomputePolicy recompute_policy() const { return recompute_policy_; }
  // Lets templates interleave (Megatron's interleaved 1F1B): each device
  // holds 2 to `chunks` model chunks where that plays faster than the
  // plain layout (templates.h; 1, the default: never). InputError outside
  // 1..64.
  void set_interleave(int chunks);
  [[nodiscard]] int interleave() const { return interleave_; }
  [[nodiscard]] const std::vector<Recompute>& recompute_choices() const { return recompute_choices_; }
  // When gradients are all-reduced (per layer by default): sync_tail_ms prices it.
  void set_gradient_sync(GradientSync sync) { gradient_sync_ = sync; }
  [[nodiscard]] GradientSync gradient_sync() const { return gradient_sync_; }
  // The buckets' size with GradientSync::buckets (DDP's 25 MiB by default;
  // InputError unless positive).
  void set_gradient_bucket_bytes(double bytes);
  [[nodiscard]] double gradient_bucket_bytes() const { return gradient_bucket_bytes_; }
  // The optimizer step's rate: each GPU reads and writes its stages'
  // weights and optimizer state once per iteration, at this many bytes a
  // second (by default the profile's hardware.memory_bytes_per_s; 0: not
  // priced). A stage steps once its last backward pass and its gradients'
  // all-reduces are done: iteration_tail_ms, plans' iteration times and
  // the times at node speeds (node_speeds.h, each node's at its speed)
  // count it.
  void set_optimizer_bytes_per_s(double bytes_per_s) { optimizer_bytes_per_s_ = bytes_per_s; }
  [[nodiscard]] double optimizer_bytes_per_s() const { return optimizer_bytes_per_s_; }
  // The optimizer step of a stage at `degree` (0 when not priced).
  [[nodiscard]] Milliseconds stage_optimizer_ms(int begin, int end, int degree) const;
  // Whether the nodes' own processors run the gradient all-reduces (Gloo
  // on CPU nodes: the reductions and copies are the node's work), so that
  // a slow node slows every ring it is in. Off by default: on GPUs the
  // all-reduce waits on links, not on a throttled node's compute. The
  // times at node speeds (node_speeds.h) then divide the synchronisation
  // tail by the slowest training node's speed.
  void set_collectives_at_node_speed(bool on) { collectives_at_node_speed_ = on; }
  [[nodiscard]] bool collectives_at_node_speed() const { return collectives_at_node_speed_; }
  // Pipelines that share each node (1, the default: every pipeline has
  // nodes of its own). With r > 1 each pipeline runs on G / r GPUs of one
  // node beside r - 1 others (Plan::pipelines_per_node), and a gradient
  // all-reduce among replicas runs as NCCL runs one over such ranks: among
  // a node's r replicas on its own links first, then the r shards across
  // the nodes at once, one network card each (gradient_allreduce_ms).
  // InputError unless r divides G.
  void set_pipelines_per_node(int pipelines);
  [[nodiscard]] int pipelines_per_node() const { return pipelines_per_node_; }

  [[nodiscard]] Milliseconds layer_forward_ms(int layer, int degree) const;
  // The layer's attention core's forward at `degree`: divided among the
  // GPUs with the heads, whole on a replicated layer.
  [[nodiscard]] Milliseconds layer_attention_forward_ms(int layer, int degree) const;
  // With recomputation, the layer's forward (or its attention core's) again,
  // then its backward.
  [[nodiscard]] Milliseconds layer_backward_ms(int layer, int degree, Recompute recompute = Recompute::none) const;
  // F_s + B_s of layers [begin, end) at `degree`.
  [[nodiscard]] Milliseconds stage_compute_ms(int begin, int end, int degree,
                                              Recompute recompute = Recompute::none) const;
  [[nodiscard]] Milliseconds stage_forward_ms(int begin, int end, int degree) const;
  [[nodiscard]] Milliseconds stage_backward_ms(int begin, int end, int degree,
                                               Recompute recompute = Recompute::none) const;
  // The tensor-parallel all-reduce part of layer_forward_ms / layer_backward_ms
  // at `degree`; the rest of the pass (total minus this) is compute. The
  // estimate is two all-reduces of the layer's output among the degree's
  // GPUs (after attention and after the MLP): tensor_allreduce_ms. With a
  // measured timing at `degree` it is capped at the measured total, and it is
  // 0 when neither measured pass is faster than at degree 1: such a layer is
  // replicated, not split (every GPU computes it whole, nothing to reduce).
  // 0 at degree 1.
  [[nodiscard]] Milliseconds layer_forward_allreduce_ms(int layer, int degree) const;
  [[nodiscard]] Milliseconds layer_backward_allreduce_ms(int layer, int degree) const;
  // Those summed over layers [begin, end): the all-reduce part of
  // stage_forward_ms / stage_backward_ms, in O(1).
  [[nodiscard]] Milliseconds stage_forward_allreduce_ms(int begin, int end, int degree) const;
  [[nodiscard]] Milliseconds stage_backward_allreduce_ms(int begin, int end, int degree,
                                                         Recompute recompute = Recompute::none) const;
  // C_s: send the output of layer `boundary - 1` to the stage starting at
  // `boundary` (and its gradient back), from a stage of `degree` GPUs.
  // Between nodes the message is spread over the network cards of those
  // GPUs, one each (each sends its 1/degree, the node across receives the
  // parts on as many of its own cards and gathers them inside); inside a
  // node it takes the intra-node link.
  [[nodiscard]] Milliseconds transfer_ms(int boundary, bool same_node, int degree = 1) const;
  // Whether every GPU of a stage at `degree` holds the layer whole: a layer
  // whose measured timing at `degree` is no faster than at degree 1 (above).
  // Its state and activations are not divided among the GPUs; the other
  // layers' are. Without a measurement a layer is split.
  [[nodiscard]] bool layer_replicated(int layer, int degree) const;
  // What one GPU of a stage at `degree` keeps of the layer per microbatch
  // in flight: the profile's per-degree activation_bytes where recorded,
  // else all of it on a replicated layer and 1/degree on a split one.
  [[nodiscard]] Bytes layer_activation_bytes(int layer, int degree) const;
  // Memory per GPU of a stage holding `in_flight` microbatches.
  [[nodiscard]] Bytes stage_memory_bytes(int begin, int end, int degree, int in_flight,
                                         Recompute recompute = Recompute::none) const;
  // Of stage_memory_bytes, what one layer's backward needs while it runs
  // with recomputation (0 without): counted once however many microbatches
  // are in flight.
  [[nodiscard]] Bytes stage_working_bytes(int begin, int end, int degree, Recompute recompute) const {
    return working_bytes(begin, end, static_cast<std::size_t>(degree_index(degree)), recompute);
  }
  [[nodiscard]] bool stage_fits(int begin, int end, int degree, int in_flight,
                                Recompute recompute = Recompute::none) const;
  // Largest number of in-flight microbatches the stage fits with (0 if none).
  [[nodiscard]] int stage_max_in_flight(int begin, int end, int degree, Recompute recompute = Recompute::none) const;
  // Weights plus optimizer state: what a state copy moves.
  [[nodiscard]] Bytes layer_state_bytes(int layer) const { return state_bytes(layer, layer + 1); }
  [[nodiscard]] Bytes state_bytes(int begin, int end) const { return state_prefix_[end] - state_prefix_[begin]; }
  // Weights plus optimizer state on each GPU of a stage at `degree`: what
  // its optimizer step reads and writes.
  [[nodiscard]] Bytes stage_state_bytes_per_gpu(int begin, int end, int degree) const;
  // Layer 0's gradient all-reduce across `pipelines` replicas, whole: a
  // quick estimate of the exposed synchronisation.
  [[nodiscard]] Milliseconds gradient_sync_ms(int pipelines) const;
  // What of the gradient all-reduces among `ranks` replicas of a pipeline
  // with `stages` runs after its last backward pass ends (derivation in
  // cost_model.cpp), with the model's gradient_sync(): the iteration of such
  // pipelines takes T(M) plus this.
  [[nodiscard]] Milliseconds sync_tail_ms(const std::vector<Stage>& stages, int ranks) const;
  // What of the iteration runs after T(M): each stage's optimizer step
  // after its last backward pass and its all-reduces (sync_tail_ms without
  // optimizer steps priced). Pipelines of one template take T(M) plus this.
  [[nodiscard]] Milliseconds iteration_tail_ms(const std::vector<Stage>& stages, int ranks) const;
  // The same tail priced at many rank counts: what does not depend on the
  // count (when each all-reduce is ready, its bytes, each stage's end and
  // optimizer step) gathered once; ms(ranks) equals iteration_tail_ms (or,
  // without optimizer steps, sync_tail_ms) bit for bit.
  class Tail {
   public:
    [[nodiscard]] Milliseconds ms(int ranks) const;

   private:
    friend class CostModel;
    struct Allreduce {
      Milliseconds ready_ms;  // after T
      double bytes;           // on each GPU's interface
    };
    struct StageEnd {
      std::size_t first, last;  // its all-reduces, [first, last)
      Milliseconds end_ms, optimizer_ms;
    };
    const CostModel* cost_ = nullptr;
    bool with_optimizer_ = false;
    std::vector<Allreduce> allreduces_;
    std::vector<StageEnd> stages_;
  };
  [[nodiscard]] Tail iteration_tail(const std::vector<Stage>& stages) const;
  // A lower bound on sync_tail_ms for any stages: layer 0's all-reduce, its
  // gradient the last one ready, sharded over a whole node's GPUs.
  [[nodiscard]] Milliseconds sync_tail_lower_bound_ms(int ranks) const;
  // Ring all-reduce of `bytes` among `ranks` over links of `bytes_per_s`.
  [[nodiscard]] Milliseconds allreduce_ms(double bytes, int ranks, double bytes_per_s) const;
  // A gradient all-reduce of `bytes` among `ranks` replicas: from the
  // hardware's measured table where it has one (allreduces.cpp derives
  // the rule), else the ring at gradient_allreduce_bytes_per_s(). With
  // pipelines sharing nodes, the replicas on one node all-reduce inside it
  // (intra_node_allreduce_ms), and the nodes all-reduce 1/r of the bytes
  // each across (the same rule among ceil(ranks / r) nodes).
  [[nodiscard]] Milliseconds gradient_allreduce_ms(double bytes, int ranks) const;
  // An all-reduce of `bytes` among `ranks` GPUs of a node: from the
  // hardware's intra-node table where it has one, else the ring on the
  // intra-node link.
  [[nodiscard]] Milliseconds intra_node_allreduce_ms(double bytes, int ranks) const;
  // A tensor-parallel group's all-reduce of `bytes` among `degree` GPUs:
  // inside a node, intra_node_allreduce_ms; over k whole nodes,
  // hierarchical_allreduce_ms (below) on the hardware's links.
  [[nodiscard]] Milliseconds tensor_allreduce_ms(double bytes, int degree) const;

  // T(M) of DESIGN.md for a pipeline's stages and microbatch count.
  [[nodiscard]] Milliseconds pipeline_ms(const std::vector<Stage>& stages, int microbatches) const;
  // T(1) = sum of stage compute plus twice the transfers: the `a` in T(M) = a + (M-1) b.
  [[nodiscard]] Milliseconds first_microbatch_ms(const std::vector<Stage>& stages) const;
  // 1F1B's steady period, the `b` in T(M) = a + (M-1) b: the slowest
  // stage's F_s + B_s, or, where transfers are long beside the compute, a
  // round trip: for every run of consecutive stages s..e, (F + B of its
  // stages plus twice the transfers between them) / (e - s + 1)
  // (steady_period.h derives it).
  [[nodiscard]] Milliseconds bottleneck_ms(const std::vector<Stage>& stages) const;
  // The same with the round trips of the suffixes alone (s..S-1, not every
  // run of consecutive stages): what the exact template search bounds
  // (templates.cpp); at most bottleneck_ms.
  [[nodiscard]] Milliseconds suffix_bottleneck_ms(const std::vector<Stage>& stages) const;
  // Whether every stage fits with min(microbatches, S - s + 1) in flight.
  [[nodiscard]] bool pipeline_fits(const std::vector<Stage>& stages, int microbatches) const;

 private:
  // sync_tail_ms, and with optimizer steps iteration_tail_ms.
  [[nodiscard]] Tail tail(const std::vector<Stage>& stages, bool with_optimizer) const;

  const Profile* profile_;
  int microbatches_;
  std::vector<int> degrees_;         // what templates may choose
  std::vector<int> splitting_degrees_;  // the priced degrees the model splits over
  std::vector<int> priced_degrees_;  // what the tables below hold, by index
  int tensor_parallel_nodes_ = 1;
  // Per degree index: prefix sums over layers of forward, backward, both,
  // and of the tensor-parallel all-reduce parts of forward and backward.
  // The backward ones per recomputation (index: Recompute), each kept as
  // sums of its own, so that a stage's cost is one difference, as the
  // template search computes it.
  using PerDegreePrefix = std::vector<std::vector<double>>;
  static constexpr std::size_t kRecomputeKinds = 3;
  PerDegreePrefix forward_prefix_, forward_allreduce_prefix_;
  std::array<PerDegreePrefix, kRecomputeKinds> backward_prefix_, compute_prefix_, backward_allreduce_prefix_;
  // Each layer's backward itself (layer_backward_ms, which the
  // synchronisation tail asks for layer by layer), and each priced
  // degree's index by degree (-1: not priced).
  std::array<PerDegreePrefix, kRecomputeKinds> layer_backward_;
  std::vector<int> degree_slot_;
  [[nodiscard]] Milliseconds computed_backward_ms(int layer, int degree, Recompute recompute) const;
  std::vector<Bytes> state_prefix_, attention_activation_prefix_;
  // Full recomputation: the layers' inputs (layer l's is layer l-1's output; the
  // first layer's, tokens, counted as nothing), and per degree index a
  // sparse table of range maxima of one layer's activations on one GPU;
  // selective: the same table of one layer's attention activations.
  std::vector<Bytes> input_prefix_;
  [[nodiscard]] Bytes inputs_per_gpu(int begin, int end, int degree) const;
  std::vector<std::vector<std::vector<Bytes>>> working_max_, attention_working_max_;
  RecomputePolicy recompute_policy_ = RecomputePolicy::none;
  std::vector<Recompute> recompute_choices_{Recompute::none};
  GradientSync gradient_sync_ = GradientSync::per_layer;
  double gradient_bucket_bytes_ = kDefaultGradientBucketBytes;
  double optimizer_bytes_per_s_ = 0;
  bool collectives_at_node_speed_ = false;
  int pipelines_per_node_ = 1;
  int interleave_ = 1;
  // The most activation bytes one GPU holds for one layer of [begin, end)
  // (of the attention cores' alone: selective).
  [[nodiscard]] Bytes working_bytes(int begin, int end, std::size_t degree_index, Recompute recompute) const;
  // Per degree index: prefix sums of the replicated layers' state (counted
  // once more per GPU beyond the first, see below), and of the activations
  // the stage's GPUs together keep per microbatch: degree x each GPU's
  // share where recorded or replicated, the layer's whole otherwise; the
  // latter less the attention cores' (selective recomputation).
  std::vector<std::vector<Bytes>> replicated_state_prefix_, held_activation_prefix_;
  std::vector<std::vector<Bytes>> held_selective_activation_prefix_;
  [[nodiscard]] int degree_index(int degree) const;
  // A stage's state and activations as `degree` GPUs hold them together:
  // split layers once, replicated ones `degree` times.
  [[nodiscard]] std::pair<Bytes, Bytes> stage_held_bytes(int begin, int end, int degree, Recompute recompute) const;
  // The analytic estimate: two all-reduces of the layer's output among the degree's GPUs.
  [[nodiscard]] Milliseconds output_allreduces_ms(int layer, int degree) const;
  // A stage over several nodes without a measurement at its degree: the
  // layer's timing at a whole node, where the profile has one.
  [[nodiscard]] const TensorParallelTiming* node_measurement(int layer, int degree) const;
  // A pass at `degree` that the profile does not record (cost_model.cpp).
  [[nodiscard]] Milliseconds estimated_pass_ms(int layer, int degree, bool forward) const;
};

}  // namespace oobleck
