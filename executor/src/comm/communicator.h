// The communicator the workers train with: point-to-point send and receive,
// all-reduce (sum) and barrier among a group of processes, and abort (for
// failure handling). Two implementations: Gloo through libtorch's c10d (CPU
// tensors) and NCCL through its own API (CUDA tensors), chosen by device.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

namespace oobleck::executor {

// An operation in flight; wait() returns when its buffer may be reused.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  // `tag` orders messages between one pair of processes (Gloo matches on
  // it; NCCL matches in call order, which 1F1B keeps the same on both sides).
  [[nodiscard]] virtual std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int tag) = 0;
  virtual void recv(torch::Tensor& tensor, int peer, int tag) = 0;
  virtual void allreduce_sum(torch::Tensor& tensor) = 0;
  // The same, started: `tensor` holds the sum once wait() returns. All-reduces
  // of different communicators may be in flight together.
  [[nodiscard]] virtual std::unique_ptr<PendingOp> start_allreduce_sum(torch::Tensor& tensor) = 0;
  // The same for a tensor of a few values (the gradients' squared norms),
  // whose time is in the hops between processes, not in the bytes: Gloo
  // gathers it to rank 0, adds it up in rank order and sends the sum back,
  // two hops where its all-reduce passes a ring of 2 (n - 1), each through
  // the group's threads. Every rank gets the same bits.
  virtual void allreduce_sum_small(torch::Tensor& tensor) { allreduce_sum(tensor); }
  virtual void barrier() = 0;
  // From any thread: every operation in flight, and every one started after,
  // fails with CommunicationAborted (NCCL: ncclCommAbort). The communicator
  // is unusable afterwards.
  virtual void abort() = 0;
};

// Every failure of a communicator: a peer gone, a timeout, an abort. Other
// exceptions out of a training step are the node's own.
class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CommunicationAborted : public CommunicationError {
 public:
  CommunicationAborted() : CommunicationError("communication aborted") {}
};

// `name` keeps the rendezvous keys of different groups apart. Gloo binds to
// `host` (an address of this machine), or to what the hostname resolves to
// when empty, through one device (one event loop) per address that the
// process's groups share. An operation still waiting after `timeout` fails.
[[nodiscard]] std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                                   const std::string& name, int rank, int size,
                                                                   const std::string& host,
                                                                   std::chrono::milliseconds timeout);
// Throws when this build has no NCCL.
[[nodiscard]] std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                                   const std::string& name, int rank, int size,
                                                                   int device);

}  // namespace oobleck::executor
