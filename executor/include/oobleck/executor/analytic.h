// Analytic profiles: per-layer times from the standard transformer FLOP and
// byte counts on a hardware description, for models too large to measure.
// Plain C++ (Eigen for the efficiency fit).
#pragma once

#include <string>
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
};

[[nodiscard]] const std::vector<HardwareDescription>& hardware_presets();
// A preset name or a JSON file with the fields above.
[[nodiscard]] HardwareDescription load_hardware(const std::string& name_or_path);

// One layer's forward work for a microbatch; backward is twice each.
struct LayerWork {
  double flops = 0;
  double bytes = 0;  // memory traffic
};
[[nodiscard]] LayerWork layer_work(const ModelConfig& c, int index, int microbatch_size, int element_bytes);

// Roofline time, compute and memory serialised: flops / (peak e_c) + bytes / (bw e_m).
[[nodiscard]] Profile analytic_profile(const ModelConfig& c, const HardwareDescription& hw, int microbatch_size,
                                       const std::string& dtype);

struct EfficiencyFit {
  double compute_efficiency = 0;
  double memory_efficiency = 0;
  double rms_relative_error = 0;  // over every layer's forward and backward time
  double max_relative_error = 0;
  int points = 0;
};

// Least squares (relative error) of the efficiencies that make the analytic
// times of `model` on `hw` match a measured profile of the same device.
[[nodiscard]] EfficiencyFit fit_efficiency(const Profile& measured, const ModelConfig& model,
                                           const HardwareDescription& hw, const std::string& dtype);

}  // namespace oobleck::executor
