// --gradient-sync and --gradient-bucket-mb, as oobleck-plan instantiate and
// oobleck-sim replay take them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "oobleck/planner.h"

namespace oobleck::cli {

struct GradientSyncFlags {
  std::string mode = "per-layer";
  double bucket_mb = kDefaultGradientBucketBytes / (1 << 20);
  [[nodiscard]] GradientSync sync() const { return *gradient_sync_named(mode); }
  [[nodiscard]] double bucket_bytes() const { return bucket_mb * (1 << 20); }
};

inline void add_gradient_sync_options(CLI::App* cmd, GradientSyncFlags& flags) {
  cmd->add_option("--gradient-sync", flags.mode,
                  "When gradients are all-reduced across pipelines: per-layer (as the backward goes, overlapping "
                  "it), after-backward (once it ends, as oobleck-run does) or buckets (several layers' gradients "
                  "at once, as PyTorch DDP; --gradient-bucket-mb)")
      ->check(CLI::IsMember({"per-layer", "after-backward", "buckets"}));
  cmd->add_option("--gradient-bucket-mb", flags.bucket_mb,
                  "With --gradient-sync buckets: a bucket's size in MiB (DDP's bucket_cap_mb; default 25)")
      ->check(CLI::Range(1e-6, 1e9));
}

}  // namespace oobleck::cli
