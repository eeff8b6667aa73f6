// Timing and sizing every layer. Times are medians of several runs after
// warm-up, on a steady clock with the thread count fixed (CUDA: events).
// Activation bytes on CPU are what stays allocated after a forward pass with
// autograd on, less the output: the tensors autograd saves. A counting
// allocator in front of libtorch's CPU allocator sees them.
#include <torch/torch.h>
#include <torch/version.h>
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autocast.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/links.h"
#include "oobleck/executor/profiler.h"

#ifdef OOBLECK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
// A CUDA build of libtorch (not Debian's) brings its caching allocator's
// statistics: activation bytes on a GPU come from there.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define OOBLECK_CUDA_ALLOCATOR_STATS 1
#endif

namespace oobleck::executor {
namespace {

using Clock = std::chrono::steady_clock;

// Counts live bytes allocated through libtorch's CPU allocator.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  // Torch 2.3 made allocate non-const and added copy_data, which later
  // releases gave a `sync` flag: both forms, whichever the base declares.
  c10::DataPtr allocate(size_t n) override { return wrap(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { default_copy_data(dest, src, count); }
  void copy_data(void* dest, const void* src, std::size_t count, bool /*sync*/) const {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return wrap(n); }
#endif
  [[nodiscard]] std::int64_t live_bytes() const { return live_.load(); }

 private:
  struct Context {
    c10::DataPtr inner;
    std::size_t bytes;
    std::atomic<std::int64_t>* live;
  };
  static void release(void* raw) {
    auto* ctx = static_cast<Context*>(raw);
    ctx->live->fetch_sub(static_cast<std::int64_t>(ctx->bytes));
    delete ctx;
  }
  c10::DataPtr wrap(size_t n) const {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    live_.fetch_add(static_cast<std::int64_t>(n));
    return {data, new Context{std::move(inner), n, &live_}, &release, device};
  }
  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> live_{0};
};

// Installed once for the process, ahead of the default CPU allocator.
CountingAllocator& counting_allocator() {
  static CountingAllocator* allocator = [] {
    auto* a = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  return *allocator;
}

Milliseconds median(std::vector<Milliseconds> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

class Timer {
 public:
  explicit Timer(bool cuda) : cuda_(cuda) {}
  template <typename Work>
  Milliseconds time(Work&& work) {
#ifdef OOBLECK_WITH_CUDA
    if (cuda_) {
      cudaEvent_t begin, end;
      cudaEventCreate(&begin);
      cudaEventCreate(&end);
      cudaEventRecord(begin, nullptr);
      work();
      cudaEventRecord(end, nullptr);
      cudaEventSynchronize(end);
      float ms = 0;
      cudaEventElapsedTime(&ms, begin, end);
      cudaEventDestroy(begin);
      cudaEventDestroy(end);
      return ms;
    }
#endif
    const auto start = Clock::now();
    work();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }

 private:
  [[maybe_unused]] bool cuda_;
};

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

}  // namespace

Measurement measure_profile(const MeasureOptions& options, const Progress& progress) {
  validate(options.model, "--model");
  if (options.microbatch_size < 1) throw InputError("--microbatch-size: expected a positive integer");
  const bool cuda = options.device == "cuda";
  if (!cuda && options.device != "cpu") throw InputError("--device: expected cpu or cuda, got " + options.device);
  if (cuda && !torch::cuda::is_available()) throw InputError("--device cuda: no CUDA device is available here");
  if (options.dtype != "fp32" && options.dtype != "bf16") throw InputError("--dtype: expected fp32 or bf16");
  if (options.dtype == "bf16" && !cuda) throw InputError("--dtype bf16: only on CUDA; the CPU profile is fp32");
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  // Weights stay fp32; bf16 is autocast's compute type on CUDA.
  const torch::Dtype dtype = torch::kFloat32;
  const CudaAutocast autocast(options.dtype == "bf16");
  const int element = 4;  // fp32 weights (bf16 autocast computes from them)
  if (options.threads > 0) torch::set_num_threads(options.threads);
  auto& allocator = counting_allocator();
  const ModelConfig& c = options.model;
  const int B = options.microbatch_size, S = c.seq_len;

  Measurement out;
  out.threads = torch::get_num_threads();
#ifdef OOBLECK_WITH_CUDA
  out.device_name = cuda ? cuda_device_name(0) : cpu_name();
#else
  out.device_name = cpu_name();
#endif
  out.library_versions = std::string("libtorch ") + TORCH_VERSION;
  out.date = utc_date();
  Timer timer(cuda);
  auto sync = [&] {
#ifdef OOBLECK_WITH_CUDA
    if (cuda) cudaDeviceSynchronize();
#endif
  };
  auto report = [&](const std::string& what) {
    if (progress) progress(what);
  };

  auto gen = at::detail::createCPUGenerator(options.seed);
  const auto tokens = torch::randint(c.vocab, {B, S}, gen, torch::TensorOptions().dtype(torch::kLong)).to(device);
  const auto targets = torch::randint(c.vocab, {B, S}, gen, torch::TensorOptions().dtype(torch::kLong)).to(device);
  const auto hidden_input = (torch::randn({B, S, c.hidden}, gen) * 0.5).to(device, dtype);

  Profile& profile = out.profile;
  profile.source = "measured";
  profile.model_name = c.name;
  profile.model_json = model_json(c, options.dtype);
  profile.microbatch_size = B;
  const int layers = pipeline_layers(c);
  for (int i = 0; i < layers; ++i) {
    report("layer " + std::to_string(i + 1) + "/" + std::to_string(layers) + " (" + layer_name(c, i) + ")");
    auto layer = make_layer(c, i, options.seed);
    layer->to(device, dtype);
    const bool first = i == 0, last = i == layers - 1;
    // One training step's worth of this layer: forward with autograd on,
    // then backward from the loss (head) or from a gradient like the output.
    auto forward = [&](torch::Tensor& input) {
      input = first ? tokens : hidden_input.detach().clone().requires_grad_(true);
      auto y = layer->forward(input);
      return last ? language_model_loss(y, targets) : y;
    };
    std::vector<Milliseconds> forward_ms, backward_ms;
    Bytes activation = 0, output = 0;
    for (int r = 0; r < options.warmup + options.repeats; ++r) {
      layer->zero_grad();
      torch::Tensor input, y;
      sync();
      auto live_bytes = [&]() -> std::int64_t {
#ifdef OOBLECK_CUDA_ALLOCATOR_STATS
        if (cuda) return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
#endif
        return allocator.live_bytes();
      };
      const std::int64_t before = live_bytes();
      const Milliseconds f = timer.time([&] {
        y = forward(input);
        sync();
      });
      output = last ? 4 : static_cast<Bytes>(y.numel() * y.element_size());
      activation = std::max<Bytes>(0, live_bytes() - before - output);
      const auto grad = last ? torch::Tensor() : torch::ones_like(y);
      const Milliseconds b = timer.time([&] {
        if (last) {
          y.backward();
        } else {
          y.backward(grad);
        }
        sync();
      });
      if (r >= options.warmup) {
        forward_ms.push_back(f);
        backward_ms.push_back(b);
      }
    }
    LayerProfile lp;
    lp.name = layer_name(c, i);
    lp.forward_ms = median(forward_ms);
    lp.backward_ms = median(backward_ms);
    lp.param_bytes = layer_parameters(c, i) * element;
    // AdamW: an fp32 gradient and two fp32 moments per parameter.
    lp.optimizer_bytes = layer_parameters(c, i) * 3 * element;
    lp.activation_bytes = activation;
    lp.output_bytes = output;
    profile.layers.push_back(lp);
    out.layers_forward_ms += lp.forward_ms;
    out.layers_backward_ms += lp.backward_ms;
  }

  report("whole model");
  // A check of the per-layer times, where the whole model fits on the
  // device with one microbatch's activations; the profile stands without it.
  try {
    Gpt whole(c, options.seed);
    whole.to(device, dtype);
    std::vector<Milliseconds> forward_ms, backward_ms;
    for (int r = 0; r < options.warmup + options.repeats; ++r) {
      for (auto& p : whole.parameters()) p.mutable_grad() = torch::Tensor();
      torch::Tensor loss;
      const Milliseconds f = timer.time([&] {
        loss = language_model_loss(whole.forward(tokens), targets);
        sync();
      });
      const Milliseconds b = timer.time([&] {
        loss.backward();
        sync();
      });
      if (r >= options.warmup) {
        forward_ms.push_back(f);
        backward_ms.push_back(b);
      }
    }
    out.whole_forward_ms = median(forward_ms);
    out.whole_backward_ms = median(backward_ms);
  } catch (const c10::Error& e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
    profile.notes.push_back("whole model: does not fit on the device with this microbatch; not timed");
    report("whole model: out of memory, not timed");
  }
#ifdef OOBLECK_CUDA_ALLOCATOR_STATS
  if (cuda) c10::cuda::CUDACachingAllocator::emptyCache();
#endif

  report("device peak");
  {
    const auto a = torch::randn({1024, 1024}, gen).to(device, dtype);
    std::vector<Milliseconds> times;
    for (int r = 0; r < 2 + 5; ++r) {
      const Milliseconds t = timer.time([&] {
        auto product = torch::mm(a, a);
        sync();
      });
      if (r >= 2) times.push_back(t);
    }
    out.gemm_flops_per_s = 2.0 * 1024 * 1024 * 1024 / (median(times) / 1000.0);
    const auto big = torch::empty({64 << 20}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    auto copy = torch::empty_like(big);
    times.clear();
    for (int r = 0; r < 2 + 5; ++r) {
      const Milliseconds t = timer.time([&] {
        copy.copy_(big);
        sync();
      });
      if (r >= 2) times.push_back(t);
    }
    out.stream_bytes_per_s = 2.0 * static_cast<double>(big.numel()) * 4 / (median(times) / 1000.0);
  }

  if (!options.link_program.empty()) {
    const LinkMeasurement links = measure_local_links(options.link_program, progress);
    out.links_measured = true;
    out.p2p_bytes_per_s = links.point_to_point.bytes_per_s;
    out.p2p_latency_ms = links.point_to_point.latency_ms;
    out.p2p_fit_error = links.point_to_point.rms_relative_error;
    out.allreduce_bytes_per_s = links.allreduce.bytes_per_s;
    out.allreduce_latency_ms = links.allreduce.latency_ms;
    out.allreduce_fit_error = links.allreduce.rms_relative_error;
  }

  Hardware& hw = profile.hardware;
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
    profile.notes.push_back(std::string("links: measured between two local processes with Gloo") +
                            (cuda ? " (host memory: what workers sharing this GPU use)" : "") +
                            "; a multi-machine cluster needs --inter-node-bytes-per-s and --latency-ms");
  } else {
    profile.notes.push_back("links: not measured; 10 Gb/s and 0.05 ms assumed (override with the flags)");
  }
  return out;
}

std::string measurement_to_json(const Measurement& m) {
  auto doc = nlohmann::ordered_json::parse(profile_to_json(m.profile));
  const double whole = m.whole_forward_ms + m.whole_backward_ms;
  const double sum = m.layers_forward_ms + m.layers_backward_ms;
  doc["description"] = "Measured by oobleck-profile: every layer built alone and timed (median of repeated runs "
                       "after warm-up), the whole model timed in the same run.";
  doc["device"] = m.device_name;
  doc["threads"] = m.threads;
  doc["library_versions"] = m.library_versions;
  doc["date"] = m.date;
  if (whole > 0) doc["whole_model"] = {{"forward_ms", m.whole_forward_ms}, {"backward_ms", m.whole_backward_ms}};
  doc["layers_sum"] = {{"forward_ms", m.layers_forward_ms}, {"backward_ms", m.layers_backward_ms}};
  if (whole > 0) doc["gap"] = sum / whole - 1;  // (sum of layers - whole) / whole
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
