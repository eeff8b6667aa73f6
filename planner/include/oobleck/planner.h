// oobleck planner: profiles in, pipeline templates, instantiation and
// reconfiguration plans out. Plain C++, deterministic, no global state.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress

namespace oobleck {

// ---------------------------------------------------------------- profiles

struct TensorParallelTiming {
  int degree = 1;
  Milliseconds forward_ms = 0;
  Milliseconds backward_ms = 0;
  // What one GPU of the degree keeps per microbatch for the backward pass,
  // where it was measured or derived (at most the layer's activation_bytes).
  // Tensor parallelism alone leaves a block's LayerNorm inputs, dropout
  // masks and residuals whole on every GPU; sequence parallelism divides
  // them too. 0: not recorded, and a split layer's activations divide
  // among the GPUs (as with sequence parallelism).
  Bytes activation_bytes = 0;
};

struct LayerProfile {
  std::string name;
  Milliseconds forward_ms = 0;
  Milliseconds backward_ms = 0;
  Bytes param_bytes = 0;       // weights
  Bytes optimizer_bytes = 0;   // gradients and optimizer state
  Bytes activation_bytes = 0;  // kept alive per microbatch for the backward pass
  Bytes output_bytes = 0;      // handed to the next layer per microbatch
  std::vector<TensorParallelTiming> tensor_parallel;  // optional measurements
  // The attention core (softmax(q k^T) v): what selective recomputation
  // runs again in the backward (its forward, at degree 1) and the part of
  // activation_bytes it then does not keep. 0 and 0: none recorded.
  Milliseconds attention_forward_ms = 0;
  Bytes attention_activation_bytes = 0;
};

// One measured gradient all-reduce: `bytes` among `ranks` nodes took `ms`.
struct AllreducePoint {
  int ranks = 2;
  double bytes = 0;
  Milliseconds ms = 0;
  friend bool operator==(const AllreducePoint&, const AllreducePoint&) = default;
};

struct Hardware {
  std::string name;
  int gpus_per_node = 1;
  Bytes gpu_memory_bytes = 0;
  double intra_node_bytes_per_s = 0;
  double inter_node_bytes_per_s = 0;
  Milliseconds latency_ms = 0;
  // The gradient all-reduce's bandwidth (ring, per GPU) where it was
  // measured apart from the links; 0: inter_node_bytes_per_s.
  double allreduce_bytes_per_s = 0;
  [[nodiscard]] double gradient_allreduce_bytes_per_s() const {
    return allreduce_bytes_per_s > 0 ? allreduce_bytes_per_s : inter_node_bytes_per_s;
  }
  // Gradient all-reduces measured at several sizes (and rank counts); when
  // there are any, they price the gradient all-reduce instead of latency
  // plus bandwidth alone (CostModel::gradient_allreduce_ms). Sorted by
  // ranks, then bytes; each rank count's times never fall as sizes grow.
  std::vector<AllreducePoint> allreduce_table;
  // All-reduces measured among a node's GPUs (ranks: GPUs), sorted and made
  // never to fall alike; where there are any they price a tensor-parallel
  // stage's all-reduces (the estimate of CostModel's layer_*_allreduce_ms)
  // by the same rule, on the intra-node link's law.
  std::vector<AllreducePoint> intra_node_allreduce_table;
  // The rate a GPU streams its weights and optimizer state through the
  // optimizer step (device memory, at what an AdamW step reaches); 0: not
  // recorded, and the step is not priced.
  double memory_bytes_per_s = 0;
};

struct Profile {
  std::string origin;      // where it was read from, for messages
  std::string source;      // how it was made: hand-written, measured, analytic, imported
  std::string model_name;
  std::string model_json;  // the free-form `model` section, compact JSON
  Hardware hardware;
  int microbatch_size = 1;
  std::vector<LayerProfile> layers;
  std::vector<std::string> notes;  // assumptions made while building it
  // Its tensor-parallel costs are with sequence parallelism (Korthikanti et
  // al. 2022): the hidden states between layers are split along the
  // sequence too, so full recomputation keeps 1/degree of each layer's
  // input per GPU instead of all of it.
  bool sequence_parallel = false;
};

[[nodiscard]] Profile parse_profile(std::string_view json_text, const std::string& origin);

struct OobleckImportOptions {
  int microbatch_size = 0;  // which mb{B}.json; 0 = the only one present
  int gpus_per_node = 0;    // 0 = largest group in allreduce_in_node.json
  Bytes gpu_memory_bytes = Bytes{80} << 30;
  double optimizer_bytes_per_param_byte = 3.0;  // fp32 gradient + two AdamW moments
};

// Reads an Oobleck profile folder (mb{B}.json, allreduce_in_node.json,
// allreduce_across_nodes.json). What Oobleck does not record is filled in
// from the options and listed in Profile::notes.
[[nodiscard]] Profile import_oobleck_profile(const std::filesystem::path& folder,
                                             const OobleckImportOptions& options = {});

// A profile file, or an Oobleck profile folder (imported with default options).
[[nodiscard]] Profile load_profile(const std::filesystem::path& path);

[[nodiscard]] std::string profile_to_json(const Profile& profile);

// A 64-bit fingerprint of everything the planner reads from a profile, so a
// plan can tell whether it was made from the same costs.
[[nodiscard]] std::string profile_fingerprint(const Profile& profile);

// ---------------------------------------------------------------- cost model

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
// The same priced from measured all-reduces (allreduce_table.cpp derives
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
  // it up to K nodes. Every cost below prices those multiples up to
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
  // A lower bound on sync_tail_ms for any stages: layer 0's all-reduce, its
  // gradient the last one ready, sharded over a whole node's GPUs.
  [[nodiscard]] Milliseconds sync_tail_lower_bound_ms(int ranks) const;
  // Ring all-reduce of `bytes` among `ranks` over links of `bytes_per_s`.
  [[nodiscard]] Milliseconds allreduce_ms(double bytes, int ranks, double bytes_per_s) const;
  // A gradient all-reduce of `bytes` among `ranks` replicas: from the
  // hardware's measured table where it has one (allreduce_table.cpp derives
  // the rule), else the ring at gradient_allreduce_bytes_per_s().
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
  [[nodiscard]] Milliseconds tail_ms(const std::vector<Stage>& stages, int ranks, bool with_optimizer) const;

