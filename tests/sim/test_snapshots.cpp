// The oobleck-snapshots policy: oobleck whose fall-back past f restores
// in-memory snapshots (own, then mirrored) before the disk checkpoint.
// Oracles: the oobleck policy itself (within f), hand computations, and a
// brute-force replay of every snapshot the live executor would keep.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "snapshot_cases.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::snapshot_cases;

namespace {

void check_same(const PolicyResult& a, const PolicyResult& b) {
  CHECK(a.samples == b.samples);
  CHECK(a.time.training_ms == b.time.training_ms);
  CHECK(a.time.reconfiguration_ms == b.time.reconfiguration_ms);
  CHECK(a.time.restart_ms == b.time.restart_ms);
  CHECK(a.time.checkpoint_ms == b.time.checkpoint_ms);
  CHECK(a.time.lost_work_ms == b.time.lost_work_ms);
  CHECK(a.time.waiting_ms == b.time.waiting_ms);
  CHECK(a.failures == b.failures);
  CHECK(a.reconfigurations == b.reconfigurations);
  CHECK(a.restarts == b.restarts);
  CHECK(a.unrecoverable == b.unrecoverable);
  CHECK(a.checkpoint_interval_iterations == b.checkpoint_interval_iterations);
  REQUIRE(a.timeline.size() == b.timeline.size());
  for (std::size_t i = 0; i < a.timeline.size(); ++i) {
    CHECK(a.timeline[i].time_ms == b.timeline[i].time_ms);
    CHECK(a.timeline[i].pipelines == b.timeline[i].pipelines);
    CHECK(a.timeline[i].samples_per_s == b.timeline[i].samples_per_s);
  }
  CHECK(a.decisions == b.decisions);
}

// ---------------------------------------------------------------- the brute-force oracle

// The first plan of `nodes`, as the replay's controller makes it.
Plan first_plan(const Profile& profile, int nodes, int f) {
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("node" + std::to_string(i));
  return plan_cluster(profile, names, f, kB).plan;
}

struct Restorable {
  int step = 0;
  std::string source;  // memory, mirror, checkpoint
};

// Every snapshot after iterations 1..n of `plan` (own every K, mirrored to
// the next node in rank order every M; each holder keeps the newest two of
// each owner), less the lost nodes' memory: the newest step whose every
// layer some survivor holds (own copies first), else the checkpoint.
Restorable newest_restorable(const Plan& plan, int layers, int K, int M, int n, int checkpoint,
                             const std::set<std::string>& lost) {
  std::vector<std::string> ranked;
  std::map<std::string, std::pair<int, int>> held_layers;
  for (const auto& p : plan.pipelines) {
    for (const auto& node : p.nodes) ranked.push_back(node);
    for (const auto& s : p.stages) {
      auto [it, fresh] = held_layers.try_emplace(p.nodes[static_cast<std::size_t>(s.node)], s.layer_begin, s.layer_end);
      it->second = {std::min(it->second.first, s.layer_begin), std::max(it->second.second, s.layer_end)};
    }
  }
  ranked.insert(ranked.end(), plan.spare_nodes.begin(), plan.spare_nodes.end());
  std::map<std::pair<std::string, std::string>, std::vector<int>> held;  // (holder, owner) -> steps
  const auto keep = [&](const std::string& holder, const std::string& owner, int step) {
    auto& steps = held[{holder, owner}];
    steps.push_back(step);
    if (steps.size() > 2) steps.erase(steps.begin());
  };
  for (int s = 1; s <= n; ++s) {
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      if (!held_layers.count(ranked[i])) continue;
      if (K > 0 && s % K == 0) keep(ranked[i], ranked[i], s);
      if (K > 0 && M > 0 && s % M == 0) keep(ranked[(i + 1) % ranked.size()], ranked[i], s);
    }
  }
  const auto has = [&](const std::string& holder, const std::string& owner, int step) {
    if (lost.count(holder)) return false;
    const auto it = held.find({holder, owner});
    return it != held.end() && std::find(it->second.begin(), it->second.end(), step) != it->second.end();
  };
  const auto covered = [&](int step, bool mirrors) {
    for (int l = 0; l < layers; ++l) {
      bool found = false;
      for (const auto& [owner, range] : held_layers) {
        if (l < range.first || l >= range.second) continue;
        for (const auto& holder : ranked) found = found || ((holder == owner || mirrors) && has(holder, owner, step));
      }
      if (!found) return false;
    }
    return true;
  };
  for (int step = n; step >= std::max(1, checkpoint); --step) {
    if (covered(step, false)) return {step, "memory"};
    if (covered(step, true)) return {step, "mirror"};
  }
  return {checkpoint, "checkpoint"};
}

}  // namespace

