// Analytic profiles: per-layer times from the standard transformer FLOP and
// byte counts on a hardware description, for models too large to measure.
// Plain C++ (Eigen for the efficiency fit).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

struct HardwareDescription {
  std::string key;      // a100-80gb, h100-80gb, h200, or a file's name
  std::string name;
  std::string source;   // where the numbers come from
  int gpus_per_node = 8;
  Bytes gpu_memory_bytes = 0;
  double peak_fp32_flops_per_s = 0;
  double peak_bf16_flops_per_s = 0;  // dense
  double memory_bytes_per_s = 0;
  double compute_efficiency = 0.5;   // achievable share of the peak
  double memory_efficiency = 0.8;
  double intra_node_bytes_per_s = 0;
  double inter_node_bytes_per_s = 0;
  Milliseconds latency_ms = 0.01;
  // Fixed time of a layer's forward pass whatever its size: the framework
  // launching its kernels one by one (eager mode). Backward twice that.
  Milliseconds layer_overhead_ms = 0;
  // The host's time to issue a layer's forward kernels (backward twice
  // that), which overlaps the device's work: a pass takes the longer of the
  // two. Small layers in eager frameworks on GPUs are bound by it; 0 where
  // host and device are one (the CPU) or the overhead above describes it.
  Milliseconds layer_launch_ms = 0;
};

[[nodiscard]] const std::vector<HardwareDescription>& hardware_presets();
// A preset name or a JSON file with the fields above.
[[nodiscard]] HardwareDescription load_hardware(const std::string& name_or_path);
// The matrix peak for `dtype`: bf16's where the description gives one, else fp32's.
[[nodiscard]] double peak_for(const HardwareDescription& hw, const std::string& dtype);

// One layer's forward work for a microbatch; backward is twice each.
struct LayerWork {
  double flops = 0;
  double bytes = 0;  // memory traffic
  // Of `bytes`, what each GPU of a tensor-parallel stage does whole: a
  // block's LayerNorms, dropouts and residual adds (no sequence
  // parallelism). The rest, and every FLOP, divide among the GPUs.
  double unsplit_bytes = 0;
  // The attention core (scores, softmax, dropout, their product with V):
  // what selective recomputation runs again (Korthikanti et al. 2022).
  double attention_flops = 0;
  double attention_bytes = 0;
};
[[nodiscard]] LayerWork layer_work(const ModelConfig& c, int index, int microbatch_size, int element_bytes);

// Recomputation baked into the profile's times, as Megatron does it, for
// comparing with runs of it: the attention core of every block again in its
// backward (selective), or every block's whole forward (blocks; the
// embedding and the head keep their activations). The planner's own choice
// (Recompute, CostModel::set_recompute) is another matter: leave this none
// for profiles the planner is to choose with.
enum class AnalyticRecompute : std::uint8_t { none, selective, blocks };

struct AnalyticOptions {
  // Split the embedding and the head among a tensor-parallel stage's GPUs
  // (Megatron's vocabulary-parallel layers), instead of replicating them
  // as oobleck-run does.
  bool vocabulary_parallel = false;
  // Sequence parallelism with tensor parallelism: a block's LayerNorms and
  // dropouts divide among the GPUs too; each all-reduce becomes a
  // reduce-scatter and an all-gather of the same volume, and the backward
  // gathers its inputs again (one all-reduce more).
  bool sequence_parallel = false;
  AnalyticRecompute recompute = AnalyticRecompute::none;
};

// Roofline time, compute and memory serialised, plus the fixed overhead:
// flops / (peak e_c) + bytes / (bw e_m) + overhead; backward twice each.
// Each layer also gets its times at every tensor-parallel degree that
// divides both the GPUs per node and the heads: its share of the work, the
// unsplit traffic whole, the overhead whole (kernels launch on every GPU
// whatever their size), and the all-reduces inside the node (a block's
// output twice a pass, as CostModel estimates them).
[[nodiscard]] Profile analytic_profile(const ModelConfig& c, const HardwareDescription& hw, int microbatch_size,
                                       const std::string& dtype, const AnalyticOptions& options = {});

