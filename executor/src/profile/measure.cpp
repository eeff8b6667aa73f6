// A measured profile: every layer timed and sized (profile/bench.cpp), the
// whole model and the device's peak timed in the same run, links measured
// between two local processes and, for nodes of several GPUs, every layer at
// every tensor-parallel degree among one node's worth of processes
// (profile/node.cpp).
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "model/autocast.h"
#include "model/host_memory.h"
#include "oobleck/executor/links.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/profiler.h"
#include "profile/bench.h"
#include "profile/node.h"

#ifdef OOBLECK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace oobleck::executor {
namespace {

#ifdef OOBLECK_WITH_CUDA
std::string cuda_device_name(int device) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) return "CUDA device " + std::to_string(device);
  return properties.name;
}
#endif

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void check_options(const MeasureOptions& options) {
  validate(options.model, "--model");
  check_scripted_model(options.model);
  if (options.microbatch_size < 1) throw InputError("--microbatch-size: expected a positive integer");
  const bool cuda = options.device == "cuda";
  if (!cuda && options.device != "cpu") throw InputError("--device: expected cpu or cuda, got " + options.device);
  if (cuda && !torch::cuda::is_available()) throw InputError("--device cuda: no CUDA device is available here");
  if (options.dtype != "fp32" && options.dtype != "bf16") throw InputError("--dtype: expected fp32 or bf16");
  if (options.dtype == "bf16" && !cuda) throw InputError("--dtype bf16: only on CUDA; the CPU profile is fp32");
  if (options.gpus_per_node < 1 || options.gpus_per_node > 64) {
    throw InputError("--gpus-per-node: expected 1 to 64, got " + std::to_string(options.gpus_per_node));
  }
  if (options.gpus_per_node > 1 && cuda) {
    throw InputError("--gpus-per-node " + std::to_string(options.gpus_per_node) +
                     " with --device cuda: a node of several GPUs is measured on CPU only (as that many worker "
                     "processes); on CUDA, measure one GPU and let the planner derive tensor-parallel times");
  }
}

// What the measurement ran on and when.
Measurement describe_run([[maybe_unused]] bool cuda) {
  Measurement out;
  out.threads = torch::get_num_threads();
#ifdef OOBLECK_WITH_CUDA
  out.device_name = cuda ? cuda_device_name(0) : cpu_name();
#else
  out.device_name = cpu_name();
#endif
  out.library_versions = std::string("libtorch ") + TORCH_VERSION;
  out.date = utc_date();
  return out;
}


void record_links(Measurement& out, const LinkMeasurement& links) {
  out.links_measured = true;
  out.p2p_bytes_per_s = links.point_to_point.bytes_per_s;
  out.p2p_latency_ms = links.point_to_point.latency_ms;
  out.p2p_fit_error = links.point_to_point.rms_relative_error;
  out.allreduce_bytes_per_s = links.allreduce.bytes_per_s;
  out.allreduce_latency_ms = links.allreduce.latency_ms;
  out.allreduce_fit_error = links.allreduce.rms_relative_error;
  out.allreduce_points = links.allreduce_points;
}

