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
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/autocast.h"
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

// Weights are fp32 (bf16 is autocast's compute type on CUDA).
constexpr torch::Dtype kWeights = torch::kFloat32;
constexpr int kWeightBytes = 4;

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

// One run's device, clock and inputs, shared by everything it times.
class Bench {
 public:
  Bench(const MeasureOptions& options, const CountingAllocator& allocator)
      : options_(options),
        cuda_(options.device == "cuda"),
        device_(cuda_ ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU)),
        allocator_(allocator),
        timer_(cuda_),
        gen_(at::detail::createCPUGenerator(options.seed)) {
    const ModelConfig& c = options.model;
    const int B = options.microbatch_size, S = c.seq_len;
    tokens_ = torch::randint(c.vocab, {B, S}, gen_, torch::TensorOptions().dtype(torch::kLong)).to(device_);
    targets_ = torch::randint(c.vocab, {B, S}, gen_, torch::TensorOptions().dtype(torch::kLong)).to(device_);
    hidden_input_ = (torch::randn({B, S, c.hidden}, gen_) * 0.5).to(device_, kWeights);
  }

  // Layer i alone: one training step's worth, forward with autograd on, then
  // backward from the loss (head) or from a gradient like the output.
  LayerProfile measure_layer(int i) {
    const ModelConfig& c = options_.model;
    auto layer = make_layer(c, i, options_.seed);
    layer->to(device_, kWeights);
    const bool first = i == 0, last = i == pipeline_layers(c) - 1;
    auto forward = [&](torch::Tensor& input) {
      input = first ? tokens_ : hidden_input_.detach().clone().requires_grad_(true);
      auto y = layer->forward(input);
      return last ? language_model_loss(y, targets_) : y;
    };
    Bytes activation = 0, output = 0;
    const auto [forward_ms, backward_ms] = median_runs([&] {
      layer->zero_grad();
      torch::Tensor input, y;
      sync();
      const std::int64_t before = live_bytes();
      const Milliseconds f = timer_.time([&] {
        y = forward(input);
        sync();
      });
      output = last ? 4 : static_cast<Bytes>(y.numel() * y.element_size());
      activation = std::max<Bytes>(0, live_bytes() - before - output);
      const auto grad = last ? torch::Tensor() : torch::ones_like(y);
      const Milliseconds b = timer_.time([&] {
        if (last) {
          y.backward();
        } else {
          y.backward(grad);
        }
        sync();
      });
      return std::make_pair(f, b);
    });
    LayerProfile lp;
    lp.name = layer_name(c, i);
    lp.forward_ms = forward_ms;
    lp.backward_ms = backward_ms;
    lp.param_bytes = layer_parameters(c, i) * kWeightBytes;
    // AdamW: an fp32 gradient and two fp32 moments per parameter.
    lp.optimizer_bytes = layer_parameters(c, i) * 3 * kWeightBytes;
    lp.activation_bytes = activation;
    lp.output_bytes = output;
    return lp;
  }

  // A check of the per-layer times, where the whole model fits on the device
  // with one microbatch's activations; false where it does not.
  bool time_whole_model(Measurement& out) {
    bool fits = true;
    try {
      Gpt whole(options_.model, options_.seed);
      whole.to(device_, kWeights);
      std::tie(out.whole_forward_ms, out.whole_backward_ms) = median_runs([&] {
        for (auto& p : whole.parameters()) p.mutable_grad() = torch::Tensor();
        torch::Tensor loss;
        const Milliseconds f = timer_.time([&] {
          loss = language_model_loss(whole.forward(tokens_), targets_);
          sync();
        });
        const Milliseconds b = timer_.time([&] {
          loss.backward();
          sync();
        });
        return std::make_pair(f, b);
      });
    } catch (const c10::Error& e) {
      if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
      fits = false;
    }
#ifdef OOBLECK_CUDA_ALLOCATOR_STATS
    if (cuda_) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    return fits;
  }

  // The device's practical peak: a 1024x1024 matrix product and a 256 MiB copy.
  void time_device_peak(Measurement& out) {
    const auto a = torch::randn({1024, 1024}, gen_).to(device_, kWeights);
    const Milliseconds product_ms = median_time([&] {
      auto product = torch::mm(a, a);
      sync();
    });
    out.gemm_flops_per_s = 2.0 * 1024 * 1024 * 1024 / (product_ms / 1000.0);
    const auto big = torch::empty({64 << 20}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    auto copy = torch::empty_like(big);
    const Milliseconds copy_ms = median_time([&] {
      copy.copy_(big);
      sync();
    });
    out.stream_bytes_per_s = 2.0 * static_cast<double>(big.numel()) * 4 / (copy_ms / 1000.0);
  }

 private:
  void sync() const {
#ifdef OOBLECK_WITH_CUDA
    if (cuda_) cudaDeviceSynchronize();
#endif
  }
  [[nodiscard]] std::int64_t live_bytes() const {
#ifdef OOBLECK_CUDA_ALLOCATOR_STATS
    if (cuda_) return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
#endif
    return allocator_.live_bytes();
  }
  // Medians of the forward and backward times `run` returns, over the runs
  // after the warm-up ones.
  template <typename Run>
  std::pair<Milliseconds, Milliseconds> median_runs(Run&& run) {
    std::vector<Milliseconds> forward_ms, backward_ms;
    for (int r = 0; r < options_.warmup + options_.repeats; ++r) {
      const auto [f, b] = run();
      if (r >= options_.warmup) {
        forward_ms.push_back(f);
        backward_ms.push_back(b);
      }
    }
    return {median(forward_ms), median(backward_ms)};
  }
  // The median of five timings after two warm-up ones.
  template <typename Work>
  Milliseconds median_time(Work&& work) {
    std::vector<Milliseconds> times;
    for (int r = 0; r < 2 + 5; ++r) {
      const Milliseconds t = timer_.time(work);
      if (r >= 2) times.push_back(t);
    }
    return median(times);
  }

  const MeasureOptions& options_;
  bool cuda_;
  torch::Device device_;
  const CountingAllocator& allocator_;
  Timer timer_;
  at::Generator gen_;
  torch::Tensor tokens_, targets_, hidden_input_;
};

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
  const auto& allocator = counting_allocator();
  Measurement out = describe_run(options.device == "cuda");
  Bench bench(options, allocator);
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
