// Some ranks of a larger group as a group of their own, over the larger
// group's connections.
//
// Why: a generation's gradient groups are made at every recovery, each with
// its own store client, rendezvous and pairs, while the workers copy layer
// states and redo the step on loaded cores, and every member of a group
// waits for the slowest. The world group already connects every pair of
// workers: a set of trainers sums over it instead, with no group to make.
//
// The sum, the same bits on every member:
// - two members exchange their tensors and each adds the other's (one
//   addition, which commutes), as Gloo's two ranks do;
// - up to kGatherBytes, the members send to the first, which adds them up
//   in member order and sends the total back (two hops, where a ring takes
//   2 (n - 1));
// - above, a ring: n - 1 steps of reduce-scatter, each member adding the
//   chunk it receives to its own, then n - 1 steps passing the totals on
//   (each chunk's total is added up once, on one member, and copied).
// The ring's steps run in wait(): sums of several subgroups are waited for
// in one order on every member (gradient_sync.cpp: by set), and a send
// never waits for the receiver's thread, so no order of arrival can
// deadlock.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "communicator.h"

namespace oobleck::executor {

class SubgroupOverGroup final : public Communicator {
 public:
  // Ranks `ranks` of `group` (ascending), this process being ranks[rank].
  // `index` tells subgroups of one group apart in their tags: every member
  // gives a subgroup the same one, and no two subgroups sharing two members
  // have the same (below kSubgroups).
  SubgroupOverGroup(Communicator& group, std::vector<int> ranks, int rank, int index);

  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override { return static_cast<int>(ranks_.size()); }
  [[nodiscard]] std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int tag) override;
  void recv(torch::Tensor& tensor, int peer, int tag) override;
  void allreduce_sum(torch::Tensor& tensor) override;
  [[nodiscard]] std::unique_ptr<PendingOp> start_allreduce_sum(torch::Tensor& tensor) override;
  void barrier() override;
  // Its operations are the larger group's: they are aborted with it.
  void abort() override;

  // Tags on the larger group: above the executor's own and the Gloo
  // communicator's (communicator_gloo.cpp: up to 2^29 + 1), kSumTags per
  // subgroup, used in turn (a sum is over before the next starts).
  static constexpr int kSumTag = 1 << 30, kSumTags = 1 << 8, kSubgroups = (1 << 30) / kSumTags;
  static constexpr std::int64_t kGatherBytes = 1 << 20;

 private:
  Communicator& group_;
  std::vector<int> ranks_;
  int rank_, index_;
  std::uint64_t sums_ = 0;
};

}  // namespace oobleck::executor
