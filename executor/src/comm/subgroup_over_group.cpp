#include "subgroup_over_group.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace oobleck::executor {
namespace {

// Two members: this one's tensor sent at the start, the other's received
// and added in wait().
class PendingExchange final : public PendingOp {
 public:
  PendingExchange(Communicator& group, int peer, int tag, torch::Tensor mine, torch::Tensor target)
      : group_(group), peer_(peer), tag_(tag), mine_(std::move(mine)), target_(std::move(target)) {
    sent_ = group_.send(mine_, peer_, tag_);
  }
  void wait() override {
    torch::Tensor theirs = torch::empty_like(mine_);
    group_.recv(theirs, peer_, tag_);
    sent_->wait();
    target_.copy_(mine_ + theirs);
  }

 private:
  Communicator& group_;
  int peer_, tag_;
  torch::Tensor mine_, target_;
  std::unique_ptr<PendingOp> sent_;
};

// Gathered to the first member, added up in member order, sent back. The
// others' sends start at once.
class PendingGather final : public PendingOp {
 public:
  PendingGather(Communicator& group, const std::vector<int>& ranks, int rank, int tag, torch::Tensor mine,
                torch::Tensor target)
      : group_(group), ranks_(ranks), rank_(rank), tag_(tag), mine_(std::move(mine)), target_(std::move(target)) {
    if (rank_ != 0) sent_ = group_.send(mine_, ranks_[0], tag_);
  }
  void wait() override {
    if (rank_ != 0) {
      torch::Tensor total = torch::empty_like(mine_);
      group_.recv(total, ranks_[0], tag_);
      sent_->wait();
      target_.copy_(total);
      return;
    }
    torch::Tensor total = mine_;
    for (std::size_t m = 1; m < ranks_.size(); ++m) {
      torch::Tensor part = torch::empty_like(mine_);
      group_.recv(part, ranks_[m], tag_);
      total.add_(part);
    }
    std::vector<std::unique_ptr<PendingOp>> sends;
    for (std::size_t m = 1; m < ranks_.size(); ++m) sends.push_back(group_.send(total, ranks_[m], tag_));
    for (auto& s : sends) s->wait();
    target_.copy_(total);
  }

 private:
  Communicator& group_;
  const std::vector<int>& ranks_;
  int rank_, tag_;
  torch::Tensor mine_, target_;
  std::unique_ptr<PendingOp> sent_;
};

// A ring over the members, in wait(). Member m's chunk c is [c N / n,
// (c + 1) N / n) of the flat tensor. Reduce-scatter: at step s, chunk
// (m - s) mod n goes to the next member and chunk (m - s - 1) mod n comes
// from the one before and is added; after n - 1 steps member m holds the
// total of chunk (m + 1) mod n. Then the totals go round: at step s, chunk
// (m + 1 - s) mod n goes on and chunk (m - s) mod n comes in. Messages
// between two members keep their order (one tag, one direction), so the
// steps share the tag.
class PendingRing final : public PendingOp {
 public:
  PendingRing(Communicator& group, const std::vector<int>& ranks, int rank, int tag, torch::Tensor flat,
              torch::Tensor target)
      : group_(group), ranks_(ranks), rank_(rank), tag_(tag), flat_(std::move(flat)), target_(std::move(target)) {}
  void wait() override {
    const int n = static_cast<int>(ranks_.size());
    const std::int64_t total = flat_.numel();
    const auto chunk = [&](int c) {
      c = ((c % n) + n) % n;
      const std::int64_t begin = total * c / n, end = total * (c + 1) / n;
      return flat_.narrow(0, begin, end - begin);
    };
    const int next = ranks_[static_cast<std::size_t>((rank_ + 1) % n)];
    const int before = ranks_[static_cast<std::size_t>((rank_ + n - 1) % n)];
    for (int s = 0; s < n - 1; ++s) {
      const auto sent = group_.send(chunk(rank_ - s), next, tag_);
      torch::Tensor in = chunk(rank_ - s - 1);
      torch::Tensor part = torch::empty_like(in);
      group_.recv(part, before, tag_);
      in.add_(part);
      sent->wait();
    }
    for (int s = 0; s < n - 1; ++s) {
      const auto sent = group_.send(chunk(rank_ + 1 - s), next, tag_);
      torch::Tensor in = chunk(rank_ - s);
      group_.recv(in, before, tag_);
      sent->wait();
    }
    target_.copy_(flat_.view(target_.sizes()));
  }

 private:
  Communicator& group_;
  const std::vector<int>& ranks_;
  int rank_, tag_;
  torch::Tensor flat_, target_;
};

}  // namespace

SubgroupOverGroup::SubgroupOverGroup(Communicator& group, std::vector<int> ranks, int rank, int index)
    : group_(group), ranks_(std::move(ranks)), rank_(rank), index_(index) {
  if (ranks_.size() < 2 || rank_ < 0 || rank_ >= size() || index_ < 0 || index_ >= kSubgroups) {
    throw std::invalid_argument("SubgroupOverGroup: rank " + std::to_string(rank_) + " of " +
                                std::to_string(ranks_.size()) + ", index " + std::to_string(index_));
  }
}

std::unique_ptr<PendingOp> SubgroupOverGroup::send(const torch::Tensor& tensor, int peer, int tag) {
  return group_.send(tensor, ranks_.at(static_cast<std::size_t>(peer)), tag);
}

void SubgroupOverGroup::recv(torch::Tensor& tensor, int peer, int tag) {
  group_.recv(tensor, ranks_.at(static_cast<std::size_t>(peer)), tag);
}

void SubgroupOverGroup::allreduce_sum(torch::Tensor& tensor) { start_allreduce_sum(tensor)->wait(); }

// Sums are started in the same order on every member, as every collective
// is, so their count tells them apart.
std::unique_ptr<PendingOp> SubgroupOverGroup::start_allreduce_sum(torch::Tensor& tensor) {
  const int tag = kSumTag + index_ * kSumTags + static_cast<int>(sums_++ % kSumTags);
  // A copy: the sum goes back into `tensor` while a send may still read.
  torch::Tensor mine = tensor.contiguous().clone();
  if (size() == 2) {
    return std::make_unique<PendingExchange>(group_, ranks_[static_cast<std::size_t>(1 - rank_)], tag,
                                             std::move(mine), tensor);
  }
  if (tensor.numel() * tensor.element_size() <= kGatherBytes) {
    return std::make_unique<PendingGather>(group_, ranks_, rank_, tag, std::move(mine), tensor);
  }
  return std::make_unique<PendingRing>(group_, ranks_, rank_, tag, mine.view({-1}), tensor);
}

void SubgroupOverGroup::barrier() {
  torch::Tensor token = torch::zeros({1});
  allreduce_sum(token);
}

void SubgroupOverGroup::abort() { group_.abort(); }

}  // namespace oobleck::executor
