// The last step of a live run as the workers timed it: a Chrome trace in the
// format `oobleck-sim iteration` writes (one process per pipeline, one thread
// per stage and GPU), so the two open side by side in Perfetto, and a per-stage
// timing summary.
#pragma once

#include <map>
#include <string>

#include "protocol/protocol.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

struct LastStepReport {
  std::string chrome_trace;   // JSON
  std::string stage_summary;  // a table for people
};

// `timelines`: by worker rank, what each worker sent when training ended.
[[nodiscard]] LastStepReport last_step_report(const Plan& plan, int gpus_per_node,
                                              const std::map<int, protocol::StepTimeline>& timelines,
                                              Milliseconds iteration_ms);

}  // namespace oobleck::executor
