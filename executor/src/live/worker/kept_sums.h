// The gradient sums of a resumed step's finished passes as a new generation
// keeps them (protocol::NewGeneration::kept_microbatches). Where a kept
// pipeline's seats change, each layer's sums go from the worker that held
// them to its new holder (protocol::SumCopy; recovery::kept_sum_copies), on
// the world group, posted before the state copies and received after them;
// the kept microbatches' share of the loss goes with the last layer's.
//
// Sums that change seats count for nothing until the new seat's are whole:
// a failure in between loses them (a later generation that would keep them
// learns so: KeptSumsChanged) rather than leave sums that are neither seat's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/layer_state.h"
#include "model/train_common.h"
#include "pipeline_step.h"
#include "protocol/protocol.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

// The gradient sums a generation lets this worker keep are no longer what
// the master counts on.
struct KeptSumsChanged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A worker in a new generation: its rank, and its seat (null: not a trainer).
struct SumsPlace {
  int rank = 0;
  const recovery::WorkerSeat* seat = nullptr;
  std::string node;
  int generation = 0;
};

// This worker's kept sums that go to other workers' seats, posted.
struct SumSends {
  std::vector<torch::Tensor> buffers;
  std::vector<std::unique_ptr<PendingOp>> ops;  // (after the buffers: gone first)
  void wait() {
    for (auto& op : ops) op->wait();
  }
};

class KeptSums {
 public:
  // At a generation's start: `slots` and `passed` (the seat before's) are
  // forgotten where nothing is kept, checked where this worker keeps some
  // layer's sums or sends some, and set aside where they change seats.
  void set_aside(const protocol::NewGeneration& g, const SumsPlace& place, std::vector<GradientSlot>& slots,
                 PassedSums& passed);
  [[nodiscard]] SumSends post_sends(const protocol::NewGeneration& g, const SumsPlace& place, Communicator& world,
                                    const ModelConfig& model);
  // The new seat's sums where they change, each layer's its own (the seat
  // before held its shard) or received, once `held` has every layer of the
  // seat. Returns the bytes received.
  std::int64_t take(const protocol::NewGeneration& g, const SumsPlace& place, Communicator& world,
                    const std::map<int, HeldLayer>& held, const ModelConfig& model, std::vector<GradientSlot>& slots,
                    PassedSums& passed);

 private:
  bool moving_ = false;                  // kept sums change seats in this generation
  std::vector<GradientSlot> old_slots_;  // the seat before's sums, while they move
  double old_loss_ = 0;                  // and their share of the loss
};

}  // namespace oobleck::executor
