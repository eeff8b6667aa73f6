#include "pair_over_group.h"

#include <utility>

namespace oobleck::executor {
namespace {

// An exchange in flight: this rank's tensor sent; the other's received when
// waited for, then added (the sum goes to `target`).
class PendingPairSum final : public PendingOp {
 public:
  PendingPairSum(Communicator& group, int peer, int tag, std::unique_ptr<PendingOp> sent, torch::Tensor mine,
                 torch::Tensor target)
      : group_(group), peer_(peer), tag_(tag), sent_(std::move(sent)), mine_(std::move(mine)),
        target_(std::move(target)) {}
  void wait() override {
    torch::Tensor theirs = torch::empty_like(mine_);
    group_.recv(theirs, peer_, tag_);
    sent_->wait();
    target_.copy_(mine_ + theirs);
  }

 private:
  Communicator& group_;
  int peer_, tag_;
  std::unique_ptr<PendingOp> sent_;
  torch::Tensor mine_, target_;
};

}  // namespace

PairOverGroup::PairOverGroup(Communicator& group, std::array<int, 2> ranks, int rank)
    : group_(group), ranks_(ranks), rank_(rank) {}

std::unique_ptr<PendingOp> PairOverGroup::send(const torch::Tensor& tensor, int peer, int tag) {
  return group_.send(tensor, ranks_.at(static_cast<std::size_t>(peer)), tag);
}

void PairOverGroup::recv(torch::Tensor& tensor, int peer, int tag) {
  group_.recv(tensor, ranks_.at(static_cast<std::size_t>(peer)), tag);
}

void PairOverGroup::allreduce_sum(torch::Tensor& tensor) { start_allreduce_sum(tensor)->wait(); }

// Exchanges are started in the same order on both ranks, as every
// collective is, so their count tells them apart.
std::unique_ptr<PendingOp> PairOverGroup::start_allreduce_sum(torch::Tensor& tensor) {
  const int tag = kExchangeTag + static_cast<int>(exchanges_++ % kExchangeTags);
  const int peer = ranks_.at(static_cast<std::size_t>(1 - rank_));
  torch::Tensor mine = tensor.clone();  // (the sum goes back into `tensor` while the send may still read)
  auto sent = group_.send(mine, peer, tag);
  return std::make_unique<PendingPairSum>(group_, peer, tag, std::move(sent), std::move(mine), tensor);
}

void PairOverGroup::barrier() {
  torch::Tensor token = torch::zeros({1});
  allreduce_sum(token);
}

void PairOverGroup::abort() { group_.abort(); }

}  // namespace oobleck::executor
