// A live run's inputs, checked before anything starts: every bad flag,
// file or line is an InputError naming it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoints.h"
#include "oobleck/executor/live.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

struct JobInputs {
  Profile profile;
  Plan initial_plan;
  std::vector<std::string> hosts;     // from --hostfile; empty: every node is local
  std::optional<ResumePoint> resume;  // from --resume
};

[[nodiscard]] JobInputs load_job_inputs(const MasterOptions& options);

}  // namespace oobleck::executor
