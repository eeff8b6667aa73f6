// The oobleck-snapshots policy's costs, scenario keys and outputs.
#include <cmath>

#include "scenario_errors.h"
#include "snapshot_cases.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::snapshot_cases;

// ---------------------------------------------------------------- (d) scenario files

TEST_CASE("oobleck-snapshots: derived costs, and scenario overrides of them") {
  // Without overrides: the mirror restore sends the most loaded node's 3 GB
  // over the 25 GB/s network and copies it host to device at 20 GB/s.
  const std::string csv = nodes_at_zero(4) + std::to_string(loss_after(33)) + ",remove,node0\n" +
                          std::to_string(loss_after(33)) + ",remove,node2\n" + std::to_string(loss_after(33) + 30'000) +
                          ",add,node9\n";
  Scenario s = quick();
  s.overrides.snapshot_restore_mirror_ms.reset();
  const auto derived = run(six_layers(), csv, s, {Policy::oobleck_snapshots}).policies[0];
  CHECK(derived.time.restart_ms == doctest::Approx(kStart + 11'000 + 3e9 / 25e9 * 1000 + 3e9 / 20e9 * 1000));
  // The copy (150 ms) fits under a 1 s iteration: no stall. Under 100 ms
  // iterations the optimizer waits 50 ms per snapshot.
  CHECK(derived.time.checkpoint_ms == doctest::Approx(2 * kSave));
  s.overrides.iteration_ms = 100;
  s.overrides.checkpoint_interval_iterations = 0;
  s.overrides.snapshot_every_iterations = 2;
  const auto stalled = run(six_layers(), nodes_at_zero(4) + "61000,add,node9\n", s, {Policy::oobleck_snapshots});
  CHECK(stalled.policies[0].time.checkpoint_ms == doctest::Approx(std::floor(50'000 / 125.0) * 25));

  const Scenario parsed = parse_scenario(R"({"cluster": {"network_bytes_per_s": 1e10},
    "overrides": {"snapshot_every_iterations": 2, "mirror_every_iterations": 6, "snapshot_stall_ms": 5,
                  "snapshot_restore_memory_ms": 1, "snapshot_restore_mirror_ms": 2, "snapshot_restore_disk_ms": 3}})",
                                         "s.json");
  CHECK(parsed.cluster.network_bytes_per_s == 1e10);
  CHECK(parsed.overrides.snapshot_every_iterations == 2);
  CHECK(parsed.overrides.mirror_every_iterations == 6);
  CHECK(parsed.overrides.snapshot_stall_ms == 5);
  CHECK(parsed.overrides.snapshot_restore_memory_ms == 1);
  CHECK(parsed.overrides.snapshot_restore_mirror_ms == 2);
  CHECK(parsed.overrides.snapshot_restore_disk_ms == 3);
  CHECK(Cluster{}.network_bytes_per_s == 25e9);
  // The parsed values drive the policy: a mirror every 6 of 2.
  const auto honoured = run(six_layers(), csv, parsed, {Policy::oobleck_snapshots}).policies[0];
  CHECK(honoured.snapshot_every_iterations == 2);
  CHECK(honoured.mirror_every_iterations == 6);

  const auto message = [](const std::string& text) { return scenario_error(text, "bad.json"); };
  CHECK(message(R"({"overrides": {"snapshot_stall_ms": -1}})")
            .find("bad.json: overrides.snapshot_stall_ms: expected a non-negative number") == 0);
  CHECK(message(R"({"overrides": {"snapshot_restore_disk_ms": "4"}})")
            .find("bad.json: overrides.snapshot_restore_disk_ms: expected a number") == 0);
  CHECK(message(R"({"overrides": {"snapshot_restore_memory_ms": 1e13}})")
            .find("bad.json: overrides.snapshot_restore_memory_ms: expected at most 1e12 ms") == 0);
  CHECK(message(R"({"overrides": {"snapshot_every_iterations": 1.5}})")
            .find("bad.json: overrides.snapshot_every_iterations: expected a non-negative integer") == 0);
  CHECK(message(R"({"overrides": {"snapshot_every_iterations": 3}})")
            .find("bad.json: overrides.mirror_every_iterations: expected 0 or a multiple of "
                  "snapshot_every_iterations (3), got 4") == 0);
  CHECK(message(R"({"overrides": {"mirror_every_iterations": -4}})")
            .find("bad.json: overrides.mirror_every_iterations: expected a non-negative integer") == 0);
  CHECK(message(R"({"cluster": {"network_bytes_per_s": 0}})")
            .find("bad.json: cluster.network_bytes_per_s: expected a positive number") == 0);
  CHECK(message(R"({"overrides": {"snapshot_every": 1}})").find("bad.json: overrides.snapshot_every: unknown field") ==
        0);
  // Given in code, the policy says the same.
  Scenario odd = quick();
  odd.overrides.snapshot_every_iterations = 3;
  CHECK_THROWS_WITH_AS((void)run(six_layers(), nodes_at_zero(4) + "1000,add,node9\n", odd, {Policy::oobleck_snapshots}),
                       doctest::Contains("mirror_every_iterations"), InputError);
}

// ---------------------------------------------------------------- outputs

TEST_CASE("oobleck-snapshots: JSON and the summary say where rollbacks came from") {
  const std::string csv = nodes_at_zero(4) + std::to_string(loss_after(33)) + ",remove,node0\n" +
                          std::to_string(loss_after(33)) + ",remove,node2\n100000,add,node9\n";
  const ReplayResult r = run(six_layers(), csv, quick(), {Policy::oobleck, Policy::oobleck_snapshots});
  const auto json = nlohmann::json::parse(replay_to_json(r));
  const auto& p = json["policies"]["oobleck-snapshots"];
  CHECK(p["rollbacks"] == nlohmann::json{{"memory", 0}, {"mirror", 1}, {"checkpoint", 0}});
  CHECK(p["snapshot_every_iterations"] == 1);
  CHECK(p["mirror_every_iterations"] == 4);
  CHECK(p["unrecoverable"] == 1);
  CHECK_FALSE(json["policies"]["oobleck"].contains("rollbacks"));
  const std::string table = summary_table(r);
  CHECK(table.find("oobleck-snapshots  ") != std::string::npos);
  CHECK(table.find("rollbacks past f to memory 0, to mirrors 1, to the checkpoint 0") != std::string::npos);
  // The decisions file holds one policy's generations: oobleck's when it ran.
  CHECK(decisions_jsonl(r).find("\"source\":\"mirror\"") == std::string::npos);
  ReplayResult only_snapshots = r;
  only_snapshots.policies.erase(only_snapshots.policies.begin());
  CHECK(decisions_jsonl(only_snapshots).find("\"source\":\"mirror\"") != std::string::npos);
}