// The profile's hardware: this device, its memory, and the links measured
// or given (or assumed, as its notes say).
void describe_hardware(Measurement& out, const MeasureOptions& options) {
  const bool cuda = options.device == "cuda";
  Hardware& hw = out.profile.hardware;
  const int gpus = options.gpus_per_node;
  const std::string threads = std::to_string(out.threads) + (out.threads == 1 ? " thread" : " threads");
  hw.name = out.device_name + (cuda        ? ""
                               : gpus == 1 ? " (" + threads + ")"
                                           : " (" + std::to_string(gpus) + " workers of " + threads + ")");
  hw.gpus_per_node = gpus;  // on CPU, a worker process each
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  Bytes device_memory = static_cast<Bytes>(pages) * page / gpus;
#ifdef OOBLECK_WITH_CUDA
  if (cuda) {
    std::size_t free_bytes = 0, total_bytes = 0;
    device_memory = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess ? static_cast<Bytes>(total_bytes)
                                                                             : Bytes{80} << 30;
  }
#endif
  hw.gpu_memory_bytes = options.memory_bytes.value_or(device_memory);
  // Local processes stand for the nodes of a one-machine cluster and for
  // the GPUs of each: their measured link is the link between nodes and
  // inside one. Given values win.
  const double link = out.links_measured ? out.p2p_bytes_per_s : 1.25e9;
  hw.intra_node_bytes_per_s = options.intra_node_bytes_per_s.value_or(link);
  hw.inter_node_bytes_per_s = options.inter_node_bytes_per_s.value_or(link);
  hw.latency_ms = options.latency_ms.value_or(out.links_measured ? out.p2p_latency_ms : 0.05);
  // Gloo reduces in host memory: its all-reduce is slower than its links.
  // The measured sizes price the gradient all-reduce themselves
  // (allreduces.cpp), the fit carrying them to other sizes and ranks.
  if (out.links_measured && !options.inter_node_bytes_per_s) {
    hw.allreduce_bytes_per_s = out.allreduce_bytes_per_s;
    hw.allreduce_table = out.allreduce_points;
    for (std::size_t i = 1; i < hw.allreduce_table.size(); ++i) {  // noise must not make a size cheaper
      hw.allreduce_table[i].ms = std::max(hw.allreduce_table[i].ms, hw.allreduce_table[i - 1].ms);
    }
  }
  if (out.links_measured) {
    out.profile.notes.push_back(std::string("links: measured between two local processes with Gloo") +
                                (cuda ? " (host memory: what workers sharing this GPU use)" : "") +
                                "; a multi-machine cluster needs --inter-node-bytes-per-s and --latency-ms");
  } else {
    out.profile.notes.push_back("links: not measured; 10 Gb/s and 0.05 ms assumed (override with the flags)");
  }
}

// The node's measurement into the profile: degree-1 times with the node
// busy replace those measured alone; the others become each layer's
// tensor_parallel entries.
void record_node(Measurement& out, const std::vector<NodeDegreeTimes>& degrees, const MeasureOptions& options) {
  for (const NodeDegreeTimes& d : degrees) {
    DegreeSums sums{d.degree, 0, 0};
    for (std::size_t i = 0; i < d.layers.size(); ++i) {
      const auto [forward_ms, backward_ms, activation_bytes] = d.layers[i];
      LayerProfile& layer = out.profile.layers[i];
      if (d.degree == 1) {
        layer.forward_ms = forward_ms;
        layer.backward_ms = backward_ms;
      } else {
        // One worker's share, within what a profile may say: 1/degree of the
        // layer's activations (measured alone) at least, all of them at most.
        const Bytes whole = layer.activation_bytes;
        layer.tensor_parallel.push_back(
            {d.degree, forward_ms, backward_ms, std::clamp<Bytes>(activation_bytes, whole / d.degree, whole)});
      }
      sums.forward_ms += forward_ms;
      sums.backward_ms += backward_ms;
    }
    out.node_degrees.push_back(sums);
  }
  for (int degree = 2; degree <= options.gpus_per_node; ++degree) {
    if (options.gpus_per_node % degree == 0 && !tensor_parallel_fits(options.model, degree)) {
      out.profile.notes.push_back("tensor_parallel: degree " + std::to_string(degree) +
                                  " not measured: it does not divide the model's " +
                                  tensor_parallel_limit(options.model));
    }
  }
  out.profile.notes.push_back(
      "times: measured with the node's " + std::to_string(options.gpus_per_node) + " worker processes (" +
      std::to_string(out.threads) + (out.threads == 1 ? " thread" : " threads") +
      " each) all busy, at every tensor-parallel degree dividing it (Gloo all-reduces between them); the "
      "embedding and the LM head are replicated, so their tensor_parallel entries repeat degree 1's");
}

}  // namespace

