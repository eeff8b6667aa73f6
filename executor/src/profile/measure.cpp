// A measured profile: every layer timed and sized (profile/bench.cpp), the
// whole model and the device's peak timed in the same run, links measured
// between two local processes and, for nodes of several GPUs, every layer at
// every tensor-parallel degree among one node's worth of processes
// (profile/node.cpp).
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/autocast.h"
#include "oobleck/executor/links.h"
#include "oobleck/executor/profiler.h"
#include "profile/bench.h"

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
  if (options.microbatch_size < 1) throw InputError("--microbatch-size: expected a positive integer");
  const bool cuda = options.device == "cuda";
  if (!cuda && options.device != "cpu") throw InputError("--device: expected cpu or cuda, got " + options.device);
  if (cuda && !torch::cuda::is_available()) throw InputError("--device cuda: no CUDA device is available here");
  if (options.dtype != "fp32" && options.dtype != "bf16") throw InputError("--dtype: expected fp32 or bf16");
  if (options.dtype == "bf16" && !cuda) throw InputError("--dtype bf16: only on CUDA; the CPU profile is fp32");
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
}

// The profile's hardware: this device, its memory, and the links measured
// or given (or assumed, as its notes say).
void describe_hardware(Measurement& out, const MeasureOptions& options) {
  const bool cuda = options.device == "cuda";
  Hardware& hw = out.profile.hardware;
  hw.name = out.device_name + (cuda ? "" : " (" + std::to_string(out.threads) + " threads)");
  hw.gpus_per_node = 1;  // one worker per node on CPU; per GPU on CUDA
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  Bytes device_memory = static_cast<Bytes>(pages) * page;
#ifdef OOBLECK_WITH_CUDA
  if (cuda) {
    std::size_t free_bytes = 0, total_bytes = 0;
    device_memory = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess ? static_cast<Bytes>(total_bytes)
                                                                             : Bytes{80} << 30;
  }
#endif
  hw.gpu_memory_bytes = options.memory_bytes.value_or(device_memory);
  // Local processes stand for the nodes of a one-machine cluster: their
  // measured link is the link between nodes (and, with one worker per
  // node, inside one too). Given values win.
  const double link = out.links_measured ? out.p2p_bytes_per_s : 1.25e9;
  hw.intra_node_bytes_per_s = options.intra_node_bytes_per_s.value_or(link);
  hw.inter_node_bytes_per_s = options.inter_node_bytes_per_s.value_or(link);
  hw.latency_ms = options.latency_ms.value_or(out.links_measured ? out.p2p_latency_ms : 0.05);
  // Gloo reduces in host memory: its all-reduce is slower than its links.
  if (out.links_measured && !options.inter_node_bytes_per_s) hw.allreduce_bytes_per_s = out.allreduce_bytes_per_s;
  if (out.links_measured) {
    out.profile.notes.push_back(std::string("links: measured between two local processes with Gloo") +
                                (cuda ? " (host memory: what workers sharing this GPU use)" : "") +
                                "; a multi-machine cluster needs --inter-node-bytes-per-s and --latency-ms");
  } else {
    out.profile.notes.push_back("links: not measured; 10 Gb/s and 0.05 ms assumed (override with the flags)");
  }
}

}  // namespace

Measurement measure_profile(const MeasureOptions& options, const Progress& progress) {
  check_options(options);
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
  if (!options.link_program.empty()) record_links(out, measure_local_links(options.link_program, progress));
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
  doc["description"] = "Measured by oobleck-profile: every layer built alone and timed (median of repeated runs "
                       "after warm-up), the whole model timed in the same run.";
  doc["device"] = m.device_name;
  doc["threads"] = m.threads;
  doc["library_versions"] = m.library_versions;
  doc["date"] = m.date;
  if (whole > 0) doc["whole_model"] = {{"forward_ms", m.whole_forward_ms}, {"backward_ms", m.whole_backward_ms}};
  doc["layers_sum"] = {{"forward_ms", m.layers_forward_ms}, {"backward_ms", m.layers_backward_ms}};
  if (whole > 0) doc["gap"] = layers_gap(m);
  doc["measured"] = {{"gemm_flops_per_s", m.gemm_flops_per_s}, {"copy_bytes_per_s", m.stream_bytes_per_s}};
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
