// The fit of an analytic profile's efficiencies and per-layer overhead to
// measured profiles, and the comparison of the two, layer by layer.
#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "oobleck/common/files.h"
#include "oobleck/executor/analytic.h"

namespace oobleck::executor {

EfficiencyFit fit_efficiency(const Profile& measured, const ModelConfig& c, const HardwareDescription& hw,
                             const std::string& dtype) {
  return fit_efficiency(std::vector<FitInput>{{&measured, c, dtype}}, hw);
}

EfficiencyFit fit_efficiency(const std::vector<FitInput>& inputs, const HardwareDescription& hw, unsigned terms) {
  // t = x_c flops / peak + x_m bytes / bandwidth + x_o (seconds), each row
  // divided by t so that the fit minimises relative error; efficiencies are
  // 1 / x, the overhead x_o.
  std::vector<std::array<double, 3>> rows;
  for (const auto& in : inputs) {
    const Profile& measured = *in.measured;
    const ModelConfig& c = in.model;
    if (static_cast<int>(measured.layers.size()) != pipeline_layers(c)) {
      throw InputError(measured.origin + ": " + std::to_string(measured.layers.size()) + " layers, but " + c.name +
                       " has " + std::to_string(pipeline_layers(c)));
    }
    const int e = in.dtype == "bf16" ? 2 : 4;
    const double peak = peak_for(hw, in.dtype), bandwidth = hw.memory_bytes_per_s;
    for (int i = 0; i < pipeline_layers(c); ++i) {
      const LayerWork w = layer_work(c, i, measured.microbatch_size, e);
      const double t_f = measured.layers[i].forward_ms / 1000.0, t_b = measured.layers[i].backward_ms / 1000.0;
      if (!(t_f > 0) || !(t_b > 0)) throw InputError(measured.origin + ": layer " + std::to_string(i) + ": no time");
      rows.push_back({w.flops / peak / t_f, w.bytes / bandwidth / t_f, 1 / t_f});
      rows.push_back({2 * w.flops / peak / t_b, 2 * w.bytes / bandwidth / t_b, 2 / t_b});
    }
  }
  const int n = static_cast<int>(rows.size());
  Eigen::MatrixXd A(n, 3);
  for (int r = 0; r < n; ++r) A.row(r) << rows[r][0], rows[r][1], rows[r][2];
  const Eigen::VectorXd y = Eigen::VectorXd::Ones(n);
  // Non-negative least squares by trying every subset of the three terms:
  // the best fit whose coefficients are all non-negative wins.
  Eigen::Vector3d best = Eigen::Vector3d::Zero();
  double best_residual = std::numeric_limits<double>::infinity();
  for (unsigned subset = 1; subset < 8; ++subset) {
    if ((subset & terms) != subset) continue;
    std::vector<int> chosen;
    for (int k = 0; k < 3; ++k) {
      if (subset & (1U << k)) chosen.push_back(k);
    }
    Eigen::MatrixXd sub(n, static_cast<Eigen::Index>(chosen.size()));
    for (std::size_t j = 0; j < chosen.size(); ++j) sub.col(static_cast<Eigen::Index>(j)) = A.col(chosen[j]);
    const Eigen::VectorXd solution = sub.colPivHouseholderQr().solve(y);
    if ((solution.array() < 0).any()) continue;
    const double residual = (sub * solution - y).squaredNorm();
    if (residual < best_residual) {
      best_residual = residual;
      best.setZero();
      for (std::size_t j = 0; j < chosen.size(); ++j) best(chosen[j]) = solution(static_cast<Eigen::Index>(j));
    }
  }
  EfficiencyFit fit;
  fit.points = n;
  fit.compute_efficiency = best(0) > 0 ? 1 / best(0) : 0;
  fit.memory_efficiency = best(1) > 0 ? 1 / best(1) : 0;
  fit.layer_overhead_ms = best(2) * 1000.0;
  const Eigen::VectorXd relative = A * best - y;  // predicted / measured - 1
  fit.rms_relative_error = std::sqrt(relative.squaredNorm() / n);
  fit.max_relative_error = relative.cwiseAbs().maxCoeff();
  return fit;
}

ProfileComparison compare_profiles(const Profile& measured, const Profile& predicted) {
  if (measured.layers.size() != predicted.layers.size()) {
    throw InputError(predicted.origin + ": " + std::to_string(predicted.layers.size()) + " layers, but " +
                     measured.origin + " has " + std::to_string(measured.layers.size()));
  }
  if (measured.microbatch_size != predicted.microbatch_size) {
    throw InputError(predicted.origin + ": microbatch_size " + std::to_string(predicted.microbatch_size) +
                     ", but " + measured.origin + " has " + std::to_string(measured.microbatch_size));
  }
  ProfileComparison out;
  double squares = 0;
  for (std::size_t i = 0; i < measured.layers.size(); ++i) {
    const auto& m = measured.layers[i];
    const auto& p = predicted.layers[i];
    if (!(m.forward_ms > 0) || !(m.backward_ms > 0)) {
      throw InputError(measured.origin + ": layer " + std::to_string(i) + ": no time");
    }
    out.layers.push_back({m.name, m.forward_ms, m.backward_ms, p.forward_ms, p.backward_ms});
    for (const double error : {p.forward_ms / m.forward_ms - 1, p.backward_ms / m.backward_ms - 1}) {
      squares += error * error;
      out.max_relative_error = std::max(out.max_relative_error, std::abs(error));
    }
    out.measured_ms += m.forward_ms + m.backward_ms;
    out.predicted_ms += p.forward_ms + p.backward_ms;
  }
  if (!out.layers.empty()) out.rms_relative_error = std::sqrt(squares / (2.0 * static_cast<double>(out.layers.size())));
  out.total_relative_error = out.predicted_ms / out.measured_ms - 1;
  return out;
}

std::string comparison_to_json(const ProfileComparison& comparison, const Profile& measured,
                               const std::string& measured_path, const std::string& predicted_path) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& l : comparison.layers) {
    layers.push_back({{"name", l.name},
                      {"measured_forward_ms", l.measured_forward_ms},
                      {"predicted_forward_ms", l.predicted_forward_ms},
                      {"measured_backward_ms", l.measured_backward_ms},
                      {"predicted_backward_ms", l.predicted_backward_ms}});
  }
  const nlohmann::ordered_json doc = {{"measured", measured_path},
                                      {"predicted", predicted_path},
                                      {"model", measured.model_name},
                                      {"microbatch_size", measured.microbatch_size},
                                      {"device", measured.hardware.name},
                                      {"measured_ms", comparison.measured_ms},
                                      {"predicted_ms", comparison.predicted_ms},
                                      {"total_relative_error", comparison.total_relative_error},
                                      {"rms_relative_error", comparison.rms_relative_error},
                                      {"max_relative_error", comparison.max_relative_error},
                                      {"layers", layers}};
  return doc.dump(2) + "\n";
}

}  // namespace oobleck::executor
