// Measured profiles: each layer of the GPT timed and sized on this machine's
// CPU (or a CUDA GPU), and the whole model timed in the same run. Plain C++
// interface; the measuring itself uses libtorch.
#pragma once

#include <optional>
#include <string>

#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

struct MeasureOptions {
  ModelConfig model;
  int microbatch_size = 1;
  std::string device = "cpu";   // cpu | cuda
  std::string dtype = "fp32";   // fp32 | bf16 (bf16 on CUDA only)
  int threads = 0;              // intra-op threads; 0 = every core
  int warmup = 2;
  int repeats = 7;              // the median of these
  std::uint64_t seed = 1;
  // What cannot be measured on one machine: given, or left at the defaults
  // and listed in the profile's notes.
  std::optional<double> intra_node_bytes_per_s, inter_node_bytes_per_s;
  std::optional<Milliseconds> latency_ms;
  std::optional<Bytes> memory_bytes;  // per GPU; on CPU the machine's memory
  // Measure point-to-point and all-reduce among two local processes with
  // this program (it must accept `comm-peer --port P`); empty: skip.
  std::string link_program;
};

struct Measurement {
  Profile profile;
  Milliseconds whole_forward_ms = 0, whole_backward_ms = 0;  // the whole model, same run
  Milliseconds layers_forward_ms = 0, layers_backward_ms = 0;  // sums over layers
  std::string device_name;
  std::string library_versions;
  std::string date;  // UTC, ISO 8601
  int threads = 0;
  double gemm_flops_per_s = 0;  // a large fp32 matrix product: this device's practical peak
  double stream_bytes_per_s = 0;  // a large copy: its practical memory bandwidth
  bool links_measured = false;
  double p2p_bytes_per_s = 0, allreduce_bytes_per_s = 0;
  Milliseconds p2p_latency_ms = 0, allreduce_latency_ms = 0;
  double p2p_fit_error = 0, allreduce_fit_error = 0;
};

[[nodiscard]] Measurement measure_profile(const MeasureOptions& options, const Progress& progress = {});

// (layers summed - whole model) / whole model, forward and backward
// together; 0 when the whole model was not timed.
[[nodiscard]] double layers_gap(const Measurement& measurement);

// The profile (oobleck.profile.v1) plus `whole_model`, `layers_sum`, `gap`,
// `device`, `library_versions`, `date`, `measured`.
[[nodiscard]] std::string measurement_to_json(const Measurement& measurement);

}  // namespace oobleck::executor
