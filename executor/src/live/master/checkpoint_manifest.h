// A checkpoint's manifest (format oobleck.checkpoint.v1): latest.json in a
// checkpoint folder, and manifest.json in each step's folder. Read from
// disk a user hands over (--resume), so every field is checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace oobleck::executor {

struct CheckpointManifest {
  int step = 0;         // the state after this step
  std::string folder;   // "step-<step>", inside the checkpoint folder
  int layers = 0;       // the model's layer count
  std::uint64_t seed = 0;
};

// The manifest in `text`; InputError naming `origin` and the field when it is
// not one: steps from 0 to kMaxCheckpointStep, a folder named after its step
// (never a path out of the checkpoint folder), a positive layer count.
[[nodiscard]] CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& origin);

inline constexpr int kMaxCheckpointStep = 1'000'000'000;

}  // namespace oobleck::executor
