// What a generation that resumes at the step in flight keeps of it
// (recovery/step_shares.h), on hand-made plans of 1-GPU nodes: kept
// pipelines against the rule's cases, and, over every combination of
// passed and restarted workers, the oracle that kept and trained again
// cover the global batch exactly once, each pipeline given at most its
// share.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "oobleck/node_speeds.h"
#include "oobleck/recovery/step_shares.h"
#include "oobleck/recovery/worker_seats.h"
#include "reference.h"

namespace {

using namespace oobleck;
using namespace oobleck::recovery;

// Pipelines of `layers` layers, each on its nodes, one stage a node, the
// layers split evenly; `microbatches` each.
Plan plan_of(const std::vector<std::vector<std::string>>& pipelines, const std::vector<int>& microbatches,
             int layers = 4) {
  Plan plan;
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    Pipeline pipeline;
    pipeline.nodes = pipelines[p];
    pipeline.template_nodes = static_cast<int>(pipeline.nodes.size());
    pipeline.microbatches = microbatches[p];
    const int n = static_cast<int>(pipeline.nodes.size());
    for (int k = 0; k < n; ++k) pipeline.stages.push_back({k * layers / n, (k + 1) * layers / n, 1, k});
    plan.global_microbatches += microbatches[p];
    plan.pipelines.push_back(std::move(pipeline));
  }
  return plan;
}

std::set<WorkerId> workers(const std::vector<std::string>& nodes) {
  std::set<WorkerId> out;
  for (const auto& n : nodes) out.insert({n, 0});
  return out;
}

std::vector<int> range(int first, int count) {
  std::vector<int> out;
  for (int m = first; m < first + count; ++m) out.push_back(m);
  return out;
}

// What the workers of `passed` hold once past their passes: their
// pipeline's share.
HeldSums held_of(const Plan& running, const StepShares& shares, const std::set<WorkerId>& passed) {
  HeldSums out;
  for (std::size_t p = 0; p < running.pipelines.size(); ++p) {
    for (const auto& n : running.pipelines[p].nodes) {
      if (passed.count({n, 0})) out[{n, 0}] = shares.microbatches[p];
    }
  }
  return out;
}

// Kept and trained again: each microbatch of the batch once; no pipeline
// trains more than its share.
void check_exactly_once(const CarriedStep& c, const Plan& next) {
  std::vector<int> all;
  for (std::size_t x = 0; x < next.pipelines.size(); ++x) {
    all.insert(all.end(), c.kept[x].begin(), c.kept[x].end());
    all.insert(all.end(), c.train[x].begin(), c.train[x].end());
    CHECK(static_cast<int>(c.train[x].size()) <= next.pipelines[x].microbatches);
  }
  std::sort(all.begin(), all.end());
  CHECK(all == range(0, next.global_microbatches));
}


// Every seat of a kept pipeline gets each of its layers' sums exactly once:
// from one copy, sent by the source pipeline's holder of that layer at the
// seat's shard and degree, or else from itself, having held it so.
void check_sums_complete(const Plan& running, const Plan& next, const CarriedStep& c, int gpus) {
  const auto before = seats_by_node(running, gpus);
  const auto copies = kept_sum_copies(running, next, c, gpus);
  const auto held_it = [&](const WorkerId& w, int source, int layer, const WorkerSeat& seat) {
    const auto was = before.find(w);
    return was != before.end() && was->second.pipeline == source && was->second.holds(layer) &&
           was->second.degree == seat.degree && was->second.shard == seat.shard;
  };
  for (const auto& [w, seat] : seats_by_node(next, gpus)) {
    const int source = c.source.at(static_cast<std::size_t>(seat.pipeline));
    for (int l = seat.layer_begin; l < seat.layer_end; ++l) {
      int received = 0;
      for (const auto& k : copies) {
        if (k.to != w || k.layer != l) continue;
        ++received;
        CHECK(source >= 0);
        CHECK(held_it(k.from, source, l, seat));
      }
      if (source >= 0) CHECK(received + (received == 0 && held_it(w, source, l, seat) ? 1 : 0) == 1);
      if (source < 0) CHECK(received == 0);
    }
  }
}

}  // namespace

