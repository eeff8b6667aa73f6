// Mixed precision on CUDA: fp32 weights, matrix products in bf16 through
// autocast, as mixed-precision training runs. Autocast is per thread and
// caches the bf16 copies of the weights until it is switched off, so it is
// on for one step's forward passes at a time (the optimizer changes the
// weights after). Torch 2.4 renamed the calls.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace oobleck::executor {

// Whether this thread computes under CUDA autocast.
[[nodiscard]] inline bool cuda_autocast_enabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

class CudaAutocast {
 public:
  explicit CudaAutocast(bool on) : on_(on) {
    if (on_) set(true);
  }
  ~CudaAutocast() {
    if (on_) set(false);
  }
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
  static void set(bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, enabled);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
    if (!enabled) at::autocast::clear_cache();
  }
  bool on_;
};

}  // namespace oobleck::executor
