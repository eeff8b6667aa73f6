// Shared by the replay tests: bundled profiles and traces that start with
// a number of nodes.
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

// Llama 3 70B's costs on H100 nodes under a model section that names no
// heads, so that a stage may take any degree, as a hand-written profile's
// may: its own 8 key/value heads split over no more than 8 GPUs, and the
// tests that take it are of stages over two and four nodes (16-GPU stages
// are faster for it where its costs are taken as they are).
inline const Profile& llama3_70b_any_degree() {
  static const Profile profile = [] {
    Profile p = load_profile(kRoot / "profiles/llama3-70b-h100.analytic.json");
    p.model_json = R"({"name": "llama3-70b"})";
    return p;
  }();
  return profile;
}

// `nodes` nodes at 0 (node1, node2, ...), then whatever the caller appends.
inline std::string start_with(int nodes) {
  std::string csv;
  for (int i = 1; i <= nodes; ++i) csv += "0,add,node" + std::to_string(i) + "\n";
  return csv;
}

}  // namespace oobleck::sim::replay_fixtures
