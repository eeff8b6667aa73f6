// oobleck-profile: per-layer costs of a GPT, measured with libtorch on this
// machine or derived from FLOP and byte counts on a hardware description.
//
// Exit status: 0 success, 2 bad input, 1 anything unexpected.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "oobleck/common/files.h"
#include "cli_io.h"
#include "oobleck/executor/analytic.h"
#include "oobleck/executor/links.h"
#include "oobleck/executor/model_config.h"
#include "oobleck/executor/profiler.h"
#include "oobleck/executor/train.h"

namespace {

using namespace oobleck;
using namespace oobleck::executor;

// The measured profile's own numbers describe its device for the fit.
HardwareDescription hardware_of_measurement(const nlohmann::json& doc, const Profile& measured) {
  HardwareDescription h;
  h.key = "cpu";
  h.name = measured.hardware.name;
  h.source = "measured by oobleck-profile (" + doc.value("date", std::string("?")) +
             "): a 1024x1024 fp32 matrix product and a 256 MiB copy";
  h.gpus_per_node = measured.hardware.gpus_per_node;
  h.gpu_memory_bytes = measured.hardware.gpu_memory_bytes;
  if (!doc.contains("measured") || !doc["measured"].contains("gemm_flops_per_s")) {
    throw InputError(measured.origin + ": measured.gemm_flops_per_s: missing; expected a profile from "
                                       "oobleck-profile measure");
  }
  h.peak_fp32_flops_per_s = doc["measured"]["gemm_flops_per_s"].get<double>();
  h.memory_bytes_per_s = doc["measured"]["copy_bytes_per_s"].get<double>();
  h.intra_node_bytes_per_s = measured.hardware.intra_node_bytes_per_s;
  h.inter_node_bytes_per_s = measured.hardware.inter_node_bytes_per_s;
  h.latency_ms = measured.hardware.latency_ms;
  return h;
}

std::string analytic_json(const Profile& profile, const HardwareDescription& hw, const EfficiencyFit* fit,
                          const std::vector<std::string>& fitted_to) {
  auto doc = nlohmann::ordered_json::parse(profile_to_json(profile));
  doc["description"] = "Analytic, by oobleck-profile: per-layer forward time = FLOPs / (peak x compute "
                       "efficiency) + bytes moved / (memory bandwidth x memory efficiency) + a fixed per-layer "
                       "overhead, backward twice that; "
                       "standard transformer counts (24bsh^2 + 4bs^2h FLOPs per block).";
  doc["hardware_description"] = {{"key", hw.key},
                                 {"source", hw.source},
                                 {"peak_fp32_flops_per_s", hw.peak_fp32_flops_per_s},
                                 {"peak_bf16_flops_per_s", hw.peak_bf16_flops_per_s},
                                 {"memory_bytes_per_s", hw.memory_bytes_per_s},
                                 {"compute_efficiency", hw.compute_efficiency},
                                 {"memory_efficiency", hw.memory_efficiency},
                                 {"layer_overhead_ms", hw.layer_overhead_ms}};
  if (fit) {
    doc["fit"] = {{"measured_profiles", fitted_to},
                  {"layer_overhead_ms", fit->layer_overhead_ms},
                  {"points", fit->points},
                  {"compute_efficiency", fit->compute_efficiency},
                  {"memory_efficiency", fit->memory_efficiency},
                  {"rms_relative_error", fit->rms_relative_error},
                  {"max_relative_error", fit->max_relative_error}};
  }
  return doc.dump(2) + "\n";
}

// `compare`: a table on stdout, JSON on request.
int compare(const std::string& measured_path, const std::string& predicted_path, const std::string& json_path) {
  const Profile measured = load_profile(measured_path);
  const Profile predicted = load_profile(predicted_path);
  const ProfileComparison c = compare_profiles(measured, predicted);
  std::printf("%s (microbatch %d) on %s: %s against %s\n", measured.model_name.c_str(), measured.microbatch_size,
              measured.hardware.name.c_str(), predicted_path.c_str(), measured_path.c_str());
  std::printf("  %-24s %11s %11s %8s %11s %11s %8s\n", "layer", "fwd meas.", "fwd pred.", "error", "bwd meas.",
              "bwd pred.", "error");
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& l : c.layers) {
    const double ef = l.predicted_forward_ms / l.measured_forward_ms - 1;
    const double eb = l.predicted_backward_ms / l.measured_backward_ms - 1;
    std::printf("  %-24s %11.3f %11.3f %+7.1f%% %11.3f %11.3f %+7.1f%%\n", l.name.c_str(), l.measured_forward_ms,
                l.predicted_forward_ms, 100 * ef, l.measured_backward_ms, l.predicted_backward_ms, 100 * eb);
    layers.push_back({{"name", l.name},
                      {"measured_forward_ms", l.measured_forward_ms},
                      {"predicted_forward_ms", l.predicted_forward_ms},
                      {"measured_backward_ms", l.measured_backward_ms},
                      {"predicted_backward_ms", l.predicted_backward_ms}});
  }
  const double total = c.predicted_ms / c.measured_ms - 1;
  std::printf("  every layer, forward and backward: measured %.2f ms, predicted %.2f ms (%+.1f %%); per-layer "
              "error rms %.1f %%, max %.1f %%\n",
              c.measured_ms, c.predicted_ms, 100 * total, 100 * c.rms_relative_error, 100 * c.max_relative_error);
  if (!json_path.empty()) {
    const nlohmann::ordered_json doc = {{"measured", measured_path},
                                        {"predicted", predicted_path},
                                        {"model", measured.model_name},
                                        {"microbatch_size", measured.microbatch_size},
                                        {"device", measured.hardware.name},
                                        {"measured_ms", c.measured_ms},
                                        {"predicted_ms", c.predicted_ms},
                                        {"total_relative_error", total},
                                        {"rms_relative_error", c.rms_relative_error},
                                        {"max_relative_error", c.max_relative_error},
                                        {"layers", layers}};
    write_file_atomically(json_path, doc.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-profile: per-layer costs of a GPT, measured with libtorch or derived analytically"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oobleck-profile 0.1.0");

  std::string model_name, out, device = "cpu", dtype, hardware;
  std::vector<std::string> fit_paths;
  int microbatch_size = 1, seq_len = 0;
  MeasureOptions measure;
  double intra = 0, inter = 0, latency = -1;
  long long memory = 0;

  auto* measure_cmd = app.add_subcommand("measure", "Time and size every layer on this machine");
  measure_cmd->add_option("--model", model_name, "Preset (gpt2-small, gpt3-1.3b, gpt-mini, ...) or config JSON")
      ->required();
  measure_cmd->add_option("--microbatch-size", microbatch_size, "Sequences per microbatch")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  measure_cmd->add_option("--seq-len", seq_len, "Sequence length (the model's context)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  measure_cmd->add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  measure_cmd->add_option("--dtype", dtype, "fp32 (default) or bf16 (CUDA)")->check(CLI::IsMember({"fp32", "bf16"}));
  measure_cmd->add_option("--threads", measure.threads, "Intra-op threads (default: every core)")
      ->check(CLI::Range(1, 4096));
  measure_cmd->add_option("--repeats", measure.repeats, "Timed runs per layer (the median is kept)")
      ->check(CLI::Range(1, 1000));
  measure_cmd->add_option("--seed", measure.seed, "Weights and inputs");
  measure_cmd->add_option("--intra-node-bytes-per-s", intra, "Override: bandwidth between GPUs of a node")
      ->check(CLI::Range(1.0, 1e15));
  measure_cmd->add_option("--inter-node-bytes-per-s", inter, "Override: bandwidth between nodes")
      ->check(CLI::Range(1.0, 1e15));
  measure_cmd->add_option("--latency-ms", latency, "Override: link latency")->check(CLI::Range(0.0, 1e6));
  measure_cmd->add_option("--memory-bytes", memory, "Override: memory per GPU (CPU: per node)")
      ->check(CLI::Range(1LL, 1LL << 50));
  measure_cmd->add_option("--out", out, "Profile JSON to write")->required();

  auto* analytic_cmd = app.add_subcommand("analytic", "Per-layer costs from FLOP and byte counts");
  analytic_cmd->add_option("--model", model_name, "Preset or config JSON")->required();
  analytic_cmd->add_option("--hardware", hardware,
                           "a100-80gb, h100-80gb, h200, a description JSON, or cpu (with --fit: this machine, "
                           "from a measured profile)")
      ->required();
  analytic_cmd->add_option("--microbatch-size", microbatch_size, "Sequences per microbatch")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  analytic_cmd->add_option("--seq-len", seq_len, "Sequence length")->required()->check(CLI::Range(1, 1 << 20));
  analytic_cmd->add_option("--dtype", dtype, "bf16 (default) or fp32")->check(CLI::IsMember({"fp32", "bf16"}));
  analytic_cmd->add_option("--fit", fit_paths,
                           "Measured profiles of the same device (one or more): fit the efficiencies and the "
                           "per-layer overhead to them (least squares) and report the error");
  std::vector<std::string> fit_terms = {"compute", "memory", "overhead"};
  analytic_cmd->add_option("--fit-terms", fit_terms, "With --fit: the terms it may use (compute, memory, overhead)")
      ->check(CLI::IsMember({"compute", "memory", "overhead"}));
  analytic_cmd->add_option("--out", out, "Profile JSON to write")->required();

  std::string measured_path, predicted_path, compare_json;
  auto* compare_cmd = app.add_subcommand("compare", "Per-layer error of a predicted profile against a measured one");
  compare_cmd->add_option("--measured", measured_path, "Measured profile (oobleck-profile measure)")->required();
  compare_cmd->add_option("--predicted", predicted_path, "Predicted profile of the same model (oobleck-profile analytic)")
      ->required();
  compare_cmd->add_option("--json", compare_json, "Write the comparison as JSON here");

  bool no_links = false;
  measure_cmd->add_flag("--no-links", no_links, "Skip measuring point-to-point and all-reduce between two processes");
  int peer_port = 0;
  auto* peer_cmd = app.add_subcommand("comm-peer", "(internal) the second process of the link measurement");
  peer_cmd->add_option("--port", peer_port)->required()->check(CLI::Range(1, 65535));
  peer_cmd->group("");  // not listed in --help

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;
  if (*peer_cmd) return cli::run_reporting_errors("oobleck-profile comm-peer", [&] { return run_comm_peer(peer_port); });

  return cli::run_reporting_errors("oobleck-profile", [&]() -> int {
    if (*compare_cmd) return compare(measured_path, predicted_path, compare_json);
    ModelConfig model = load_model_config(model_name);
    model.seq_len = seq_len;
    validate(model, "--model");
    require_output_path("--out", out);

    if (*measure_cmd) {
      measure.model = model;
      measure.microbatch_size = microbatch_size;
      measure.device = device;
      measure.dtype = dtype.empty() ? "fp32" : dtype;
      if (intra > 0) measure.intra_node_bytes_per_s = intra;
      if (inter > 0) measure.inter_node_bytes_per_s = inter;
      if (latency >= 0) measure.latency_ms = latency;
      if (memory > 0) measure.memory_bytes = memory;
      if (!no_links) measure.link_program = std::filesystem::read_symlink("/proc/self/exe").string();
      const auto start = std::chrono::steady_clock::now();
      const Measurement m = measure_profile(measure, [](std::string_view line) {
        std::cerr << "oobleck-profile: measuring " << line << "\n";
      });
      write_file_atomically(out, measurement_to_json(m));
      const double whole = m.whole_forward_ms + m.whole_backward_ms;
      const double sum = m.layers_forward_ms + m.layers_backward_ms;
      std::printf("%s, microbatch %d x %d tokens on %s (%d threads, %s)\n", model.name.c_str(), microbatch_size,
                  seq_len, m.device_name.c_str(), m.threads, m.library_versions.c_str());
      std::printf("  %-24s %12s %12s %14s %14s\n", "layer", "forward ms", "backward ms", "params MiB", "activ. MiB");
      for (const auto& l : m.profile.layers) {
        std::printf("  %-24s %12.3f %12.3f %14.2f %14.2f\n", l.name.c_str(), l.forward_ms, l.backward_ms,
                    static_cast<double>(l.param_bytes) / (1 << 20), static_cast<double>(l.activation_bytes) / (1 << 20));
      }
      if (whole > 0) {
        std::printf("  layers summed: %.2f + %.2f ms; whole model: %.2f + %.2f ms; gap %+.1f %%\n",
                    m.layers_forward_ms, m.layers_backward_ms, m.whole_forward_ms, m.whole_backward_ms,
                    100 * (sum / whole - 1));
      } else {
        std::printf("  layers summed: %.2f + %.2f ms; whole model: does not fit, not timed\n", m.layers_forward_ms,
                    m.layers_backward_ms);
      }
      if (m.links_measured) {
        std::printf("  links between two processes (Gloo): %.2f GB/s, %.3f ms one way; all-reduce %.2f GB/s, %.3f ms\n",
                    m.p2p_bytes_per_s / 1e9, m.p2p_latency_ms, m.allreduce_bytes_per_s / 1e9, m.allreduce_latency_ms);
      }
      std::printf("Wrote %s (%.1f s)\n", out.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return 0;
    }

    // analytic
    const std::string type = dtype.empty() ? (hardware == "cpu" ? "fp32" : "bf16") : dtype;
    HardwareDescription hw;
    std::optional<EfficiencyFit> fit;
    if (hardware == "cpu") {
      if (fit_paths.empty()) throw InputError("--hardware cpu: needs --fit MEASURED.json, a profile of this machine");
    } else {
      hw = load_hardware(hardware);
    }
    if (!fit_paths.empty()) {
      // Each measured profile brings its own model and dtype.
      std::vector<Profile> measured;
      std::vector<FitInput> inputs;
      measured.reserve(fit_paths.size());
      for (const auto& path : fit_paths) {
        const std::string text = read_text_file(path);
        measured.push_back(parse_profile(text, path));
        const auto doc = nlohmann::json::parse(text);
        if (hardware == "cpu" && inputs.empty()) hw = hardware_of_measurement(doc, measured.back());
        // The measured model is the profile's own (hand-written profiles
        // may have none: then --model's).
        const auto model_doc = nlohmann::json::parse(measured.back().model_json, nullptr, false);
        const bool described = model_doc.is_object() && model_doc.contains("layers");
        inputs.push_back({nullptr, described ? model_of_profile(measured.back()) : load_model_config(model_name),
                          described ? model_doc.value("dtype", "fp32") : "fp32"});
      }
      for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i].measured = &measured[i];
      unsigned terms = 0;
      for (const auto& term : fit_terms) {
        terms |= term == "compute" ? kFitCompute : term == "memory" ? kFitMemory : kFitOverhead;
      }
      fit = fit_efficiency(inputs, hw, terms);
      hw.compute_efficiency = fit->compute_efficiency;
      hw.memory_efficiency = fit->memory_efficiency;
      hw.layer_overhead_ms = fit->layer_overhead_ms;
      std::fprintf(stderr,
                   "oobleck-profile: fitted to %zu measured profile(s) (%d times): compute efficiency %.3f, memory "
                   "efficiency %.3f, overhead %.3f ms per layer; relative error rms %.1f %%, max %.1f %%\n",
                   fit_paths.size(), fit->points, fit->compute_efficiency, fit->memory_efficiency,
                   fit->layer_overhead_ms, 100 * fit->rms_relative_error, 100 * fit->max_relative_error);
    }
    const Profile profile = analytic_profile(model, hw, microbatch_size, type);
    write_file_atomically(out, analytic_json(profile, hw, fit ? &*fit : nullptr, fit_paths));
    double forward = 0, backward = 0;
    for (const auto& l : profile.layers) {
      forward += l.forward_ms;
      backward += l.backward_ms;
    }
    std::printf("%s (%lld parameters, %s) on %s, microbatch %d x %d: %zu layers, %.2f ms forward + %.2f ms "
                "backward per microbatch on one device\nWrote %s\n",
                model.name.c_str(), static_cast<long long>(model_parameters(model)), type.c_str(), hw.name.c_str(),
                microbatch_size, seq_len, profile.layers.size(), forward, backward, out.c_str());
    return 0;
  });
}
