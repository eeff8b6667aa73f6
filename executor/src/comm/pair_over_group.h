// Two ranks of a larger group as a group of their own, over the larger
// group's connections.
//
// Why: a generation's gradient groups are made at every recovery, each with
// its own store client, rendezvous and pairs, while the workers copy layer
// states and redo the step on two loaded cores; where pipelines are cut
// differently, most of them have two members (a plan of a 3-node and a
// 2-node pipeline: four of its five). Two ranks need no group of their own:
// the world group already connects them, and their all-reduce is an
// exchange (each sends its tensor and adds the other's, one addition, so
// both get the same sum bit for bit, as Gloo's exchange between two ranks
// gives it).
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "communicator.h"

namespace oobleck::executor {

class PairOverGroup final : public Communicator {
 public:
  // Ranks `ranks` of `group`, this process being ranks[rank].
  PairOverGroup(Communicator& group, std::array<int, 2> ranks, int rank);

  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override { return 2; }
  [[nodiscard]] std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int tag) override;
  void recv(torch::Tensor& tensor, int peer, int tag) override;
  void allreduce_sum(torch::Tensor& tensor) override;
  [[nodiscard]] std::unique_ptr<PendingOp> start_allreduce_sum(torch::Tensor& tensor) override;
  void barrier() override;
  // Its operations are the larger group's: they are aborted with it.
  void abort() override;

  // Tags of its exchanges on the larger group: above the executor's own and
  // apart from the Gloo communicator's (communicator_gloo.cpp).
  static constexpr int kExchangeTag = (1 << 28) + (1 << 21), kExchangeTags = 1 << 20;

 private:
  Communicator& group_;
  std::array<int, 2> ranks_;
  int rank_;
  std::uint64_t exchanges_ = 0;
};

}  // namespace oobleck::executor
