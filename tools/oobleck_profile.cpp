// oobleck-profile: per-layer costs of a GPT, measured with libtorch on this
// machine or derived from FLOP and byte counts on a hardware description.
//
// Exit status: 0 success, 2 bad input, 1 anything unexpected.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli_io.h"
#include "oobleck/common/files.h"
#include "oobleck/executor/analytic.h"
#include "oobleck/executor/blas_kernels.h"
#include "oobleck/executor/links.h"
#include "oobleck/executor/model_config.h"
#include "oobleck/executor/profiler.h"

namespace {

using namespace oobleck;
using namespace oobleck::executor;

// The model both measure and analytic read: a preset or config file at the
// given sequence length. Checks the output path too, before any work.
ModelConfig checked_model(const std::string& model_name, int seq_len, const std::string& out) {
  ModelConfig model = load_model_config(model_name);
  if (is_scripted(model) && model.seq_len != seq_len) {
    throw InputError("--seq-len " + std::to_string(seq_len) + ": the TorchScript model's manifest (" + model_name +
                     ") says seq_len " + std::to_string(model.seq_len));
  }
  model.seq_len = seq_len;
  validate(model, "--model");
  require_output_path("--out", out);
  return model;
}

// ------------------------------------------------------------ measure

struct MeasureFlags {
  std::string model_name, out, device = "cpu", dtype;
  int microbatch_size = 1, seq_len = 0;
  MeasureOptions measure;
  double intra = 0, inter = 0, latency = -1;
  long long memory = 0;
  bool no_links = false;
};

CLI::App* add_measure(CLI::App& app, MeasureFlags& f) {
  auto* cmd = app.add_subcommand("measure", "Time and size every layer on this machine");
  cmd->add_option("--model", f.model_name, "Preset (gpt2-small, gpt3-1.3b, gpt-mini, ...) or config JSON")->required();
  cmd->add_option("--microbatch-size", f.microbatch_size, "Sequences per microbatch")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seq-len", f.seq_len, "Sequence length (the model's context)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--device", f.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", f.dtype, "fp32 (default) or bf16 (CUDA)")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--threads", f.measure.threads,
                  "Intra-op threads per worker (default: every core, shared out among --gpus-per-node)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--gpus-per-node", f.measure.gpus_per_node,
                  "A node of G GPUs (CPU: G worker processes): also time every layer at each tensor-parallel "
                  "degree dividing G")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--repeats", f.measure.repeats, "Timed runs per layer after warm-up (their mean is kept)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", f.measure.seed, "Weights and inputs");
  cmd->add_option("--intra-node-bytes-per-s", f.intra, "Override: bandwidth between GPUs of a node")
      ->check(CLI::Range(1.0, 1e15));
  cmd->add_option("--inter-node-bytes-per-s", f.inter, "Override: bandwidth between nodes")
      ->check(CLI::Range(1.0, 1e15));
  cmd->add_option("--latency-ms", f.latency, "Override: link latency")->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--memory-bytes", f.memory, "Override: memory per GPU (CPU: per node)")
      ->check(CLI::Range(1LL, 1LL << 50));
  cmd->add_option("--out", f.out, "Profile JSON to write")->required();
  cmd->add_flag("--no-links", f.no_links, "Skip measuring point-to-point and all-reduce between two processes");
  return cmd;
}

void print_measurement(const Measurement& m, const ModelConfig& model, const MeasureFlags& f) {
  std::printf("%s, microbatch %d x %d tokens on %s (%d threads, %s)\n", model.name.c_str(), f.microbatch_size,
              f.seq_len, m.device_name.c_str(), m.threads, m.library_versions.c_str());
  std::printf("  %-24s %12s %12s %14s %14s\n", "layer", "forward ms", "backward ms", "params MiB", "activ. MiB");
  for (const auto& l : m.profile.layers) {
    std::printf("  %-24s %12.3f %12.3f %14.2f %14.2f\n", l.name.c_str(), l.forward_ms, l.backward_ms,
                static_cast<double>(l.param_bytes) / (1 << 20), static_cast<double>(l.activation_bytes) / (1 << 20));
  }
  if (m.whole_forward_ms + m.whole_backward_ms > 0) {
    std::printf("  layers summed: %.2f + %.2f ms; whole model: %.2f + %.2f ms; gap %+.1f %%\n", m.layers_forward_ms,
                m.layers_backward_ms, m.whole_forward_ms, m.whole_backward_ms, 100 * layers_gap(m));
  } else {
    std::printf("  layers summed: %.2f + %.2f ms; whole model: does not fit, not timed\n", m.layers_forward_ms,
                m.layers_backward_ms);
  }
  for (const DegreeSums& d : m.node_degrees) {
    std::printf("  layers summed with the node's %d workers busy, degree %d: %.2f + %.2f ms\n",
                m.profile.hardware.gpus_per_node, d.degree, d.forward_ms, d.backward_ms);
  }
  if (m.links_measured) {
    std::printf("  links between two processes (Gloo): %.2f GB/s, %.3f ms one way; all-reduce %.2f GB/s, %.3f ms\n",
                m.p2p_bytes_per_s / 1e9, m.p2p_latency_ms, m.allreduce_bytes_per_s / 1e9, m.allreduce_latency_ms);
  }
}

int run_measure(const MeasureFlags& f) {
  MeasureOptions measure = f.measure;
  measure.model = checked_model(f.model_name, f.seq_len, f.out);
  measure.microbatch_size = f.microbatch_size;
  measure.device = f.device;
  measure.dtype = f.dtype.empty() ? "fp32" : f.dtype;
  if (f.intra > 0) measure.intra_node_bytes_per_s = f.intra;
  if (f.inter > 0) measure.inter_node_bytes_per_s = f.inter;
  if (f.latency >= 0) measure.latency_ms = f.latency;
  if (f.memory > 0) measure.memory_bytes = f.memory;
  measure.program = std::filesystem::read_symlink("/proc/self/exe").string();
  measure.measure_links = !f.no_links;
  const auto start = std::chrono::steady_clock::now();
  const Measurement m = measure_profile(
      measure, [](std::string_view line) { std::cerr << "oobleck-profile: measuring " << line << "\n"; });
  write_file_atomically(f.out, measurement_to_json(m));
  print_measurement(m, measure.model, f);
  std::printf("Wrote %s (%.1f s)\n", f.out.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

// ------------------------------------------------------------ analytic

struct AnalyticFlags {
  std::string model_name, out, dtype, hardware;
  int microbatch_size = 1, seq_len = 0;
  bool sequence_parallel = false;
  std::vector<std::string> fit_paths;
  std::vector<std::string> fit_terms = {"compute", "memory", "overhead"};
};

CLI::App* add_analytic(CLI::App& app, AnalyticFlags& f) {
  auto* cmd = app.add_subcommand("analytic", "Per-layer costs from FLOP and byte counts");
  cmd->add_option("--model", f.model_name, "Preset or config JSON")->required();
  cmd->add_option("--hardware", f.hardware,
                  "a100-80gb, h100-80gb, h200, a description JSON, or cpu (with --fit: this machine, "
                  "from a measured profile)")
      ->required();
  cmd->add_option("--microbatch-size", f.microbatch_size, "Sequences per microbatch")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seq-len", f.seq_len, "Sequence length")->required()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--dtype", f.dtype, "bf16 (default) or fp32")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--fit", f.fit_paths,
                  "Measured profiles of the same device (one or more): fit the efficiencies and the "
                  "per-layer overhead to them (least squares) and report the error");
  cmd->add_flag("--sequence-parallel", f.sequence_parallel,
               "Tensor-parallel costs with sequence parallelism (Korthikanti et al. 2022): a block's "
               "LayerNorms, dropouts and residuals divide among the GPUs too, in time and memory");
  cmd->add_option("--fit-terms", f.fit_terms, "With --fit: the terms it may use (compute, memory, overhead)")
      ->check(CLI::IsMember({"compute", "memory", "overhead"}));
  cmd->add_option("--out", f.out, "Profile JSON to write")->required();
  return cmd;
}

unsigned fit_terms_of(const std::vector<std::string>& names) {
  unsigned terms = 0;
  for (const auto& term : names)
    terms |= term == "compute" ? kFitCompute : term == "memory" ? kFitMemory : kFitOverhead;
  return terms;
}

int run_analytic(const AnalyticFlags& f) {
  const ModelConfig model = checked_model(f.model_name, f.seq_len, f.out);
  const std::string type = f.dtype.empty() ? (f.hardware == "cpu" ? "fp32" : "bf16") : f.dtype;
  std::optional<HardwareDescription> given;
  if (f.hardware == "cpu") {
    if (f.fit_paths.empty()) throw InputError("--hardware cpu: needs --fit MEASURED.json, a profile of this machine");
  } else {
    given = load_hardware(f.hardware);
  }
  HardwareDescription hw = given.value_or(HardwareDescription{});
  std::optional<EfficiencyFit> fit;
  if (!f.fit_paths.empty()) {
    const FittedHardware fitted =
        fit_to_measured(given, f.fit_paths, load_model_config(f.model_name), fit_terms_of(f.fit_terms));
    hw = fitted.hardware;
    fit = fitted.fit;
    std::fprintf(stderr,
                 "oobleck-profile: fitted to %zu measured profile(s) (%d times): compute efficiency %.3f, memory "
                 "efficiency %.3f, overhead %.3f ms per layer; relative error rms %.1f %%, max %.1f %%\n",
                 f.fit_paths.size(), fit->points, fit->compute_efficiency, fit->memory_efficiency,
                 fit->layer_overhead_ms, 100 * fit->rms_relative_error, 100 * fit->max_relative_error);
  }
  AnalyticOptions options;
  options.sequence_parallel = f.sequence_parallel;
  const Profile profile = analytic_profile(model, hw, f.microbatch_size, type, options);
  write_file_atomically(f.out, analytic_profile_to_json(profile, hw, fit ? &*fit : nullptr, f.fit_paths));
  const ProfileTotals totals = profile_totals(profile);
  std::printf(
      "%s (%lld parameters, %s) on %s, microbatch %d x %d: %zu layers, %.2f ms forward + %.2f ms "
      "backward per microbatch on one device\nWrote %s\n",
      model.name.c_str(), static_cast<long long>(model_parameters(model)), type.c_str(), hw.name.c_str(),
      f.microbatch_size, f.seq_len, profile.layers.size(), totals.forward_ms, totals.backward_ms, f.out.c_str());
  return 0;
}

// ------------------------------------------------------------ compare

struct CompareFlags {
  std::string measured_path, predicted_path, json_path;
};

CLI::App* add_compare(CLI::App& app, CompareFlags& f) {
  auto* cmd = app.add_subcommand("compare", "Per-layer error of a predicted profile against a measured one");
  cmd->add_option("--measured", f.measured_path, "Measured profile (oobleck-profile measure)")->required();
  cmd->add_option("--predicted", f.predicted_path, "Predicted profile of the same model (oobleck-profile analytic)")
      ->required();
  cmd->add_option("--json", f.json_path, "Write the comparison as JSON here");
  return cmd;
}

// A table on stdout, JSON on request.
int run_compare(const CompareFlags& f) {
  const Profile measured = load_profile(f.measured_path);
  const Profile predicted = load_profile(f.predicted_path);
  const ProfileComparison c = compare_profiles(measured, predicted);
  std::printf("%s (microbatch %d) on %s: %s against %s\n", measured.model_name.c_str(), measured.microbatch_size,
              measured.hardware.name.c_str(), f.predicted_path.c_str(), f.measured_path.c_str());
  std::printf("  %-24s %11s %11s %8s %11s %11s %8s\n", "layer", "fwd meas.", "fwd pred.", "error", "bwd meas.",
              "bwd pred.", "error");
  for (const auto& l : c.layers) {
    const double ef = l.predicted_forward_ms / l.measured_forward_ms - 1;
    const double eb = l.predicted_backward_ms / l.measured_backward_ms - 1;
    std::printf("  %-24s %11.3f %11.3f %+7.1f%% %11.3f %11.3f %+7.1f%%\n", l.name.c_str(), l.measured_forward_ms,
                l.predicted_forward_ms, 100 * ef, l.measured_backward_ms, l.predicted_backward_ms, 100 * eb);
  }
  std::printf(
      "  every layer, forward and backward: measured %.2f ms, predicted %.2f ms (%+.1f %%); per-layer "
      "error rms %.1f %%, max %.1f %%\n",
      c.measured_ms, c.predicted_ms, 100 * c.total_relative_error, 100 * c.rms_relative_error,
      100 * c.max_relative_error);
  if (!f.json_path.empty()) {
    write_file_atomically(f.json_path, comparison_to_json(c, measured, f.measured_path, f.predicted_path));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  oobleck::executor::use_best_blas_kernels(argv);
  CLI::App app{"oobleck-profile: per-layer costs of a GPT, measured with libtorch or derived analytically"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oobleck-profile " OOBLECK_VERSION);
  MeasureFlags measure_flags;
  AnalyticFlags analytic_flags;
  CompareFlags compare_flags;
  const auto* measure_cmd = add_measure(app, measure_flags);
  add_analytic(app, analytic_flags);
  const auto* compare_cmd = add_compare(app, compare_flags);
  int peer_port = 0, node_rank = 0;
  auto* peer_cmd = app.add_subcommand("comm-peer", "(internal) the second process of the link measurement");
  peer_cmd->add_option("--port", peer_port)->required()->check(CLI::Range(1, 65535));
  peer_cmd->group("");  // not listed in --help
  auto* node_cmd = app.add_subcommand("node-peer", "(internal) another worker of a node's measurement");
  node_cmd->add_option("--port", peer_port)->required()->check(CLI::Range(1, 65535));
  node_cmd->add_option("--rank", node_rank)->required()->check(CLI::Range(1, 63));
  node_cmd->group("");

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;
  if (*peer_cmd)
    return cli::run_reporting_errors("oobleck-profile comm-peer", [&] { return run_comm_peer(peer_port); });
  if (*node_cmd) {
    return cli::run_reporting_errors("oobleck-profile node-peer", [&] { return run_node_peer(peer_port, node_rank); });
  }
  return cli::run_reporting_errors("oobleck-profile", [&]() -> int {
    if (*compare_cmd) return run_compare(compare_flags);
    if (*measure_cmd) return run_measure(measure_flags);
    return run_analytic(analytic_flags);
  });
}
