// --pipelines-per-node, as oobleck-plan instantiate and oobleck-sim replay
// take it.
#pragma once

#include <cstdlib>
#include <string>

#include "oobleck/common/event_lines.h"
#include "oobleck/planner.h"

namespace oobleck::cli {

inline constexpr const char* kPipelinesPerNodeHelp =
    "R: pipelines sharing each node, each on G/R of its GPUs, for models that fit on part of a node (default 1: "
    "every pipeline on whole nodes); auto plans every R and keeps the fastest";

// A divisor of the GPUs per node, or auto (0); InputError otherwise.
inline int parse_pipelines_per_node(const std::string& given, int gpus_per_node) {
  if (given == "auto") return 0;
  char* end = nullptr;
  const long r = std::strtol(given.c_str(), &end, 10);
  if (given.empty() || *end != '\0' || r < 1 || gpus_per_node % r != 0) {
    throw InputError("--pipelines-per-node " + quoted_excerpt(given) + ": expected auto or a divisor of the " +
                     std::to_string(gpus_per_node) + " GPUs per node");
  }
  return static_cast<int>(r);
}

}  // namespace oobleck::cli
