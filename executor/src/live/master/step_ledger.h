// The trainers' reports of the steps in flight, and the check a commit makes
// on them: together they trained every sample of the global batch, each
// exactly once; the step's loss is the sum of their shares.
#pragma once

#include <cstdint>
#include <map>

#include "protocol/protocol.h"

namespace oobleck::executor {

class StepLedger {
 public:
  explicit StepLedger(std::int64_t global_batch_samples) : expected_(global_batch_samples) {}

  void add(int step, int rank, const protocol::Ready& report) { reports_[step][rank] = report; }
  void clear() { reports_.clear(); }

  struct Total {
    double loss = 0;
    std::int64_t samples = 0;
  };
  // The step's loss and samples; its reports are dropped. Throws (a bug,
  // not a failure) when the samples do not tile the global batch.
  Total total(int step);

 private:
  std::int64_t expected_;
  std::map<int, std::map<int, protocol::Ready>> reports_;  // step -> rank -> report
};

}  // namespace oobleck::executor
