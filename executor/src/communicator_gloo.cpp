#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "communicator.h"

namespace oobleck::executor {
namespace {

class GlooPending final : public PendingOp {
 public:
  GlooPending(c10::intrusive_ptr<c10d::Work> work, torch::Tensor keep) : work_(std::move(work)), keep_(std::move(keep)) {}
  void wait() override { work_->wait(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  torch::Tensor keep_;  // the buffer must live until the send is done
};

// ProcessGroupGloo is a ProcessGroup in libtorch 1.x and a Backend in 2.x;
// the calls used here are the same in both.
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                   const std::string& host)
      : rank_(rank), size_(size) {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->devices.push_back(host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                            : c10d::ProcessGroupGloo::createDeviceForHostname(host));
    options->timeout = std::chrono::seconds(120);
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(name, store), rank,
                                                         size, options);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int tag) override {
    std::vector<torch::Tensor> buffer = {tensor.contiguous()};
    auto work = group_->send(buffer, peer, tag);
    return std::make_unique<GlooPending>(std::move(work), buffer[0]);
  }
  void recv(torch::Tensor& tensor, int peer, int tag) override {
    std::vector<torch::Tensor> buffer = {tensor};
    group_->recv(buffer, peer, tag)->wait();
  }
  void allreduce_sum(torch::Tensor& tensor) override {
    std::vector<torch::Tensor> buffer = {tensor};
    group_->allreduce(buffer)->wait();
  }
  void barrier() override { group_->barrier()->wait(); }
  void abort() override { group_.reset(); }

 private:
  int rank_, size_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& name, int rank, int size,
                                                     const std::string& host) {
  return std::make_unique<GlooCommunicator>(store, name, rank, size, host);
}

}  // namespace oobleck::executor
