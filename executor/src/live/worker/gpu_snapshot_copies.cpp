#include "gpu_snapshot_copies.h"

#include <stdexcept>
#include <string>

#ifdef OOBLECK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace oobleck::executor {

#ifdef OOBLECK_WITH_CUDA
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("snapshot copy from the GPU: ") + what + ": " + cudaGetErrorString(status));
  }
}

// Runs `work` with `device` current, and puts the thread's device back.
template <typename Work>
void on_device(int device, Work work) {
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice");
  check(cudaSetDevice(device), "cudaSetDevice");
  struct Restore {
    int device;
    ~Restore() { (void)cudaSetDevice(device); }
  } restore{previous};
  work();
}

// The GPU a worker's layers live on (they all share one); -1: the CPU.
int gpu_of(const std::map<int, HeldLayer>& held) {
  for (const auto& [index, layer] : held) {
    const auto parameters = layer.module->parameters();
    if (!parameters.empty()) return parameters.front().is_cuda() ? parameters.front().device().index() : -1;
  }
  return -1;
}

}  // namespace

PageLock::PageLock(void* address, std::size_t bytes) : address_(address) {
  locked_ = cudaHostRegister(address, bytes, cudaHostRegisterDefault) == cudaSuccess;
  if (!locked_) (void)cudaGetLastError();  // refused: the copies go through pageable memory
}

PageLock::~PageLock() {
  if (locked_) (void)cudaHostUnregister(address_);
}

GpuSnapshotCopies::~GpuSnapshotCopies() {
  if (step_end_ != nullptr) (void)cudaEventDestroy(step_end_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

bool GpuSnapshotCopies::mark_step_end(const std::map<int, HeldLayer>& held) {
  const int device = gpu_of(held);
  if (device < 0) {
    device_ = -1;
    return false;
  }
  if (device_ >= 0 && device != device_) throw std::logic_error("snapshot copies: the layers moved to another GPU");
  device_ = device;
  on_device(device_, [&] {
    // Non-blocking: the stream does not wait for the legacy default stream,
    // on which libtorch computes, except through the event below.
    if (stream_ == nullptr) check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (step_end_ == nullptr) check(cudaEventCreateWithFlags(&step_end_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(step_end_, cudaStreamLegacy), "cudaEventRecord");
  });
  return true;
}

void GpuSnapshotCopies::use_device() const {
  if (device_ >= 0) check(cudaSetDevice(device_), "cudaSetDevice");
}

DeviceToHost GpuSnapshotCopies::begin() {
  if (device_ < 0) return {};
  use_device();
  check(cudaStreamWaitEvent(stream_, step_end_, 0), "cudaStreamWaitEvent");
  return [stream = stream_](const void* from, std::size_t bytes, char* to) {
    check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  };
}

void GpuSnapshotCopies::finish() {
  if (device_ >= 0) check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

#else  // no CUDA: nothing lives on a GPU

PageLock::PageLock(void* address, std::size_t) : address_(address) {}
PageLock::~PageLock() = default;
GpuSnapshotCopies::~GpuSnapshotCopies() = default;
bool GpuSnapshotCopies::mark_step_end(const std::map<int, HeldLayer>&) { return false; }
void GpuSnapshotCopies::use_device() const {}
DeviceToHost GpuSnapshotCopies::begin() { return {}; }
void GpuSnapshotCopies::finish() {}

#endif

}  // namespace oobleck::executor