  const Profile* profile_;
  int microbatches_;
  std::vector<int> degrees_;         // what templates may choose
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

// ---------------------------------------------------------------- templates

struct PipelineTemplate {
  int nodes = 0;
  int microbatches = 0;               // M the template was optimised for
  Milliseconds iteration_ms = 0;      // T(M)
  Milliseconds first_microbatch_ms = 0;
  Milliseconds bottleneck_ms = 0;
  int max_microbatches = 0;           // memory limit on microbatches; 0 = none
  std::vector<Stage> stages;

  [[nodiscard]] Milliseconds iteration_ms_for(int microbatches_given) const {
    return first_microbatch_ms + (microbatches_given - 1) * bottleneck_ms;
  }
};

struct TemplateSet {
  int microbatches = 0;
  int max_nodes = 0;                      // node counts 1..max_nodes were searched
  std::vector<PipelineTemplate> templates;  // feasible ones, by increasing nodes
  // The work the search did, counted so that the benchmarks can tell a
  // slower search apart from a noisy machine: its dynamic-programme runs (one
  // per stage bound) and the states they swept.
  std::int64_t search_solves = 0;
  std::int64_t search_states = 0;
  [[nodiscard]] const PipelineTemplate* find(int nodes) const;
  [[nodiscard]] int min_nodes() const { return templates.empty() ? 0 : templates.front().nodes; }
};

// For every node count 1..max_nodes, the template minimising T(M) exactly;
// counts with no feasible template are absent.
[[nodiscard]] TemplateSet build_templates(const CostModel& cost, int max_nodes,
                                          const Progress& progress = {});

// The M to optimise templates for when none is given: the most stages a
// template on up to `max_nodes` nodes can have, min(layers, max_nodes x
// gpus_per_node), so that every stage holds its full 1F1B load.
[[nodiscard]] int default_template_microbatches(const Profile& profile, int max_nodes);

// Node counts in 1..max_nodes with no template, as inclusive ranges
// [first, last] in increasing order.
[[nodiscard]] std::vector<std::pair<int, int>> nodes_without_template(const TemplateSet& templates);

// ---------------------------------------------------------------- plans

struct Pipeline {
  int template_nodes = 0;
  std::vector<std::string> nodes;
  int microbatches = 0;
  Milliseconds iteration_ms = 0;  // T(microbatches) of its own stages
  std::vector<Stage> stages;
};

struct Plan {
  RecomputePolicy recompute = RecomputePolicy::none;  // what its templates could choose
  GradientSync gradient_sync = GradientSync::per_layer;  // what its iteration time assumes
  double gradient_bucket_bytes = kDefaultGradientBucketBytes;  // with GradientSync::buckets
  int tensor_parallel_nodes = 1;  // the most nodes its templates' stages could span
  int fault_tolerance = 0;
  int global_microbatches = 0;
  int template_microbatches = 0;
  Milliseconds iteration_ms = 0;  // slowest pipeline plus gradient synchronisation and optimizer steps
  Milliseconds pipelines_ms = 0;  // slowest pipeline
  Milliseconds sync_ms = 0;       // the rest: iteration_ms - pipelines_ms
  std::vector<Pipeline> pipelines;
  std::vector<std::string> spare_nodes;  // nodes no template combination could use
  std::string profile_fingerprint;       // of the profile it was made from
  // Feasibility tests the composition search made for this plan (work, for
  // the benchmarks; not part of the plan's file).
  std::int64_t composition_tests = 0;
};

// Uses all nodes in at least f+1 pipelines (fewer nodes only when no
// combination of templates adds up to all of them) and splits B microbatches.
[[nodiscard]] Plan instantiate(const CostModel& cost, const TemplateSet& templates,
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
[[nodiscard]] ClusterPlan plan_cluster(const Profile& profile, const std::vector<std::string>& nodes,
                                       int fault_tolerance, int global_microbatches, int microbatches = 0,
                                       const Progress& progress = {},
                                       RecomputePolicy recompute = RecomputePolicy::none,
                                       GradientSync gradient_sync = GradientSync::per_layer,
                                       double gradient_bucket_bytes = kDefaultGradientBucketBytes,
                                       int tensor_parallel_nodes = 1);

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
                                                       int tensor_parallel_nodes = 1);

// Speed factors by node name: 1 computes as profiled, 0.5 takes twice as
// long. Nodes not named run at 1 (node_speeds.h: plans at node speeds).
using NodeSpeeds = std::map<std::string, double>;

// False when the plan records the fingerprint of a profile with other costs.
[[nodiscard]] bool plan_matches_profile(const Plan& plan, const Profile& profile);

// ---------------------------------------------------------------- files

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

// Plans on nodes of unequal speed, and re-plans after nodes leave or join
// (part of this header's vocabulary).
#include "oobleck/node_speeds.h"
#include "oobleck/reconfigure.h"
