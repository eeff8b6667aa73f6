// Snapshot copies from a GPU that leave the training stream alone.
//
// libtorch copies a CUDA tensor to the host on the stream the step computes
// on, and into pageable memory through a staging buffer: measured on an
// H200, 1 GB/s into fresh pages and 10 GB/s into pages already there,
// against 53 GB/s into page-locked memory. A worker's snapshot of GPT-2
// small (1.5 GB of weights and AdamW moments) then held the step's stream
// for 150 ms a step. Here the snapshot slots are page-locked once
// (PageLock), and the copies go on a CUDA stream of their own that waits
// only for the optimizer step they snapshot (GpuSnapshotCopies): the copy
// engines move the bytes while the next step computes.
//
// Without CUDA, or for tensors on the CPU, both do nothing and the
// snapshot is packed as before.
#pragma once

#include <cstddef>
#include <map>

#include "model/layer_state.h"

struct CUstream_st;
struct CUevent_st;

namespace oobleck::executor {

// Host memory page-locked for the GPU's copy engines while this lives.
// locked() is false where CUDA is absent or refuses (the copies then run at
// pageable memory's speed, still off the training stream).
class PageLock {
 public:
  PageLock(void* address, std::size_t bytes);
  ~PageLock();
  PageLock(const PageLock&) = delete;
  PageLock& operator=(const PageLock&) = delete;
  [[nodiscard]] bool locked() const { return locked_; }

 private:
  [[maybe_unused]] void* address_;
  bool locked_ = false;
};

class GpuSnapshotCopies {
 public:
  GpuSnapshotCopies() = default;
  ~GpuSnapshotCopies();
  GpuSnapshotCopies(const GpuSnapshotCopies&) = delete;
  GpuSnapshotCopies& operator=(const GpuSnapshotCopies&) = delete;

  // On the training thread, once the optimizer step's kernels are queued
  // (on libtorch's default stream, the one the executor computes on): the
  // copies of `held` wait for them and for nothing queued later. Returns
  // whether `held` lives on a GPU.
  bool mark_step_end(const std::map<int, HeldLayer>& held);
  // On the copying thread: makes the marked layers' GPU its current device
  // (page-locking memory, or letting it go, on another would make a CUDA
  // context there).
  void use_device() const;
  // On the copying thread: a DeviceToHost for pack_layer_into that queues
  // each copy on this stream; empty unless mark_step_end found a GPU.
  [[nodiscard]] DeviceToHost begin();
  // Waits until every copy queued since begin() has landed.
  void finish();

 private:
  int device_ = -1;  // the GPU the marked layers live on; -1: none
  CUstream_st* stream_ = nullptr;
  CUevent_st* step_end_ = nullptr;
};

}  // namespace oobleck::executor
