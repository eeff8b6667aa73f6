// Profiles: per-layer costs of a model on a kind of hardware, and their files.
// Part of the planner's vocabulary: include "oobleck/planner.h".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress

namespace oobleck {

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

// Whether a layer of the profile's model splits over `degree` GPUs as
// Megatron-LM's tensor parallelism and oobleck-run split it: the attention
// heads, the key/value heads and the MLP's units each divide evenly among
// them (its `model` section's heads, kv_heads where the architecture is
// "llama", and ffn_hidden there or 4 x hidden otherwise); a TorchScript
// model's layers do not split. A model section that names no heads (a
// hand-written profile, one imported from Oobleck) splits over any degree.
[[nodiscard]] bool splits_over(const Profile& profile, int degree);
// Those of `degrees` it splits over, in their order (the section read once).
[[nodiscard]] std::vector<int> degrees_split_over(const Profile& profile, const std::vector<int>& degrees);

// A 64-bit fingerprint of everything the planner reads from a profile, so a
// plan can tell whether it was made from the same costs.
[[nodiscard]] std::string profile_fingerprint(const Profile& profile);

}  // namespace oobleck