TEST_CASE("step shares: the plan's split is each pipeline's run after those before it") {
  const Plan plan = plan_of({{"a"}, {"b", "c"}, {"d"}}, {3, 5, 4});
  const StepShares s = plan_shares(plan, 7);
  CHECK(s.step == 7);
  CHECK(s.microbatches == std::vector<std::vector<int>>{range(0, 3), range(3, 5), range(8, 4)});
}

TEST_CASE("step shares: pipelines that lost nothing and finished their passes keep them") {
  // Three 2-node pipelines, 4 microbatches each; node b2 is lost and its
  // partner joins pipeline c's nodes, whose layers are cut anew over three.
  const Plan running = plan_of({{"a1", "a2"}, {"b1", "b2"}, {"c1", "c2"}}, {4, 4, 4});
  const StepShares shares = plan_shares(running, 5);
  const Plan next = plan_of({{"a1", "a2"}, {"c1", "c2", "b1"}}, {5, 7});
  const auto everyone = workers({"a1", "a2", "b1", "c1", "c2"});

  SUBCASE("everyone past the passes: a's and c's pipelines keep theirs, b's four are split 5 : 7") {
    const CarriedStep c = carry_step(running, held_of(running, shares, everyone), {}, next, 1);
    CHECK(c.kept[0] == range(0, 4));
    CHECK(c.kept[1] == range(8, 4));  // (c's pipeline gained a node: its sums move with the layers)
    CHECK(c.source == std::vector<int>{0, 2});
    CHECK(c.awaited.empty());
    CHECK(c.kept_count() == 8);
    // 4 left: 4 x 5/12 = 1.67, 4 x 7/12 = 2.33 -> 2 and 2 (the larger remainder first).
    CHECK(c.train[0] == range(4, 2));
    CHECK(c.train[1] == range(6, 2));
    check_exactly_once(c, next);
    check_sums_complete(running, next, c, 1);
    // c1 held layers 0-1 and now holds 0, c2 held 2-3 and now holds 1, b1 holds 2-3.
    const std::vector<SumCopy> copies = kept_sum_copies(running, next, c, 1);
    CHECK(copies == std::vector<SumCopy>{{1, {"c1", 0}, {"c2", 0}}, {2, {"c2", 0}, {"b1", 0}},
                                         {3, {"c2", 0}, {"b1", 0}}});
  }
  SUBCASE("a worker of the unchanged pipeline still in its passes: awaited, the rest kept") {
    const auto passed = workers({"a1", "b1", "c1", "c2"});
    const CarriedStep c = carry_step(running, held_of(running, shares, passed), {}, next, 1);
    CHECK(c.kept[0].empty());
    CHECK(c.kept[1] == range(8, 4));
    CHECK(c.awaited == workers({"a2"}));
    check_exactly_once(c, next);
  }
  SUBCASE("a worker restarted since, or failed before its passes were over: its pipeline keeps nothing, awaits nothing") {
    const CarriedStep c = carry_step(running, held_of(running, shares, workers({"a2", "b1", "c1", "c2"})),
                                     workers({"a1"}), next, 1);
    CHECK(c.kept[0].empty());
    CHECK(c.kept_count() == 4);
    CHECK(c.awaited.empty());
    check_exactly_once(c, next);
  }
  SUBCASE("a kept pipeline whose workers disagree on what they hold keeps nothing") {
    HeldSums held = held_of(running, shares, everyone);
    held[{"a2", 0}] = range(0, 3);
    const CarriedStep c = carry_step(running, held, {}, next, 1);
    CHECK(c.kept[0].empty());
    CHECK(c.source[0] == -1);
    CHECK(c.kept_count() == 4);
    check_exactly_once(c, next);
  }
  SUBCASE("nobody past the passes yet: both sources are awaited; until then, the plan's own split") {
    const CarriedStep c = carry_step(running, {}, {}, next, 1);
    CHECK(c.kept_count() == 0);
    CHECK(c.awaited == workers({"a1", "a2", "c1", "c2"}));
    CHECK(c.train[0] == range(0, 5));
    CHECK(c.train[1] == range(5, 7));
    CHECK(kept_sum_copies(running, next, c, 1).empty());
  }
}

