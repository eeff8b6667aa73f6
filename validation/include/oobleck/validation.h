// Validation of the cost model against published measurements: each
// measured training run (a model, its parallel degrees, batch and
// recomputation, and the iteration time measured) is rebuilt as an analytic
// profile and a plan, played by oobleck-sim's iteration model, and the
// prediction compared with the measurement. The hardware's efficiencies are
// calibrated once, on a named subset of the runs, and the error is reported
// on the others.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/common.h"
#include "oobleck/executor/analytic.h"
#include "oobleck/executor/model_config.h"

namespace oobleck::validation {

// One measured run, as the datasets describe it.
struct MeasuredRun {
  std::string dataset;
  int row = 0;              // 1-based, in the dataset's order
  std::string label;        // "t2 d2 p2, h1024 L24 s1024, mb 4 B 32" or the model's name
  executor::ModelConfig model;  // vocab padded as Megatron pads it
  int feedforward = 0;          // 4 h in every run the model can express
  int gpus = 0, tensor = 1, pipeline = 1, data = 1;
  int global_batch = 0, microbatch = 1;
  int interleave = 1;           // virtual stages per GPU
  std::string recompute = "full";  // full, or selective (attention only)
  bool sequence_parallel = false;
  Milliseconds measured_ms = 0;
};

// The links of the cluster a dataset was measured on (its GPUs are the
// suite's hardware).
struct DatasetCluster {
  double intra_node_bytes_per_s = 0;  // 0: the hardware's
  double inter_node_bytes_per_s = 0;
};

struct Dataset {
  std::string name;
  std::string file;  // as the suite names it
  std::string source;
  DatasetCluster cluster;
  int calibrate_every = 0;  // rows 1, 1 + k, 1 + 2k, ... calibrate; 0: none
  double max_mean_error = 0, max_worst_error = 0;  // bounds (fractions) on the rows not calibrated on
  std::vector<MeasuredRun> runs;
};

// tests/validation/suite.json (oobleck.validation-suite.v1): the datasets
// beside it, their clusters, calibration subsets and bounds. Bad input is
// an InputError naming the file, the line or field.
struct Suite {
  std::filesystem::path path;
  std::string hardware = "a100-80gb";  // a preset of oobleck-profile analytic, or a file beside the suite
  // The largest share of the matrix peak the calibration may give the
  // hardware: what its best matrix products were measured to reach (runs
  // of small models leave the share between there and 1 undetermined).
  double max_compute_efficiency = 1;
  std::vector<Dataset> datasets;
};
[[nodiscard]] Suite load_suite(const std::filesystem::path& path);
// The runs of one dataset's text (`csv`: vTrain's columns; otherwise
// oobleck.validation.v1), `origin` naming it in messages.
[[nodiscard]] std::vector<MeasuredRun> parse_dataset(std::string_view text, const std::string& origin, bool csv,
                                                     const std::string& name);

// Megatron's vocabulary padding: up to a multiple of 128 x the tensor degree.
[[nodiscard]] int padded_vocab(int vocab, int tensor);

// What the iteration model cannot express of a run yet ("" when it can).
[[nodiscard]] std::string unsupported(const MeasuredRun& run);

// The predicted iteration time of a run on `hardware` (links as `cluster`
// gives them), each stage also spending `microbatch_overhead_ms` per
// microbatch (the framework's own work: scheduling the pass, its Python,
// the data). Throws std::invalid_argument for an unsupported run.
[[nodiscard]] Milliseconds predict_ms(const MeasuredRun& run, const executor::HardwareDescription& hardware,
                                      const DatasetCluster& cluster, Milliseconds microbatch_overhead_ms = 0);

// The efficiencies and the per-layer overhead of `hardware`, and the
// framework's overhead per microbatch, that minimise
// the mean absolute relative error over the calibration rows of every
// dataset (a deterministic pattern search in log space).
struct Calibration {
  executor::HardwareDescription hardware;
  Milliseconds microbatch_overhead_ms = 0;
  int rows = 0;
  double mean_error = 0;  // on those rows
};
[[nodiscard]] Calibration calibrate(const Suite& suite, const executor::HardwareDescription& start,
                                    const Progress& progress = {});

struct RowResult {
  const MeasuredRun* run = nullptr;
  bool calibration = false;
  std::string unsupported;  // not predicted when set
  Milliseconds predicted_ms = 0;
  double error = 0;  // predicted / measured - 1
};

struct ErrorSummary {
  int rows = 0;
  double mean = 0, median = 0, worst = 0;  // of |error|
};

struct DatasetResult {
  const Dataset* dataset = nullptr;
  std::vector<RowResult> rows;
  ErrorSummary held_out;     // rows not calibrated on
  ErrorSummary calibration;  // rows calibrated on
  int unsupported = 0;
  bool within_bounds = true;
};

struct ValidationResult {
  Calibration calibration;
  std::vector<DatasetResult> datasets;
  [[nodiscard]] bool within_bounds() const;
};

// Every run predicted on the calibrated hardware.
[[nodiscard]] ValidationResult validate(const Suite& suite, const Calibration& calibration);

[[nodiscard]] ErrorSummary summarise(const std::vector<double>& absolute_errors);

// A readable report: the calibration, then per dataset its errors and a
// table per group of runs (parallel degrees) or per run.
[[nodiscard]] std::string validation_report(const ValidationResult& result, bool every_row);
// {"format": "oobleck.validation-result.v1", "calibration": {...}, "datasets": [{..., "rows": [...]}]}.
[[nodiscard]] std::string validation_to_json(const ValidationResult& result);

}  // namespace oobleck::validation
