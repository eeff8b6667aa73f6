// Training a plan: the same GPT trained by one process (the reference) or by
// the plan's pipelines as separate worker processes, which must give the
// same losses. Plain C++ interface.
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

struct WorkerResult {
  std::vector<StepMetrics> metrics;  // rank 0 only
  // Rank 0 only: the last step's schedule in the Chrome trace format of
  // `oobleck-sim iteration`, and a per-stage timing summary.
  std::string chrome_trace;
  std::string stage_summary;
};

// One worker of a plan: world rank `rank` among every node of the plan
// (pipelines in order, nodes in order), rendezvous at master_addr:`port`.
[[nodiscard]] WorkerResult train_worker(const std::vector<std::uint16_t>& tokens, const TrainOptions& options,
                                        const Plan& plan, int rank, const std::string& master_addr, int port);

// The model of a profile's `model` section.
[[nodiscard]] ModelConfig model_of_profile(const Profile& profile);

}  // namespace oobleck::executor
