// Which nodes compute slower than they should, from one measurement a step.
//
// Each step, each node's speed is what the profile predicts for its share
// of the step divided by what it measured, relative to the median node of
// that step (so that a machine uniformly slower or faster than its profile
// flags nobody). A node is flagged once its speed stayed below slow_below
// for `steps` steps in a row, and unflagged once it stayed above
// recovered_above as long: the gap between the two thresholds and the run
// of steps are the hysteresis that keeps noise from flagging. A flagged
// node's factor is the median of its last `steps` speeds; it is reported
// again when that moves by more than `change` (relative).
#pragma once

#include <deque>
#include <map>
#include <string>

#include "oobleck/planner.h"

namespace oobleck::recovery {

struct StragglerOptions {
  double slow_below = 0.75;
  double recovered_above = 0.85;
  int steps = 3;
  double change = 0.25;
};
// (On CPU nodes that share cores, a node given fewer microbatches measures
// up to about 15 % slower per microbatch than its busier peers, which the
// gap below 1 leaves room for.)

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {});

  // One step: each node's measured compute time and the time the plan
  // predicts for it (both > 0; others are ignored). Nodes absent from a
  // step keep their history; forget() drops a node. True when flagged()
  // changed.
  bool observe(const std::map<std::string, Milliseconds>& measured_ms,
               const std::map<std::string, Milliseconds>& predicted_ms);
  void forget(const std::string& node);

  // The flagged nodes and their factors (what NodeSpeedsMeasured carries).
  [[nodiscard]] const NodeSpeeds& flagged() const { return flagged_; }
  // Every node's speed in the last step it was measured.
  [[nodiscard]] const NodeSpeeds& measured() const { return last_; }

 private:
  StragglerOptions o_;
  std::map<std::string, std::deque<double>> history_;
  NodeSpeeds last_, flagged_;
};

}  // namespace oobleck::recovery
