// Timing and sizing one layer, the whole model and the device. A layer's
// times are means of several runs after warm-up, not medians: an iteration
// is a sum of many passes, so its expected time is the sum of their means,
// and on a busy machine the times are skewed right (a stall now and then,
// which a tensor-parallel group pays in full at every all-reduce, since
// its workers wait for the slowest). Steady clock, thread count fixed
// (CUDA: events). Activation bytes on CPU are what stays
// allocated after a forward pass with autograd on, less the output: the
// tensors autograd saves. A counting allocator in front of libtorch's CPU
// allocator sees them.
#include "profile/bench.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "model/layer_state.h"
#include "model/train_common.h"
#include "oobleck/executor/gpt.h"

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

// A backward pass is timed as a training step runs it: autograd hands each
// parameter's gradient over (none is left from the last pass) and it is
// folded into the step's float64 sum.
std::vector<GradientSlot> float64_sums(const std::vector<torch::Tensor>& parameters) {
  std::vector<GradientSlot> out;
  for (const auto& p : parameters) {
    out.push_back({0, p, torch::zeros(p.sizes(), p.options().dtype(torch::kFloat64)), ""});
  }
  return out;
}

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

Milliseconds mean(const std::vector<Milliseconds>& values) {
  Milliseconds sum = 0;
  for (Milliseconds v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
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

// Weights are fp32 (bf16 is autocast's compute type on CUDA).
constexpr torch::Dtype kWeights = torch::kFloat32;
constexpr int kWeightBytes = 4;

}  // namespace

struct Bench::State {
  State(const MeasureOptions& options, const CountingAllocator& allocator)
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
  LayerProfile measure_layer(int i, TensorShard shard, const ShardSum& sum) {
    const ModelConfig& c = options_.model;
    auto layer = make_layer(c, i, options_.seed, shard);
    if (sum) layer->set_shard_sum(sum);
    layer->to(device_, kWeights);
    const bool first = i == 0, last = i == pipeline_layers(c) - 1;
    auto forward = [&](torch::Tensor& input) {
      input = first ? tokens_ : hidden_input_.detach().clone().requires_grad_(true);
      auto y = layer->forward(input);
      return last ? language_model_loss(y, targets_) : y;
    };
    Bytes activation = 0, output = 0;
    auto slots = float64_sums(layer->parameters());
    const auto [forward_ms, backward_ms] = mean_runs([&] {
      begin_sums(slots);
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
        add_microbatch(slots);
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
    if (shard.degree == 1 && !first && !last && !is_scripted(c)) measure_attention_core(*layer, lp);
    return lp;
  }

  // What selective recomputation runs again and saves: the attention core's
  // forward alone, timed on q, k and v of the block's shape, and the bytes
  // the block keeps less those it keeps with its core recomputed.
  void measure_attention_core(GptLayer& layer, LayerProfile& lp) {
    const ModelConfig& c = options_.model;
    {
      layer.set_attention_recompute(true);
      const auto input = hidden_input_.detach().clone().requires_grad_(true);
      sync();
      const std::int64_t before = live_bytes();
      const auto y = layer.forward(input);
      sync();
      const Bytes kept = std::max<Bytes>(0, live_bytes() - before - lp.output_bytes);
      layer.set_attention_recompute(false);
      lp.attention_activation_bytes = std::clamp<Bytes>(lp.activation_bytes - kept, 0, lp.activation_bytes);
    }
    const std::int64_t B = options_.microbatch_size, S = c.seq_len, d = c.hidden / c.heads;
    const auto qkv = (torch::randn({3, B, c.heads, S, d}, gen_) * 0.5).to(device_, kWeights);
    const auto kernel = use_fused_kernels(device_) ? AttentionKernel::fused : AttentionKernel::plain;
    const torch::NoGradGuard no_graph;
    lp.attention_forward_ms = mean_runs([&] {
                                const Milliseconds f = timer_.time([&] {
                                  const auto out = causal_attention(qkv[0], qkv[1], qkv[2], kernel);
                                  sync();
                                });
                                return std::make_pair(f, 0.0);
                              }).first;
  }

  // A check of the per-layer times, where the whole model fits on the device
  // with one microbatch's activations; false where it does not.
  bool time_whole_model(Measurement& out) {
    return unless_out_of_memory([&] {
      Gpt whole(options_.model, options_.seed);
      whole.to(device_, kWeights);
      auto slots = float64_sums(whole.parameters());
      std::tie(out.whole_forward_ms, out.whole_backward_ms) = mean_runs([&] {
        begin_sums(slots);
        torch::Tensor loss;
        const Milliseconds f = timer_.time([&] {
          loss = language_model_loss(whole.forward(tokens_), targets_);
          sync();
        });
        const Milliseconds b = timer_.time([&] {
          loss.backward();
          add_microbatch(slots);
          sync();
        });
        return std::make_pair(f, b);
      });
    });
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

  // The optimizer step as workers take it (step_optimizers: the fused
  // AdamW on a GPU), over every layer at once with gradients in place: a
  // whole model's weights, gradients and both moments, `state_bytes` of
  // them, read and written once. False where they do not fit the device.
  bool time_optimizer_step(Measurement& out, double state_bytes) {
    return unless_out_of_memory([&] {
      TrainOptions train;
      train.model = options_.model;
      train.seed = options_.seed;
      train.device = options_.device;
      train.bf16 = options_.dtype == "bf16";
      std::map<int, HeldLayer> layers;
      const int count = pipeline_layers(options_.model);
      for (int i = 0; i < count; ++i) {
        HeldLayer& held = layers.emplace(i, initial_layer(train, i)).first->second;
        for (auto& p : held.module->parameters()) p.mutable_grad() = torch::full_like(p, 1e-3);
      }
      step_optimizers(layers, 0, count);  // the first step makes the moments
      const Milliseconds ms = median_time([&] {
        step_optimizers(layers, 0, count);
        sync();
      });
      out.optimizer_step_ms = ms;
      out.optimizer_bytes_per_s = 2.0 * state_bytes / (ms / 1000.0);
    });
  }

  // Runs `body`; false where the device ran out of memory in it (its cache
  // emptied either way, for what comes next).
  template <typename Body>
  bool unless_out_of_memory(Body&& body) {
    bool fits = true;
    try {
      body();
    } catch (const c10::Error& e) {
      if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
      fits = false;
    }
#ifdef OOBLECK_CUDA_ALLOCATOR_STATS
    if (cuda_) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    return fits;
  }

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
  // Means of the forward and backward times `run` returns, over the runs
  // after the warm-up ones.
  template <typename Run>
  std::pair<Milliseconds, Milliseconds> mean_runs(Run&& run) {
    std::vector<Milliseconds> forward_ms, backward_ms;
    for (int r = 0; r < options_.warmup + options_.repeats; ++r) {
      const auto [f, b] = run();
      if (r >= options_.warmup) {
        forward_ms.push_back(f);
        backward_ms.push_back(b);
      }
    }
    return {mean(forward_ms), mean(backward_ms)};
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

Bench::Bench(const MeasureOptions& options) : state_(std::make_unique<State>(options, counting_allocator())) {}
Bench::~Bench() = default;

LayerProfile Bench::measure_layer(int index, TensorShard shard, const ShardSum& sum) {
  return state_->measure_layer(index, shard, sum);
}
bool Bench::time_whole_model(Measurement& out) { return state_->time_whole_model(out); }
void Bench::time_device_peak(Measurement& out) { state_->time_device_peak(out); }
bool Bench::time_optimizer_step(Measurement& out, double state_bytes) {
  return state_->time_optimizer_step(out, state_bytes);
}

}  // namespace oobleck::executor
