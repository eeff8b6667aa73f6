// Shared by the replay tests: the bundled 1.3B profile and traces that
// start with a number of nodes.
#pragma once

#include <filesystem>
#include <string>

#include "oobleck/planner.h"

namespace oobleck::sim::replay_fixtures {

inline const std::filesystem::path kRoot = OOBLECK_SOURCE_DIR;

inline const Profile& gpt3_1_3b() {
  static const Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-a100.handwritten.json");
  return profile;
}

// `nodes` nodes at 0 (node1, node2, ...), then whatever the caller appends.
inline std::string start_with(int nodes) {
  std::string csv;
  for (int i = 1; i <= nodes; ++i) csv += "0,add,node" + std::to_string(i) + "\n";
  return csv;
}

}  // namespace oobleck::sim::replay_fixtures