struct EfficiencyFit {
  double compute_efficiency = 0;  // 0: the term explains nothing and is left out
  double memory_efficiency = 0;
  Milliseconds layer_overhead_ms = 0;
  double rms_relative_error = 0;  // over every layer's forward and backward time
  double max_relative_error = 0;
  int points = 0;
};

// Least squares (relative error, every coefficient non-negative) of the
// efficiencies and the overhead that make the analytic times of `model` on
// `hw` match a measured profile of the same device.
[[nodiscard]] EfficiencyFit fit_efficiency(const Profile& measured, const ModelConfig& model,
                                           const HardwareDescription& hw, const std::string& dtype);

// The same over several measured profiles at once (models, microbatch
// sizes): one set of coefficients for the device.
struct FitInput {
  const Profile* measured = nullptr;
  ModelConfig model;
  std::string dtype;
};
// `terms` picks what the fit may use: bit 0 compute, bit 1 memory, bit 2
// the overhead (a term left out gets efficiency or overhead 0).
inline constexpr unsigned kFitCompute = 1, kFitMemory = 2, kFitOverhead = 4;
[[nodiscard]] EfficiencyFit fit_efficiency(const std::vector<FitInput>& inputs, const HardwareDescription& hw,
                                           unsigned terms = kFitCompute | kFitMemory | kFitOverhead);

// The device a measured profile (oobleck-profile measure's JSON text) was
// made on, for fitting the analytic model to it: its own matrix-product peak
// and copy bandwidth, memory and links. Throws InputError when the profile
// has no `measured` section.
[[nodiscard]] HardwareDescription hardware_of_measurement(std::string_view measured_json, const Profile& measured);

struct FittedHardware {
  HardwareDescription hardware;  // its efficiencies and overhead the fit's
  EfficiencyFit fit;
};

// `hw` with its efficiencies and per-layer overhead fitted (fit_efficiency,
// `terms`) to the measured profiles of one device at `measured_paths` (at
// least one). Each brings its own model and dtype; one that describes no
// model (hand-written) is taken as `fallback` in fp32. Without `hw`, the
// device is the one the first profile was measured on.
[[nodiscard]] FittedHardware fit_to_measured(const std::optional<HardwareDescription>& hw,
                                             const std::vector<std::string>& measured_paths,
                                             const ModelConfig& fallback, unsigned terms);

// An analytic profile as oobleck-profile writes it: oobleck.profile.v1 plus
// `description`, `hardware_description` and, when fitted, `fit` (with the
// measured profiles it was fitted to).
[[nodiscard]] std::string analytic_profile_to_json(const Profile& profile, const HardwareDescription& hw,
                                                   const EfficiencyFit* fit, const std::vector<std::string>& fitted_to);

// Every layer's forward and backward time, summed.
struct ProfileTotals {
  Milliseconds forward_ms = 0;
  Milliseconds backward_ms = 0;
};
[[nodiscard]] ProfileTotals profile_totals(const Profile& profile);

// Per-layer forward and backward times of a prediction (an analytic
// profile) against a measured profile of the same model and microbatch.
struct LayerComparison {
  std::string name;
  Milliseconds measured_forward_ms = 0, measured_backward_ms = 0;
  Milliseconds predicted_forward_ms = 0, predicted_backward_ms = 0;
};
struct ProfileComparison {
  std::vector<LayerComparison> layers;
  Milliseconds measured_ms = 0, predicted_ms = 0;  // every layer's forward and backward
  double total_relative_error = 0;                 // predicted_ms / measured_ms - 1
  double rms_relative_error = 0;  // over every layer's forward and backward time
  double max_relative_error = 0;
};
// Throws InputError when the two do not describe the same layers.
[[nodiscard]] ProfileComparison compare_profiles(const Profile& measured, const Profile& predicted);

// A comparison as JSON: the two profiles' paths, the model, microbatch size
// and device, the totals and errors, and every layer's four times.
[[nodiscard]] std::string comparison_to_json(const ProfileComparison& comparison, const Profile& measured,
                                             const std::string& measured_path, const std::string& predicted_path);

}  // namespace oobleck::executor
