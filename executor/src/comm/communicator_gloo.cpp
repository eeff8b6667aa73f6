#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "communicator.h"
#include "gloo_loop_ticker.h"
#include "peeking_store.h"

namespace oobleck::executor {
namespace {

// The groups of a process that bind to one address share one Gloo device:
// one event loop and its thread. A device per group, as libtorch makes by
// default, gave each worker four to six new loops at every recovery (the
// world and the gradient groups), each thread another to schedule on a
// loaded machine while the groups connect. A device stays for the process's
// life, ready for the next generation's groups (a worker binds to one
// address per rank it holds on one machine, generation_groups.h: a few; an
// idle loop wakes every 10 ms). Never destroyed: a group may be destroyed
// on a detached thread after main returns.
std::shared_ptr<gloo::transport::Device> shared_device(const std::string& host) {
  static std::mutex mutex;
  static auto* devices = new std::map<std::string, std::shared_ptr<gloo::transport::Device>>();
  const std::lock_guard lock(mutex);
  auto& device = (*devices)[host];
  if (!device) {
    device = host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                          : c10d::ProcessGroupGloo::createDeviceForHostname(host);
  }
  return device;
}

// ProcessGroupGloo is a ProcessGroup in libtorch 1.x and a Backend in 2.x;
// the calls used here are the same in both.
//
// abort() must free a thread blocked in any operation, from another thread.
// Point-to-point operations are aborted through their Work (Gloo wakes the
// waiter); collectives run on the group's own threads, so their waiter waits
// in short slices and leaves when aborted, abandoning the operation to Gloo
// (whose sockets the caller shuts down, see control::abandon_sockets).
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                   const std::string& host, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size) {
    communicating([&] {
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->devices.push_back(shared_device(host));
      options->timeout = timeout;
      const GlooLoopTicker ticker(options->devices.front());  // while the pairs connect
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
          make_peeking_store(c10::make_intrusive<c10d::PrefixStore>(name, store)), rank, size, options);
    });
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // GPU tensors travel through host memory: Gloo reads and writes CPU
  // buffers, and the copies wait for the GPU's work on them.
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int tag) override {
    std::vector<torch::Tensor> buffer = {host_copy(tensor)};
    c10::intrusive_ptr<c10d::Work> work;
    communicating([&] { work = track(group_->send(buffer, peer, tag)); });
    return std::make_unique<Pending>(*this, std::move(work), buffer[0]);
  }
  void recv(torch::Tensor& tensor, int peer, int tag) override {
    std::vector<torch::Tensor> buffer = {host_buffer(tensor)};
    communicating([&] { wait_point_to_point(track(group_->recv(buffer, peer, tag))); });
    if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
  }
  void allreduce_sum(torch::Tensor& tensor) override { start_allreduce_sum(tensor)->wait(); }
  std::unique_ptr<PendingOp> start_allreduce_sum(torch::Tensor& tensor) override {
    if (size_ == 2) return start_exchange(tensor);
    std::vector<torch::Tensor> buffer = {host_copy(tensor)};
    c10::intrusive_ptr<c10d::Work> work;
    communicating([&] { work = group_->allreduce(buffer); });
    return std::make_unique<PendingAllreduce>(*this, std::move(work), buffer[0], tensor);
  }
  // Gathered to rank 0, added up in rank order, sent back. Among five
  // processes on two cores, the last to arrive with a vector of 56 doubles
  // waited 6–9 ms for the all-reduce, 1–2 ms for this. (Two ranks exchange
  // instead: one hop each way, the same sum.)
  void allreduce_sum_small(torch::Tensor& tensor) override {
    if (size_ == 1) return;
    if (size_ == 2) return allreduce_sum(tensor);
    if (rank_ != 0) {
      const auto sent = send(tensor.clone(), 0, kSmallSumTag);  // (the sum comes back into `tensor`)
      recv(tensor, 0, kSmallSumTag + 1);
      sent->wait();
      return;
    }
    torch::Tensor total = tensor.clone();
    for (int peer = 1; peer < size_; ++peer) {
      torch::Tensor part = torch::empty_like(tensor);
      recv(part, peer, kSmallSumTag);
      total.add_(part);
    }
    std::vector<std::unique_ptr<PendingOp>> sends;
    for (int peer = 1; peer < size_; ++peer) sends.push_back(send(total, peer, kSmallSumTag + 1));
    for (auto& s : sends) s->wait();
    tensor.copy_(total);
  }
  void barrier() override {
    communicating([&] { wait_collective(group_->barrier()); });
  }
  void abort() override {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    for (auto& work : in_flight_) work->abort();
  }

 private:
  // Two ranks: each sends its tensor to the other and adds what comes back,
  // a hop each way on the caller's thread, where the all-reduce goes through
  // the group's work queue and threads (among two processes on an idle
  // machine, the last to arrive waited 0.8–1 ms for it, 0.2–0.3 ms so). The
  // same sum, bit for bit: one addition, which commutes. Exchanges are
  // called in the same order on both ranks, as every collective is, so
  // their count tells them apart.
  std::unique_ptr<PendingOp> start_exchange(torch::Tensor& tensor) {
    const int tag = kExchangeTag + static_cast<int>(exchanges_++ % kExchangeTags);
    const int peer = 1 - rank_;
    std::vector<torch::Tensor> mine = {host_copy(tensor)};
    std::vector<torch::Tensor> theirs = {torch::empty_like(mine[0])};
    c10::intrusive_ptr<c10d::Work> sent, received;
    communicating([&] {
      sent = track(group_->send(mine, peer, tag));
      received = track(group_->recv(theirs, peer, tag));
    });
    return std::make_unique<PendingExchange>(*this, std::move(sent), std::move(received), mine[0], theirs[0], tensor);
  }

  class Pending final : public PendingOp {
   public:
    Pending(GlooCommunicator& owner, c10::intrusive_ptr<c10d::Work> work, torch::Tensor keep)
        : owner_(owner), work_(std::move(work)), keep_(std::move(keep)) {}
    void wait() override {
      owner_.communicating([&] { owner_.wait_point_to_point(work_); });
    }

   private:
    GlooCommunicator& owner_;
    c10::intrusive_ptr<c10d::Work> work_;
    torch::Tensor keep_;  // the buffer must live until the send is done
  };

  // Host buffers for GPU tensors are page-locked: copies from and to the
  // GPU then run at the bus's speed (libtorch caches such blocks).
  [[nodiscard]] static torch::Tensor host_copy(const torch::Tensor& t) {
    if (t.is_cpu()) return t.contiguous();
    auto host = host_buffer(t);
    host.copy_(t);
    return host;
  }
  [[nodiscard]] static torch::Tensor host_buffer(const torch::Tensor& t) {
    return t.is_cpu() ? t : torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  }

  // An all-reduce in flight: its host buffer, and the tensor the sum goes
  // back to when that is not the buffer itself (a GPU tensor).
  class PendingAllreduce final : public PendingOp {
   public:
    PendingAllreduce(GlooCommunicator& owner, c10::intrusive_ptr<c10d::Work> work, torch::Tensor buffer,
                     torch::Tensor target)
        : owner_(owner), work_(std::move(work)), buffer_(std::move(buffer)), target_(std::move(target)) {}
    void wait() override {
      owner_.communicating([&] { owner_.wait_collective(work_); });
      if (!buffer_.is_same(target_)) target_.copy_(buffer_);
    }

   private:
    GlooCommunicator& owner_;
    c10::intrusive_ptr<c10d::Work> work_;
    torch::Tensor buffer_, target_;
  };

  // An exchange in flight: the sum goes to `target` once both messages are
  // through (the send reads `mine`, which may be `target` itself).
  class PendingExchange final : public PendingOp {
   public:
    PendingExchange(GlooCommunicator& owner, c10::intrusive_ptr<c10d::Work> sent,
                    c10::intrusive_ptr<c10d::Work> received, torch::Tensor mine, torch::Tensor theirs,
                    torch::Tensor target)
        : owner_(owner), sent_(std::move(sent)), received_(std::move(received)), mine_(std::move(mine)),
          theirs_(std::move(theirs)), target_(std::move(target)) {}
    void wait() override {
      owner_.communicating([&] {
        owner_.wait_point_to_point(received_);
        owner_.wait_point_to_point(sent_);
      });
      if (mine_.is_same(target_)) {
        target_.add_(theirs_);
      } else {
        target_.copy_(mine_ + theirs_);
      }
    }

   private:
    GlooCommunicator& owner_;
    c10::intrusive_ptr<c10d::Work> sent_, received_;
    torch::Tensor mine_, theirs_, target_;
  };

  // Whatever Gloo or the store throw is a communication failure.
  template <typename Body>
  static void communicating(Body&& body) {
    try {
      body();
    } catch (const CommunicationError&) {
      throw;
    } catch (const std::exception& e) {
      throw CommunicationError(e.what());
    }
  }

  c10::intrusive_ptr<c10d::Work> track(c10::intrusive_ptr<c10d::Work> work) {
    std::lock_guard lock(mutex_);
    if (aborted_) work->abort();
    in_flight_.push_back(work);
    return work;
  }
  void forget(const c10::intrusive_ptr<c10d::Work>& work) {
    std::lock_guard lock(mutex_);
    in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), work), in_flight_.end());
  }
  void throw_if_aborted() const {
    if (aborted_) throw CommunicationAborted();
  }
  // An aborted wait returns false instead of throwing.
  void wait_point_to_point(const c10::intrusive_ptr<c10d::Work>& work) {
    bool done = false;
    try {
      done = work->wait();
    } catch (...) {
      forget(work);
      throw;
    }
    forget(work);
    if (!done) throw CommunicationAborted();
    throw_if_aborted();
  }
  void wait_collective(const c10::intrusive_ptr<c10d::Work>& work) {
    for (;;) {
      throw_if_aborted();
      try {
        work->wait(std::chrono::milliseconds(50));
        return;
      } catch (...) {
        // Still running: wait on. Done (perhaps just now, as the slice ran
        // out): its own outcome, without a timeout.
        if (work->isCompleted()) {
          work->wait();
          return;
        }
      }
    }
  }

  // Above every tag the executor sends with (activations 2m and 2m + 1,
  // state copies 2l and 2l + 1, kept sums 2^20 + l).
  static constexpr int kSmallSumTag = 1 << 29;
  static constexpr int kExchangeTag = 1 << 28, kExchangeTags = 1 << 20;  // (below kSmallSumTag)
  std::uint64_t exchanges_ = 0;

  int rank_, size_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::mutex mutex_;
  std::atomic<bool> aborted_{false};
  std::vector<c10::intrusive_ptr<c10d::Work>> in_flight_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& name, int rank, int size,
                                                     const std::string& host, std::chrono::milliseconds timeout) {
  return std::make_unique<GlooCommunicator>(store, name, rank, size, host, timeout);
}

}  // namespace oobleck::executor