// ---------------------------------------------------------------- (a) within f

TEST_CASE("oobleck-snapshots: losses within f give exactly oobleck's result") {
  for (const char* name : {"p3-trace.csv", "g4dn-trace.csv", "1h.csv", "scale_gcp-trace.csv"}) {
    CAPTURE(name);
    ReplayOptions options;
    options.fault_tolerance = 1;
    options.global_microbatches = 64;
    options.policies = {Policy::oobleck, Policy::oobleck_snapshots};
    options.record_decisions = true;
    const ReplayResult r = replay(gpt3_1_3b(), load_trace((kRoot / "traces" / name).string()), options);
    const auto& oobleck = r.policies[0];
    const auto& snapshots = r.policies[1];
    REQUIRE(oobleck.unrecoverable == 0);  // (the 1.3B model fits a node: only losing every node is past f)
    CHECK(snapshots.snapshot_every_iterations == 1);
    CHECK(snapshots.mirror_every_iterations == 4);
    check_same(oobleck, snapshots);
    CHECK_FALSE(snapshots.decisions.empty());
    CHECK(decisions_jsonl(r).size() > 0);
  }
}

TEST_CASE("oobleck-snapshots: the snapshot stall is what sets it apart within f") {
  // One loss within f at 100.8 s on the six-layer model; a 50 ms stall per
  // iteration stretches every cycle to 1.05 s.
  const std::string csv = nodes_at_zero(4) + "100800,remove,node1\n200000,add,node9\n";
  Scenario s = quick();
  s.overrides.checkpoint_interval_iterations = 0;  // none: the books stay closed-form
  s.overrides.snapshot_stall_ms = 50;
  const ReplayResult r = run(six_layers(), csv, s, {Policy::oobleck, Policy::oobleck_snapshots});
  const auto& oobleck = r.policies[0];
  const auto& snapshots = r.policies[1];
  CHECK(snapshots.reconfigurations == 1);
  CHECK(snapshots.unrecoverable == 0);
  // Both lose node1 after [node2, node3] is past its passes (its iteration
  // began at 100 s, with snapshots at 11 + 85 x 1.05 = 100.25 s): the
  // merged pipeline keeps those 6 microbatches and trains node1's pipeline's
  // 6 again, a resumed step of 584 ms instead of 1 s.
  CHECK(oobleck.kept_microbatches == 6);
  CHECK(snapshots.kept_microbatches == 6);
  // Started at 11 s: floor(89.8 / 1.05) = 85 cycles before the loss; the
  // reconfiguration takes the communicators' 1 s; then 0.584 + 0.05 s for
  // the resumed step and floor((98.2 - 0.634) / 1.05) = 92 more.
  CHECK(oobleck.samples / kB / six_layers().microbatch_size == 89 + 1 + 97);
  CHECK(snapshots.samples / kB / six_layers().microbatch_size == 85 + 1 + 92);
  CHECK(snapshots.time.checkpoint_ms == doctest::Approx((85 + 1 + 92) * 50.0));
  CHECK(snapshots.time.training_ms == doctest::Approx((85 + 92) * 1000.0 + 584).epsilon(1e-5));
  CHECK(snapshots.time.reconfiguration_ms == oobleck.time.reconfiguration_ms);
  CHECK(records(snapshots).size() == records(oobleck).size());
}

// ---------------------------------------------------------------- (b) past f

