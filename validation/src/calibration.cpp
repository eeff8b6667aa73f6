// Calibration and validation.
//
// Six numbers are fitted: the share of the matrix-product peak reached,
// the share of the memory bandwidth reached, a fixed device time per layer
// pass, the host's time to launch a layer's kernels (which overlaps the
// device's work), a fixed time per microbatch on each stage (the
// framework's scheduling), and the links' latency per ring step (what a
// small collective costs). The objective is the
// mean absolute relative error of the predicted iteration over the
// calibration rows, which is not smooth in the parameters (the pipeline's
// critical path switches between stages), so the search is a plain pattern
// search: try each parameter up and down by a factor, keep any improvement,
// halve the factor's exponent when nothing improves. Deterministic, and a
// few hundred predictions of each calibration row.
#include <algorithm>
#include <array>
#include <cmath>

#include "oobleck/validation.h"

namespace oobleck::validation {
namespace {

bool calibrates(const Dataset& d, const MeasuredRun& r) {
  return d.calibrate_every > 0 && (r.row - 1) % d.calibrate_every == 0;
}

// The overhead is searched as log(overhead + 1 us), so that 0 is reachable.
constexpr double kOverheadFloorMs = 0.001;

using Parameters = std::array<double, 6>;

executor::HardwareDescription with(const executor::HardwareDescription& base, const Parameters& x) {
  executor::HardwareDescription hw = base;
  hw.compute_efficiency = std::exp(x[0]);
  hw.memory_efficiency = std::exp(x[1]);
  hw.layer_overhead_ms = std::max(0.0, std::exp(x[2]) - kOverheadFloorMs);
  hw.latency_ms = std::exp(x[4]);
  hw.layer_launch_ms = std::max(0.0, std::exp(x[5]) - kOverheadFloorMs);
  return hw;
}

}  // namespace

Calibration calibrate(const Suite& suite, const executor::HardwareDescription& start, const Progress& progress) {
  std::vector<std::pair<const MeasuredRun*, const DatasetCluster*>> rows;
  for (const auto& d : suite.datasets) {
    for (const auto& r : d.runs) {
      if (calibrates(d, r) && unsupported(r).empty()) rows.emplace_back(&r, &d.cluster);
    }
  }
  Calibration out;
  out.hardware = start;
  out.rows = static_cast<int>(rows.size());
  if (rows.empty()) return out;
  const auto microbatch_overhead = [](const Parameters& x) { return std::max(0.0, std::exp(x[3]) - kOverheadFloorMs); };
  const auto objective = [&](const Parameters& x) {
    const auto hw = with(start, x);
    double sum = 0;
    for (const auto& [run, cluster] : rows) {
      sum += std::abs(predict_ms(*run, hw, *cluster, microbatch_overhead(x)) / run->measured_ms - 1);
    }
    return sum / static_cast<double>(rows.size());
  };
  Parameters x = {std::log(std::clamp(start.compute_efficiency, 0.01, suite.max_compute_efficiency)),
                  std::log(std::clamp(start.memory_efficiency, 0.01, 1.0)),
                  std::log(start.layer_overhead_ms + kOverheadFloorMs), std::log(kOverheadFloorMs),
                  std::log(std::clamp(start.latency_ms, 0.001, 1.0)),
                  // (From 1 ms at least: a launch far below every pass's work
                  // changes nothing, and the search would never leave it.)
                  std::log(std::max(start.layer_launch_ms, 1.0) + kOverheadFloorMs)};
  // Efficiencies stay in [1 %, 100 %] (the matrix share at most the
  // suite's measured ceiling); the overheads in [0, 10 ms] and [0, 100 ms],
  // the launch in [0, 10 ms]; a link's latency in [1 us, 1 ms].
  const Parameters lowest = {std::log(0.01), std::log(0.01), std::log(kOverheadFloorMs), std::log(kOverheadFloorMs),
                             std::log(0.001), std::log(kOverheadFloorMs)};
  const Parameters highest = {std::log(suite.max_compute_efficiency), 0.0, std::log(10.0), std::log(100.0), 0.0,
                              std::log(10.0)};
  double best = objective(x);
  double step = 1.0;  // in log space: a factor of e
  int evaluations = 1;
  while (step > 0.005) {
    bool improved = false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      for (const double direction : {1.0, -1.0}) {
        auto trial = x;
        trial[i] = std::clamp(x[i] + direction * step, lowest[i], highest[i]);
        if (trial[i] == x[i]) continue;
        const double value = objective(trial);
        ++evaluations;
        if (value < best) {
          best = value;
          x = trial;
          improved = true;
        }
      }
    }
    if (!improved) step /= 2;
    if (progress) {
      progress("calibrating: " + std::to_string(evaluations) + " trials, mean error " +
               std::to_string(best * 100).substr(0, 5) + " %");
    }
  }
  out.hardware = with(start, x);
  out.microbatch_overhead_ms = microbatch_overhead(x);
  out.mean_error = best;
  return out;
}

ErrorSummary summarise(const std::vector<double>& absolute_errors) {
  ErrorSummary s;
  s.rows = static_cast<int>(absolute_errors.size());
  if (absolute_errors.empty()) return s;
  auto sorted = absolute_errors;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double e : sorted) sum += e;
  s.mean = sum / static_cast<double>(sorted.size());
  const std::size_t n = sorted.size();
  s.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  s.worst = sorted.back();
  return s;
}

ValidationResult validate(const Suite& suite, const Calibration& calibration) {
  ValidationResult result;
  result.calibration = calibration;
  for (const auto& d : suite.datasets) {
    DatasetResult dr;
    dr.dataset = &d;
    std::vector<double> held_out, calibrated;
    for (const auto& r : d.runs) {
      RowResult row;
      row.run = &r;
      row.calibration = calibrates(d, r);
      row.unsupported = unsupported(r);
      if (row.unsupported.empty()) {
        row.predicted_ms = predict_ms(r, calibration.hardware, d.cluster, calibration.microbatch_overhead_ms);
        row.error = row.predicted_ms / r.measured_ms - 1;
        (row.calibration ? calibrated : held_out).push_back(std::abs(row.error));
      } else {
        ++dr.unsupported;
      }
      dr.rows.push_back(std::move(row));
    }
    dr.held_out = summarise(held_out);
    dr.calibration = summarise(calibrated);
    dr.within_bounds = dr.held_out.mean <= d.max_mean_error && dr.held_out.worst <= d.max_worst_error;
    result.datasets.push_back(std::move(dr));
  }
  return result;
}

bool ValidationResult::within_bounds() const {
  return std::all_of(datasets.begin(), datasets.end(), [](const DatasetResult& d) { return d.within_bounds; });
}

}  // namespace oobleck::validation