TEST_CASE("step shares: the same workers in other seats keep theirs through sum copies; mixed pipelines keep nothing") {
  const Plan running = plan_of({{"a1", "a2"}, {"b1", "b2"}}, {4, 4});
  const StepShares shares = plan_shares(running, 0);
  const auto everyone = workers({"a1", "a2", "b1", "b2"});
  SUBCASE("the stages swapped between the nodes") {
    const Plan next = plan_of({{"a2", "a1"}, {"b1", "b2"}}, {4, 4});
    const CarriedStep c = carry_step(running, held_of(running, shares, everyone), {}, next, 1);
    CHECK(c.kept[0] == range(0, 4));
    CHECK(c.kept[1] == range(4, 4));
    check_exactly_once(c, next);
    // (Ranks: a2 first.)
    CHECK(kept_sum_copies(running, next, c, 1) ==
          std::vector<SumCopy>{{0, {"a1", 0}, {"a2", 0}}, {1, {"a1", 0}, {"a2", 0}}, {2, {"a2", 0}, {"a1", 0}},
                               {3, {"a2", 0}, {"a1", 0}}});
  }
  SUBCASE("pipelines mixed") {
    const Plan next = plan_of({{"a1", "b2"}, {"b1", "a2"}}, {4, 4});
    const CarriedStep c = carry_step(running, held_of(running, shares, everyone), {}, next, 1);
    CHECK(c.kept_count() == 0);
    check_exactly_once(c, next);
  }
  SUBCASE("two pipelines merged: the first keeps its sums, the other's are trained again") {
    const Plan next = plan_of({{"a1", "a2", "b1", "b2"}}, {8});
    const CarriedStep c = carry_step(running, held_of(running, shares, everyone), {}, next, 1);
    CHECK(c.kept[0] == range(0, 4));
    CHECK(c.train[0] == range(4, 4));
    check_exactly_once(c, next);
  }
  SUBCASE("an unchanged pipeline listed second keeps its own microbatches") {
    const Plan next = plan_of({{"b1", "b2"}, {"a1", "a2"}}, {4, 4});
    const CarriedStep c = carry_step(running, held_of(running, shares, everyone), {}, next, 1);
    CHECK(c.kept[0] == range(4, 4));
    CHECK(c.kept[1] == range(0, 4));
    CHECK(c.train[0].empty());
    CHECK(c.train[1].empty());
    CHECK(kept_sum_copies(running, next, c, 1).empty());
  }
}

TEST_CASE("step shares: sums move only between shards of one degree") {
  // 2-GPU nodes. a runs all 4 layers at tensor-parallel degree 2.
  auto one_pipeline = [](std::vector<std::string> nodes, std::vector<Stage> stages) {
    Plan plan;
    Pipeline p;
    p.nodes = std::move(nodes);
    p.template_nodes = static_cast<int>(p.nodes.size());
    p.microbatches = 4;
    p.stages = std::move(stages);
    plan.global_microbatches = 4;
    plan.pipelines.push_back(std::move(p));
    return plan;
  };
  const Plan running = one_pipeline({"a"}, {{0, 4, 2, 0}});
  const StepShares shares = plan_shares(running, 0);
  HeldSums held;
  held[{"a", 0}] = held[{"a", 1}] = range(0, 4);
  SUBCASE("z joins at the same degree: each of its GPUs gets the shard of its index") {
    const Plan next = one_pipeline({"a", "z"}, {{0, 2, 2, 0}, {2, 4, 2, 1}});
    const CarriedStep c = carry_step(running, held, {}, next, 2);
    CHECK(c.kept[0] == range(0, 4));
    check_sums_complete(running, next, c, 2);
    CHECK(kept_sum_copies(running, next, c, 2) ==
          std::vector<SumCopy>{{2, {"a", 0}, {"z", 0}, 2}, {3, {"a", 0}, {"z", 0}, 2}, {2, {"a", 1}, {"z", 1}, 2},
                               {3, {"a", 1}, {"z", 1}, 2}});
  }
  SUBCASE("the layers cut into two stages of degree 1: nothing kept") {
    const Plan next = one_pipeline({"a"}, {{0, 2, 1, 0}, {2, 4, 1, 0}});
    const CarriedStep c = carry_step(running, held, {}, next, 2);
    CHECK(c.kept_count() == 0);
    check_exactly_once(c, next);
  }
}

