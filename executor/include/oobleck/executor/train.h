// Training the GPT: options, per-step metrics and the single-process
// reference that a live run (live.h) must reproduce. Plain C++ interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

struct TrainOptions {
  ModelConfig model;
  int microbatch_size = 1;
  int steps = 1;
  std::uint64_t seed = 1;
  double learning_rate = 3e-3;
  double weight_decay = 0.1;
  double clip_norm = 1.0;
  // Where every process trains: cpu, or cuda (the first visible GPU). On
  // CUDA a bf16 profile trains in mixed precision (fp32 weights, bf16
  // matrix products); on CPU always fp32.
  std::string device = "cpu";
  int cuda_device = 0;  // a worker's: its GPU on the node
  bool bf16 = false;
};

struct StepMetrics {
  int step = 0;
  double loss = 0;
  std::int64_t samples = 0;  // sequences trained so far
  Milliseconds iteration_ms = 0;
};

[[nodiscard]] std::string metrics_line(const StepMetrics& m);

// One process, the whole model, `global_microbatches` microbatches per step.
[[nodiscard]] std::vector<StepMetrics> train_single_process(const std::vector<std::uint16_t>& tokens,
                                                            const TrainOptions& options, int global_microbatches);

// From here on this process's CUDA kernels give the same bits every run, as
// the CPU's always do (libtorch's deterministic algorithms, cuBLAS with a
// fixed workspace). Without it, fused attention's backward adds its parts
// in a different order each run (its flash, memory-efficient and cuDNN
// kernels alike, seen on an H200 with libtorch 2.11), and losses agree
// between splits of the batch only to rounding. Call before the process
// first uses the GPU: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it starts.
void use_deterministic_kernels();

// The model, the microbatch size and the precision from `profile`, trained
// on `device` (cpu or cuda). Throws InputError for another device, or for
// cuda where this libtorch sees no GPU.
void apply_profile(TrainOptions& options, const Profile& profile, const std::string& device);

}  // namespace oobleck::executor
