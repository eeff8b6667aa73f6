// What the oobleck-snapshots tests share: a six-layer model whose pipelines
// need two or three nodes, a scenario with round numbers, and replays that
// keep the decision records.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "reference.h"
#include "replay_fixtures.h"

namespace oobleck::sim::snapshot_cases {

using replay_fixtures::gpt3_1_3b;
using replay_fixtures::kRoot;

// Six layers of 1 GB of state on one-GPU nodes that hold three: every
// pipeline has two or three nodes (as in tests/recovery/test_controller.cpp).
constexpr Bytes kLayerState = 1'000'000'000;
inline const Profile& six_layers() {
  static const Profile profile =
      test::uniform_profile(6, 1, 1.0, 2.0, kLayerState, 1'000'000, 3 * kLayerState + 100'000'000);
  return profile;
}
constexpr int kB = 12;

inline std::string nodes_at_zero(int count) {
  std::string csv;
  for (int i = 0; i < count; ++i) csv += "0,add,node" + std::to_string(i) + "\n";
  return csv;
}

// 1 s iterations, no detection delay, 11 s (re)starts, a 0.3 s checkpoint
// every 25 iterations, and restores of 2 s (memory), 3 s (mirror) and 4 s
// (disk, as oobleck's checkpoint load).
inline Scenario quick() {
  Scenario s;
  s.cluster.detection_ms = 0;
  s.cluster.restart_ms = 10'000;
  s.cluster.communicator_ms = 1'000;
  s.overrides.iteration_ms = 1000;
  s.overrides.checkpoint_interval_iterations = 25;
  s.overrides.checkpoint_save_ms = 300;
  s.overrides.checkpoint_load_ms = 4'000;
  s.overrides.oobleck_copy_ms = 0;
  s.overrides.snapshot_restore_memory_ms = 2'000;
  s.overrides.snapshot_restore_mirror_ms = 3'000;
  s.overrides.snapshot_restore_disk_ms = 4'000;
  return s;
}
constexpr Milliseconds kStart = 11'000, kSave = 300;
constexpr int kInterval = 25;

// When the loss comes, half-way through the iteration after `n` done.
inline Milliseconds loss_after(int n) {
  return kStart + n * 1000.0 + (n >= kInterval ? kSave : 0) + (n >= 2 * kInterval ? kSave : 0) + 500;
}

inline ReplayResult run(const Profile& profile, const std::string& csv, const Scenario& scenario,
                        std::vector<Policy> policies, int f = 1, int B = kB) {
  ReplayOptions options;
  options.fault_tolerance = f;
  options.global_microbatches = B;
  options.policies = std::move(policies);
  options.record_decisions = true;
  const ReplayResult result = replay(profile, parse_trace(csv, "test trace"), options, scenario);
  for (const auto& p : result.policies) {
    CAPTURE(policy_name(p.policy));
    CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-12));
  }
  return result;
}

inline std::vector<nlohmann::json> records(const PolicyResult& p) {
  std::vector<nlohmann::json> out;
  for (const auto& line : p.decisions) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace oobleck::sim::snapshot_cases