TEST_CASE("step shares: every combination of passed and restarted workers covers the batch exactly once") {
  // Four 1-node pipelines of uneven shares; the next plan loses d and runs
  // a, b, c with new shares, then c and a swap places.
  const Plan running = plan_of({{"a"}, {"b"}, {"c"}, {"d"}}, {2, 3, 4, 3});
  for (const auto& next : {plan_of({{"a"}, {"b"}, {"c"}}, {4, 4, 4}), plan_of({{"c"}, {"b"}, {"a"}}, {5, 4, 3})}) {
    for (int mask = 0; mask < 1 << 6; ++mask) {
      std::set<WorkerId> passed, fresh;
      const std::vector<std::string> names = {"a", "b", "c"};
      for (int k = 0; k < 3; ++k) {
        if (mask >> k & 1) passed.insert({names[static_cast<std::size_t>(k)], 0});
        if (mask >> (k + 3) & 1) fresh.insert({names[static_cast<std::size_t>(k)], 0});
      }
      CAPTURE(mask);
      // (A restarted worker's sums are forgotten: it holds nothing.)
      std::set<WorkerId> holding;
      for (const auto& w : passed) {
        if (!fresh.count(w)) holding.insert(w);
      }
      const CarriedStep c = carry_step(running, held_of(running, plan_shares(running, 3), holding), fresh, next, 1);
      check_exactly_once(c, next);
      // Kept: exactly the passed, unrestarted ones, each its own share.
      for (std::size_t x = 0; x < 3; ++x) {
        const WorkerId w{next.pipelines[x].nodes[0], 0};
        const bool keeps = passed.count(w) && !fresh.count(w);
        const int was = static_cast<int>(std::find(names.begin(), names.end(), w.first) - names.begin());
        CHECK(c.kept[x] == (keeps ? plan_shares(running, 3).microbatches[static_cast<std::size_t>(was)]
                                  : std::vector<int>{}));
        CHECK(c.awaited.count(w) == static_cast<std::size_t>(!passed.count(w) && !fresh.count(w)));
      }
    }
  }
}

TEST_CASE("step shares: carried by pipeline, as the simulator does, equals carried by worker") {
  // Pipelines of one to three nodes; the next plans lose e, merge or swap
  // pipelines, and move a node to another seat. Every subset of running
  // pipelines past their passes, against the held sums of their workers.
  const Plan running = plan_of({{"a", "b"}, {"c"}, {"d", "e", "f"}, {"g", "h"}}, {3, 2, 4, 3});
  const StepShares shares = plan_shares(running, 5);
  for (const auto& next :
       {plan_of({{"a", "b"}, {"c"}, {"d", "f"}, {"g", "h"}}, {3, 3, 3, 3}),
        plan_of({{"g", "h"}, {"a", "b"}, {"c", "d", "f"}}, {4, 4, 4}),
        plan_of({{"b", "a"}, {"c"}, {"g", "h", "d", "f"}}, {4, 2, 6})}) {
    for (int mask = 0; mask < 1 << 4; ++mask) {
      CAPTURE(mask);
      std::vector<bool> passed(4);
      std::set<WorkerId> holding;
      for (std::size_t p = 0; p < 4; ++p) {
        passed[p] = (mask >> p & 1) != 0;
        if (passed[p]) {
          for (const auto& n : running.pipelines[p].nodes) holding.insert({n, 0});
        }
      }
      const CarriedStep by_worker = carry_step(running, held_of(running, shares, holding), {}, next, 1);
      const CarriedStep by_pipeline = carry_step_by_pipeline(running, shares, passed, next, 1);
      CHECK(by_pipeline.kept == by_worker.kept);
      CHECK(by_pipeline.train == by_worker.train);
      CHECK(by_pipeline.awaited == by_worker.awaited);
      check_exactly_once(by_pipeline, next);
      check_sums_complete(running, next, by_pipeline, 1);
    }
  }
}

