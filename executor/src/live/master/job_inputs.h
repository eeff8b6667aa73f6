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
  std::vector<std::string> hosts;     // --hostfile's or the Slurm allocation's; empty: every node is local
  bool slurm = false;                 // agents on other hosts start with srun, not ssh
  std::string launcher;               // local, ssh or slurm: --launcher resolved
  std::string master_addr;            // where agents and workers reach the master
  std::optional<ResumePoint> resume;  // from --resume
};

[[nodiscard]] JobInputs load_job_inputs(const MasterOptions& options);

}  // namespace oobleck::executor
