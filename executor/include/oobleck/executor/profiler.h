// Measured profiles: each layer of the GPT timed and sized on this machine's
// CPU (or a CUDA GPU), and the whole model timed in the same run. Plain C++
// interface; the measuring itself uses libtorch.
#pragma once

#include <optional>
#include <string>
#include <vector>

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
  int repeats = 7;              // a layer's time: the mean of these
  std::uint64_t seed = 1;
  // What cannot be measured on one machine: given, or left at the defaults
  // and listed in the profile's notes.
  std::optional<double> intra_node_bytes_per_s, inter_node_bytes_per_s;
  std::optional<Milliseconds> latency_ms;
  std::optional<Bytes> memory_bytes;  // per GPU; on CPU the machine's memory
  // A node of this many GPUs. Above 1 (CPU only), as many local worker
  // processes of `threads` threads each (0: the cores shared out) measure
  // every layer at every tensor-parallel degree dividing it, all busy at
  // once as in training.
  int gpus_per_node = 1;
  // This program, started again for the measurements that need other
  // processes: `comm-peer --port P` (links) and `node-peer --port P --rank R`
  // (a node's other workers). Empty: neither is measured.
  std::string program;
  bool measure_links = true;
};

// Per-layer sums at one tensor-parallel degree, measured with every worker
// of a node busy.
struct DegreeSums {
  int degree = 1;
  Milliseconds forward_ms = 0, backward_ms = 0;
};

struct Measurement {
  Profile profile;
  Milliseconds whole_forward_ms = 0, whole_backward_ms = 0;  // the whole model, same run
  Milliseconds layers_forward_ms = 0, layers_backward_ms = 0;  // sums over layers, measured alone
  std::vector<DegreeSums> node_degrees;  // nodes of several GPUs: every degree, the node busy
  std::string device_name;
  std::string library_versions;
  std::string date;  // UTC, ISO 8601
  int threads = 0;
  double gemm_flops_per_s = 0;  // a large fp32 matrix product: this device's practical peak
  double stream_bytes_per_s = 0;  // a large copy: its practical memory bandwidth
  // The whole model's optimizer step, and the rate it streams weights and
  // optimizer state at (2 x their bytes per step): hardware.memory_bytes_per_s.
  Milliseconds optimizer_step_ms = 0;
  double optimizer_bytes_per_s = 0;
  bool links_measured = false;
  double p2p_bytes_per_s = 0, allreduce_bytes_per_s = 0;
  Milliseconds p2p_latency_ms = 0, allreduce_latency_ms = 0;
  double p2p_fit_error = 0, allreduce_fit_error = 0;
  std::vector<AllreducePoint> allreduce_points;  // measured between two processes
};

[[nodiscard]] Measurement measure_profile(const MeasureOptions& options, const Progress& progress = {});

// The side of a node measurement that runs in the other worker processes
// (rank 1..G-1); returns its exit status.
int run_node_peer(int port, int rank);

// (layers summed - whole model) / whole model, forward and backward
// together; 0 when the whole model was not timed.
[[nodiscard]] double layers_gap(const Measurement& measurement);

// The profile (oobleck.profile.v1) plus `whole_model`, `layers_sum`, `gap`,
// `device`, `library_versions`, `date`, `measured`.
[[nodiscard]] std::string measurement_to_json(const Measurement& measurement);

}  // namespace oobleck::executor
