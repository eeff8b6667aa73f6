// Bundled profiles the simulator's tests replay, each read once.
#pragma once

#include <filesystem>

#include "oobleck/planner.h"

namespace oobleck::test {

// GPT-3 1.3B on A100 nodes, the hand-written profile.
inline const Profile& gpt3_1_3b_a100() {
  static const Profile profile =
      load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles/gpt3-1.3b-a100.handwritten.json");
  return profile;
}

}  // namespace oobleck::test