TEST_CASE("oobleck-snapshots: past f, back to the mirrors' snapshot, not the disk checkpoint") {
  // [node0,node1] [node2,node3]; node0 and node2 hold layers 0-2, every
  // replica of them. Their mirrors are node1 and node3 (the next in rank
  // order). Lost after 33 iterations (the checkpoint holds 25): the newest
  // mirrored snapshot is after 32, and node1 and node3 still hold their own
  // (each node keeps its newest two: 32 and 33).
  const Plan plan = first_plan(six_layers(), 4, 1);
  REQUIRE(plan.pipelines.size() == 2);
  REQUIRE(plan.pipelines[0].nodes == std::vector<std::string>{"node0", "node1"});
  REQUIRE(plan.pipelines[1].nodes == std::vector<std::string>{"node2", "node3"});
  const Milliseconds at = loss_after(33);  // 44.8 s
  CHECK(at == 44'800);
  // The end: the rollback's restart (11 s + a 3 s mirror restore), 18
  // iterations to the next checkpoint (after 50), its 0.3 s, 2 more.
  const Milliseconds end = at + 14'000 + 18'000 + kSave + 2'000;
  const std::string csv = nodes_at_zero(4) + std::to_string(at) + ",remove,node0\n" + std::to_string(at) +
                          ",remove,node2\n" + std::to_string(end) + ",add,node9\n";
  const ReplayResult r = run(six_layers(), csv, quick(), {Policy::oobleck, Policy::oobleck_snapshots});
  const auto& oobleck = r.policies[0];
  const auto& snapshots = r.policies[1];
  CHECK(newest_restorable(plan, 6, 1, 4, 33, 25, {"node0", "node2"}).step == 32);

  // Snapshots: 1 iteration and the half in flight are lost.
  CHECK(snapshots.unrecoverable == 1);
  CHECK(snapshots.rollbacks_from_mirror == 1);
  CHECK(snapshots.rollbacks_from_memory + snapshots.rollbacks_from_checkpoint == 0);
  CHECK(snapshots.time.lost_work_ms == doctest::Approx(1'500));
  CHECK(snapshots.time.lost_work_ms <= 4 * 1000.0);  // at most mirror_every iterations
  CHECK(snapshots.time.restart_ms == doctest::Approx(kStart + 11'000 + 3'000));
  CHECK(snapshots.time.checkpoint_ms == doctest::Approx(2 * kSave));
  CHECK(snapshots.samples / kB / six_layers().microbatch_size == 32 + 18 + 2);
  // Oobleck: back to the checkpoint after 25, 8.5 s lost; restarted with a
  // 4 s load at 59.8 s, 19.3 s of training before the end.
  CHECK(oobleck.unrecoverable == 1);
  CHECK(oobleck.time.lost_work_ms == doctest::Approx(8'500 + 300));
  CHECK(oobleck.time.restart_ms == doctest::Approx(kStart + 11'000 + 4'000));
  CHECK(oobleck.samples / kB / six_layers().microbatch_size == 25 + 19);

  // The records: where the state came from and which steps are trained again.
  const auto g = records(snapshots);
  REQUIRE(g.size() == 2);
  CHECK(g[1]["source"] == "mirror");
  CHECK(g[1]["rolled_back"] == true);
  CHECK(g[1]["resume_step"] == 32);
  CHECK(g[1]["rolled_back_from"] == 32);  // the last step trained (0-based): step 32 is trained again
  CHECK(g[1]["lost"] == nlohmann::json{"node0", "node2"});
  CHECK(records(oobleck)[1]["source"] == "checkpoint");
  CHECK(records(oobleck)[1]["resume_step"] == 25);
}

TEST_CASE("oobleck-snapshots: every loss time, against a brute-force replay of what the nodes keep") {
  // The same loss after n = 1..49 iterations, for several snapshot and mirror
  // intervals. A mirrored snapshot is complete only while the survivors
  // still hold their own copy of its step (newest two): 2K iterations.
  const Plan plan = first_plan(six_layers(), 4, 1);
  for (const auto& intervals : std::vector<std::pair<int, int>>{{1, 4}, {2, 4}, {1, 1}, {3, 6}, {2, 0}}) {
    const int K = intervals.first, M = intervals.second;
    for (int n = 1; n < 2 * kInterval; ++n) {
      CAPTURE(K);
      CAPTURE(M);
      CAPTURE(n);
      Scenario s = quick();
      s.overrides.snapshot_every_iterations = K;
      s.overrides.mirror_every_iterations = M;
      const Milliseconds at = loss_after(n);
      // Ends during the rollback's restart: the lost work is the rollback's.
      const std::string csv = nodes_at_zero(4) + std::to_string(at) + ",remove,node0\n" + std::to_string(at) +
                              ",remove,node2\n" + std::to_string(at + 5'000) + ",add,node9\n";
      const ReplayResult r = run(six_layers(), csv, s, {Policy::oobleck, Policy::oobleck_snapshots});
      const int checkpoint = n >= kInterval ? kInterval : 0;
      const Restorable want = newest_restorable(plan, 6, K, M, n, checkpoint, {"node0", "node2"});
      const auto& snapshots = r.policies[1];
      CHECK(snapshots.time.lost_work_ms == doctest::Approx((n - want.step) * 1000.0 + 500));
      CHECK(r.policies[0].time.lost_work_ms == doctest::Approx((n - checkpoint) * 1000.0 + 500));
      CHECK(snapshots.unrecoverable == 1);
      CHECK(snapshots.rollbacks_from_memory == 0);
      CHECK(snapshots.rollbacks_from_mirror == (want.source == "mirror" ? 1 : 0));
      CHECK(snapshots.rollbacks_from_checkpoint == (want.source == "checkpoint" ? 1 : 0));
      CHECK(records(snapshots).back()["resume_step"] == want.step);
      // Closed form: the newest mirrored step m restores it while the
      // survivors still hold their own copy of m, and it is newer than (or
      // as new as) the checkpoint.
      const int m = M > 0 ? n / M * M : 0;
      const bool mirrored = m >= std::max(1, checkpoint) && n / K * K - m <= K;
      CHECK(want.source == (mirrored ? "mirror" : "checkpoint"));
      if (mirrored) CHECK(want.step == m);
    }
  }
}

TEST_CASE("oobleck-snapshots: past f right after a reconfiguration, the previous plan's own snapshots") {
  // [node0,node1] [node2,node3]: node0 is lost within f after 10
  // iterations; the survivors re-plan into one pipeline and train one
  // iteration; then node3 goes, and layers it alone holds now are gone. Each
  // node keeps its own snapshots after 10 (of the first plan) and 11: after
  // 10, node2 held layers 0-2 and node1 layers 3-5, so the survivors' own
  // memory restores it; after 11, node3's layers have no copy (11 is not
  // mirrored).
  const Milliseconds first = loss_after(10);          // 21.5 s
  // 1 s of communicators, the resumed step (the merged pipeline keeps
  // [node2, node3]'s passes: 584 ms), half an iteration.
  const Milliseconds second = first + 1'000 + 584 + 500;
  const std::string csv = nodes_at_zero(4) + std::to_string(first) + ",remove,node0\n" + std::to_string(second) +
                          ",remove,node3\n" + std::to_string(second + 5'000) + ",add,node9\n";
  const ReplayResult r = run(six_layers(), csv, quick(), {Policy::oobleck_snapshots});
  const auto& p = r.policies[0];
  const auto g = records(p);
  REQUIRE(g.size() == 3);
  REQUIRE(g[1]["source"] == "replicas");
  REQUIRE(g[1]["pipelines"] == nlohmann::json{{"node2", "node1", "node3"}});
  CHECK(g[2]["source"] == "memory");
  CHECK(g[2]["resume_step"] == 10);
  CHECK(g[2]["rolled_back_from"] == 10);
  CHECK(p.rollbacks_from_memory == 1);
  CHECK(p.unrecoverable == 1);
  CHECK(p.reconfigurations == 1);
  // Half an iteration at each loss, and the one iteration after 10, at the
  // mean of the 11 since the checkpoint (ten of 1 s, then the resumed 584 ms).
  CHECK(p.time.lost_work_ms == doctest::Approx(500 + (10'000 + 584) / 11.0 + 500).epsilon(1e-4));
  CHECK(p.time.restart_ms == doctest::Approx(kStart + 5'000));
}

TEST_CASE("oobleck-snapshots: too few nodes left: it waits, and restores the snapshot when nodes come") {
  // node0, node1 and node2 go after 33 iterations: node3 alone cannot hold
  // the model. It keeps its own snapshot after 32 (layers 3-5) and node2's
  // mirrored one (layers 0-2). node9 joins 20 s later.
  const Milliseconds at = loss_after(33), back = at + 20'000, end = back + 14'000 + 5'000;
  const std::string csv = nodes_at_zero(4) + std::to_string(at) + ",remove,node0\n" + std::to_string(at) +
                          ",remove,node1\n" + std::to_string(at) + ",remove,node2\n" + std::to_string(back) +
                          ",add,node9\n" + std::to_string(end) + ",add,node10\n";
  const auto p = run(six_layers(), csv, quick(), {Policy::oobleck_snapshots}).policies[0];
  CHECK(p.unrecoverable == 1);  // one rollback, although the controller says so at the wait and at the start
  CHECK(p.rollbacks_from_mirror == 1);
  CHECK(p.time.waiting_ms == doctest::Approx(20'000));
  CHECK(p.time.lost_work_ms == doctest::Approx(1'500));
  CHECK(p.time.restart_ms == doctest::Approx(kStart + 11'000 + 3'000));
  CHECK(p.samples / kB / six_layers().microbatch_size == 32 + 5);
  const auto g = records(p);
  REQUIRE(g.size() == 2);
  CHECK(g[1]["cause"] == "nodes_back");
  CHECK(g[1]["source"] == "mirror");
  CHECK(g[1]["resume_step"] == 32);
}

TEST_CASE("oobleck-snapshots: a loss during a checkpoint's save") {
  // The save after 25 iterations runs from 36 s to 36.3 s; the loss at
  // 36.1 s stops it, so the disk still holds the seed. The mirrors hold the
  // state after 24 (and node1 and node3 their own, kept: 24 and 25).
  const Milliseconds at = kStart + 25'000 + 100;
  const std::string csv = nodes_at_zero(4) + std::to_string(at) + ",remove,node0\n" + std::to_string(at) +
                          ",remove,node2\n" + std::to_string(at + 5'000) + ",add,node9\n";
  const ReplayResult r = run(six_layers(), csv, quick(), {Policy::oobleck, Policy::oobleck_snapshots});
  CHECK(r.policies[1].rollbacks_from_mirror == 1);
  CHECK(r.policies[1].time.lost_work_ms == doctest::Approx(1'000));
  CHECK(r.policies[1].time.checkpoint_ms == doctest::Approx(100));
  CHECK(r.policies[0].time.lost_work_ms == doctest::Approx(25'000));
  CHECK(records(r.policies[0]).back()["source"] == "checkpoint");
  CHECK(records(r.policies[0]).back()["resume_step"] == 0);
}

// ---------------------------------------------------------------- (c) a node and its mirror

TEST_CASE("oobleck-snapshots: losing a node together with its mirror holder forces the disk checkpoint") {
  // [node0,node1,node2] [node3,node4,node5], two layers per node. node0
  // and node3 hold layers 0-1; their mirrors are node1 and node4.
  const Plan plan = first_plan(six_layers(), 6, 1);
  REQUIRE(plan.pipelines.size() == 2);
  REQUIRE(plan.pipelines[0].nodes == std::vector<std::string>{"node0", "node1", "node2"});
  REQUIRE(plan.pipelines[1].nodes == std::vector<std::string>{"node3", "node4", "node5"});
  const Milliseconds at = loss_after(33);
  const auto replay_losing = [&](const std::vector<std::string>& lost) {
    std::string csv = nodes_at_zero(6);
    for (const auto& node : lost) csv += std::to_string(at) + ",remove," + node + "\n";
    csv += std::to_string(at + 5'000) + ",add,node9\n";
    return run(six_layers(), csv, quick(), {Policy::oobleck_snapshots}).policies[0];
  };
  SUBCASE("both replicas with their mirror holders: the disk") {
    const auto p = replay_losing({"node0", "node1", "node3", "node4"});
    CHECK(newest_restorable(plan, 6, 1, 4, 33, 25, {"node0", "node1", "node3", "node4"}).source == "checkpoint");
    CHECK(p.rollbacks_from_checkpoint == 1);
    CHECK(p.time.lost_work_ms == doctest::Approx(8'500));
    CHECK(records(p).back()["source"] == "checkpoint");
    CHECK(records(p).back()["resume_step"] == 25);
  }
  SUBCASE("one replica's mirror holder left: the mirrors") {
    const auto p = replay_losing({"node0", "node1", "node3"});
    CHECK(newest_restorable(plan, 6, 1, 4, 33, 25, {"node0", "node1", "node3"}).step == 32);
    CHECK(p.rollbacks_from_mirror == 1);
    CHECK(p.time.lost_work_ms == doctest::Approx(1'500));
  }
}
