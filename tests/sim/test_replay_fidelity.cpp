// Replay against the settings published simulators use: long traces,
// Bamboo's rebalancing, per-node-count iteration times and per-policy
// overrides.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"

using namespace oobleck;
using namespace oobleck::sim;

namespace {

const std::filesystem::path kRoot = OOBLECK_SOURCE_DIR;

const Profile& gpt3_1_3b() {
  static const Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-a100.handwritten.json");
  return profile;
}

// The trace with every time multiplied by `factor`.
Trace stretched(const Trace& trace, double factor) {
  std::ostringstream csv;
  for (const auto& e : trace.events) {
    csv << static_cast<long long>(std::llround(e.time_ms * factor)) << ','
        << (e.change == NodeChange::add ? "add" : "remove") << ',' << e.node << '\n';
  }
  return parse_trace(csv.str(), "stretched");
}

}  // namespace

TEST_CASE("replay: the same losses stretched tenfold lose no more work, at a checkpoint every iteration") {
  // Losses late in a long trace used to count iterations whose end the
  // clock's rounding put a hair before the boundary as lost: every
  // iteration, at a checkpoint every iteration.
  const Trace trace = load_trace((kRoot / "traces/3h.csv").string());
  Scenario scenario;
  scenario.overrides.iteration_ms = 1234.567;
  scenario.overrides.checkpoint_interval_iterations = 1;
  scenario.overrides.checkpoint_save_ms = 12.3;
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  options.policies = {Policy::checkpoint, Policy::oobleck};
  for (const double factor : {1.0, 10.0}) {
    CAPTURE(factor);
    const ReplayResult result = replay(gpt3_1_3b(), stretched(trace, factor), options, scenario);
    for (const auto& p : result.policies) {
      CAPTURE(policy_name(p.policy));
      // At most the iteration in flight (and its save) per failure and per
      // restart, where the job stopped.
      const double most = (p.failures + p.restarts + 1) * (1234.567 + 12.3);
      CHECK(p.time.lost_work_ms <= most);
      CHECK(p.time.total_ms() == doctest::Approx(result.duration_ms).epsilon(1e-9));
    }
  }
}
