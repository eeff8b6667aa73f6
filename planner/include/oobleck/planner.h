// oobleck planner: profiles in, pipeline templates, instantiation and
// reconfiguration plans out. Plain C++, deterministic, no global state.
#pragma once
//
// The vocabulary, one header per part (each includes the ones before it):
//   planner/profile.h     profiles and their files
//   planner/cost_model.h  the cost model
//   planner/templates.h   pipeline templates
//   planner/plan.h        plans, instantiation, whole-cluster planning
//   planner/files.h       hostfiles, templates and plans as JSON
#include "oobleck/planner/files.h"

// Plans on nodes of unequal speed, and re-plans after nodes leave or join
// (part of this header's vocabulary).
#include "oobleck/node_speeds.h"
#include "oobleck/reconfigure.h"