TEST_CASE("step shares: a generation waits for unchanged pipelines only when that saves more than the wait") {
  // Four one-node pipelines of one stage (4 layers, F + B = 3 ms each: a
  // microbatch costs c = 12 ms on any), 3 microbatches each; d is lost and
  // the next plan runs a, b, c with 4 each. Nobody has passed yet: not
  // waiting trains 4 microbatches on each, waiting for all three keeps 9
  // and trains d's 3, one on each. The synchronisation after the passes is
  // the same in both, so the saving is 3c of the whole step 4c + sync,
  // scaled to the measured step.
  const Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 1'000, 1'000, 1'000'000'000);
  const CostModel cost(profile, 4);
  const Plan running = plan_of({{"a"}, {"b"}, {"c"}, {"d"}}, {3, 3, 3, 3});
  const StepShares shares = plan_shares(running, 2);
  const Plan next = plan_of({{"a"}, {"b"}, {"c"}}, {4, 4, 4});
  const double c = 12;
  const Milliseconds whole = iteration_ms_at_speeds(cost, next, {});
  const CarriedStep not_waiting = carry_step(running, {}, {}, next, 1);
  REQUIRE(not_waiting.awaited == workers({"a", "b", "c"}));
  CHECK(resumed_step_ms(cost, next, not_waiting) == doctest::Approx(whole));
  const CarriedStep waited = carry_step(running, held_of(running, shares, workers({"a", "b", "c"})), {}, next, 1);
  REQUIRE(waited.kept_count() == 9);
  CHECK(resumed_step_ms(cost, next, waited) == doctest::Approx(whole - 3 * c));

  for (const Milliseconds measured : {1000.0, 37.5}) {
    CAPTURE(measured);
    const Milliseconds saving = 3 * c / whole * measured;
    CHECK(worth_waiting(cost, next, not_waiting, waited, 0, measured));
    CHECK(worth_waiting(cost, next, not_waiting, waited, saving * (1 - 1e-9), measured));
    CHECK_FALSE(worth_waiting(cost, next, not_waiting, waited, saving * (1 + 1e-9), measured));
  }
  // a and b passed already: waiting for c alone saves one microbatch on each
  // pipeline (c): the resumed step is priced by its slowest pipeline.
  const HeldSums some = held_of(running, shares, workers({"a", "b"}));
  const CarriedStep without_c = carry_step(running, some, {}, next, 1);
  REQUIRE(without_c.awaited == workers({"c"}));
  CHECK(resumed_step_ms(cost, next, without_c) == doctest::Approx(whole - 2 * c));
  CHECK(worth_waiting(cost, next, without_c, waited, 0.99 * c / whole * 1000, 1000));
  CHECK_FALSE(worth_waiting(cost, next, without_c, waited, 1.01 * c / whole * 1000, 1000));
  // Nothing awaited: nothing to wait for.
  CHECK_FALSE(worth_waiting(cost, next, waited, waited, 0, 1000));
  // c restarted (settled): it will not pass, so it is not awaited either.
  const CarriedStep settled_c = carry_step(running, some, workers({"c"}), next, 1);
  CHECK(settled_c.awaited.empty());
  CHECK_FALSE(worth_waiting(cost, next, settled_c, waited, 0, 1000));
}