Measurement measure_profile(const MeasureOptions& given, const Progress& progress) {
  check_options(given);
  keep_freed_host_memory();
  MeasureOptions options = given;
  // On CPU a node's workers share the cores.
  if (options.threads == 0 && options.gpus_per_node > 1) {
    options.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / options.gpus_per_node);
  }
  const CudaAutocast autocast(options.dtype == "bf16");
  if (options.threads > 0) torch::set_num_threads(options.threads);
  Measurement out = describe_run(options.device == "cuda");
  Bench bench(options);
  auto report = [&](const std::string& what) {
    if (progress) progress(what);
  };

  const ModelConfig& c = options.model;
  Profile& profile = out.profile;
  profile.source = "measured";
  profile.model_name = c.name;
  profile.model_json = model_json(c, options.dtype);
  profile.microbatch_size = options.microbatch_size;
  const int layers = pipeline_layers(c);
  for (int i = 0; i < layers; ++i) {
    report("layer " + std::to_string(i + 1) + "/" + std::to_string(layers) + " (" + layer_name(c, i) + ")");
    profile.layers.push_back(bench.measure_layer(i));
    out.layers_forward_ms += profile.layers.back().forward_ms;
    out.layers_backward_ms += profile.layers.back().backward_ms;
  }
  report("whole model");
  if (!bench.time_whole_model(out)) {
    profile.notes.push_back("whole model: does not fit on the device with this microbatch; not timed");
    report("whole model: out of memory, not timed");
  }
  report("device peak");
  bench.time_device_peak(out);
  report("optimizer step");
  double state_bytes = 0;
  for (const auto& layer : profile.layers) state_bytes += static_cast<double>(layer.param_bytes + layer.optimizer_bytes);
  if (bench.time_optimizer_step(out, state_bytes)) {
    profile.hardware.memory_bytes_per_s = out.optimizer_bytes_per_s;
  } else {
    profile.notes.push_back("optimizer step: the whole model's state does not fit on the device; not timed");
  }
  if (!options.program.empty() && options.measure_links) {
    record_links(out, measure_local_links(options.program, progress));
  }
  if (options.gpus_per_node > 1) record_node(out, measure_node(options, progress), options);
  describe_hardware(out, options);
  return out;
}

double layers_gap(const Measurement& m) {
  const double whole = m.whole_forward_ms + m.whole_backward_ms;
  const double sum = m.layers_forward_ms + m.layers_backward_ms;
  return whole > 0 ? sum / whole - 1 : 0;  // (sum of layers - whole) / whole
}

std::string measurement_to_json(const Measurement& m) {
  auto doc = nlohmann::ordered_json::parse(profile_to_json(m.profile));
  const double whole = m.whole_forward_ms + m.whole_backward_ms;
  doc["description"] = "Measured by oobleck-profile: every layer built alone and timed (mean of repeated runs "
                       "after warm-up), the whole model timed in the same run.";
  doc["device"] = m.device_name;
  doc["threads"] = m.threads;
  doc["library_versions"] = m.library_versions;
  doc["date"] = m.date;
  if (whole > 0) doc["whole_model"] = {{"forward_ms", m.whole_forward_ms}, {"backward_ms", m.whole_backward_ms}};
  doc["layers_sum"] = {{"forward_ms", m.layers_forward_ms}, {"backward_ms", m.layers_backward_ms}};
  if (!m.node_degrees.empty()) {
    auto degrees = nlohmann::ordered_json::array();
    for (const DegreeSums& d : m.node_degrees) {
      degrees.push_back({{"degree", d.degree}, {"forward_ms", d.forward_ms}, {"backward_ms", d.backward_ms}});
    }
    doc["node_layers_sum"] = {{"workers", m.profile.hardware.gpus_per_node},
                              {"threads_per_worker", m.threads},
                              {"degrees", std::move(degrees)}};
  }
  if (whole > 0) doc["gap"] = layers_gap(m);
  doc["measured"] = {{"gemm_flops_per_s", m.gemm_flops_per_s}, {"copy_bytes_per_s", m.stream_bytes_per_s}};
  if (m.optimizer_step_ms > 0) {
    doc["measured"]["optimizer_step"] = {{"ms", m.optimizer_step_ms}, {"bytes_per_s", m.optimizer_bytes_per_s}};
  }
  if (m.links_measured) {
    doc["measured"]["links"] = {
        {"communicator", "gloo (libtorch c10d), two local processes"},
        {"point_to_point", {{"bytes_per_s", m.p2p_bytes_per_s}, {"latency_ms", m.p2p_latency_ms},
                            {"rms_relative_error", m.p2p_fit_error}}},
        {"allreduce", {{"bytes_per_s", m.allreduce_bytes_per_s}, {"latency_ms", m.allreduce_latency_ms},
                       {"rms_relative_error", m.allreduce_fit_error}}}};
  }
  return doc.dump(2) + "\n";
}

}  // namespace oobleck::executor
