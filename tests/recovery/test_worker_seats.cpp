// Workers per GPU: seats, gradient pieces and shard copies, on hand-made
// plans of 2-GPU nodes, against closed-form expectations and a brute-force
// coverage oracle.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/worker_seats.h"
#include "reference.h"

namespace {

using namespace oobleck;
using namespace oobleck::recovery;

Pipeline pipeline(std::vector<std::string> nodes, std::vector<Stage> stages) {
  Pipeline p;
  p.template_nodes = static_cast<int>(nodes.size());
  p.nodes = std::move(nodes);
  p.stages = std::move(stages);
  p.microbatches = 2;
  return p;
}

// Pipeline 0 on nodes a, b: layers 0-1 at degree 2 on a; b holds two
// stages, layer 2 and layers 3-4. Pipeline 1 on c: all five at degree 2.
Plan base_plan() {
  Plan plan;
  plan.pipelines = {pipeline({"a", "b"}, {{0, 2, 2, 0}, {2, 3, 1, 1}, {3, 5, 1, 1}}),
                    pipeline({"c"}, {{0, 5, 2, 0}})};
  return plan;
}

// Interval arithmetic in units of 1/L, L = 2 x 3 x 4 (every degree here divides it).
constexpr int kUnits = 24;
std::pair<int, int> interval(int degree, int shard) { return {shard * kUnits / degree, (shard + 1) * kUnits / degree}; }

// Each rank's seat: pipeline, stage, node position, GPU, layers, degree,
// shard, first rank.
void check_seats(const std::vector<WorkerSeat>& seats, const std::vector<std::vector<int>>& expected) {
  REQUIRE(seats.size() == expected.size());
  for (std::size_t r = 0; r < seats.size(); ++r) {
    const auto& s = seats[r];
    CAPTURE(r);
    CHECK(std::vector<int>{s.pipeline, s.stage, s.node_position, s.gpu, s.layer_begin, s.layer_end, s.degree,
                           s.shard, s.first_rank} == expected[r]);
  }
}

// Every shard of `next` (1-GPU nodes) is kept or covered by its copies,
// each from a worker of `base` that held the layer at that degree and
// shard, none on `lost`.
void check_shards_covered(const Plan& base, const Plan& next, const std::vector<ShardCopy>& copies,
                          const std::string& lost) {
  const auto seats = worker_seats(next, 1);
  const auto old_seats = seats_by_node(base, 1);
  const auto nodes = ranked_nodes(next);
  for (std::size_t w = 0; w < seats.size(); ++w) {
    for (int l = seats[w].layer_begin; l < seats[w].layer_end; ++l) {
      CAPTURE(w);
      CAPTURE(l);
      const auto mine = old_seats.find({nodes[w], 0});
      if (mine != old_seats.end() && mine->second.holds(l) && mine->second.degree == seats[w].degree &&
          mine->second.shard == seats[w].shard) {
        continue;  // kept
      }
      std::vector<bool> covered(kUnits, false);
      for (const auto& c : copies) {
        if (c.to != static_cast<int>(w) || c.layer != l) continue;
        const auto& from = old_seats.at({nodes[static_cast<std::size_t>(c.from)], 0});
        CHECK(nodes[static_cast<std::size_t>(c.from)] != lost);
        CHECK(from.holds(l));
        CHECK(from.degree == c.from_degree);
        CHECK(from.shard == c.from_shard);
        const auto [u0, u1] = interval(c.from_degree, c.from_shard);
        for (int u = u0; u < u1; ++u) covered[static_cast<std::size_t>(u)] = true;
      }
      const auto [m0, m1] = interval(seats[w].degree, seats[w].shard);
      for (int u = m0; u < m1; ++u) CHECK(covered[static_cast<std::size_t>(u)]);
    }
  }
}

}  // namespace

TEST_CASE("worker seats: a node's stages take its GPUs in order, each GPU one shard") {
  const auto seats = worker_seats(base_plan(), 2);
  const std::vector<std::vector<int>> expected = {{0, 0, 0, 0, 0, 2, 2, 0, 0}, {0, 0, 0, 1, 0, 2, 2, 1, 0},
                                                  {0, 1, 1, 0, 2, 3, 1, 0, 2}, {0, 2, 1, 1, 3, 5, 1, 0, 3},
                                                  {1, 0, 0, 0, 0, 5, 2, 0, 4}, {1, 0, 0, 1, 0, 5, 2, 1, 4}};
  check_seats(seats, expected);
  CHECK(seats[2].stages == 3);
  CHECK(seats[4].stages == 1);
}

TEST_CASE("worker seats: a stage over two nodes takes both nodes' GPUs, its shards in node order, its ranks from its first node") {
  Plan plan;
  // Layers 0-2 at degree 4 on nodes a and b; layers 3-4 at degree 2 on c.
  plan.pipelines = {pipeline({"a", "b", "c"}, {{0, 3, 4, 0, Recompute::none, 2}, {3, 5, 2, 2}})};
  const auto seats = worker_seats(plan, 2);
  const std::vector<std::vector<int>> expected = {{0, 0, 0, 0, 0, 3, 4, 0, 0}, {0, 0, 0, 1, 0, 3, 4, 1, 0},
                                                  {0, 0, 1, 0, 0, 3, 4, 2, 0}, {0, 0, 1, 1, 0, 3, 4, 3, 0},
                                                  {0, 1, 2, 0, 3, 5, 2, 0, 4}, {0, 1, 2, 1, 3, 5, 2, 1, 4}};
  check_seats(seats, expected);
  // Node seats: a and b both hold layers 0-2.
  const auto nodes = seats_of(plan);
  REQUIRE(nodes.size() == 3);
  CHECK(std::pair{nodes[0].layer_begin, nodes[0].layer_end} == std::pair{0, 3});
  CHECK(std::pair{nodes[1].layer_begin, nodes[1].layer_end} == std::pair{0, 3});
  CHECK(std::pair{nodes[2].layer_begin, nodes[2].layer_end} == std::pair{3, 5});
}

TEST_CASE("worker seats: stages that do not fill a node are refused, naming the pipeline and node") {
  Plan plan;
  plan.pipelines = {pipeline({"a", "b"}, {{0, 2, 2, 0}, {2, 5, 1, 1}})};
  try {
    (void)worker_seats(plan, 2);
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("pipeline 0, node b") != std::string::npos);
  }
}

TEST_CASE("shards overlap exactly when their intervals intersect") {
  for (int da : {1, 2, 3, 4}) {
    for (int db : {1, 2, 3, 4}) {
      for (int a = 0; a < da; ++a) {
        for (int b = 0; b < db; ++b) {
          const auto [a0, a1] = interval(da, a);
          const auto [b0, b1] = interval(db, b);
          CHECK(shards_overlap(da, a, db, b) == (std::max(a0, b0) < std::min(a1, b1)));
        }
      }
    }
  }
}

TEST_CASE("layer pieces: one holder per stage, each holding the piece, and one count per replica") {
  const auto seats = worker_seats(base_plan(), 2);
  const LayerPieces layer0 = layer_pieces(seats, 0);
  CHECK(layer0.count == 2);
  CHECK(layer0.holders == std::vector<std::vector<int>>{{0, 4}, {1, 5}});
  CHECK(layer0.everyone == std::vector<int>{0, 1, 4, 5});
  const LayerPieces layer3 = layer_pieces(seats, 3);
  CHECK(layer3.count == 2);
  CHECK(layer3.holders == std::vector<std::vector<int>>{{3, 4}, {3, 5}});
  // The oracle: every piece of every layer is held, in full, by exactly one
  // worker of each stage holding the layer.
  for (int l = 0; l < 5; ++l) {
    const LayerPieces pieces = layer_pieces(seats, l);
    std::set<int> stages;
    for (const auto& s : seats) {
      if (s.holds(l)) stages.insert(s.first_rank);
    }
    for (int j = 0; j < pieces.count; ++j) {
      const auto& holders = pieces.holders[static_cast<std::size_t>(j)];
      CHECK(holders.size() == stages.size());
      std::set<int> seen;
      for (int h : holders) {
        const auto& s = seats[static_cast<std::size_t>(h)];
        const auto [p0, p1] = interval(pieces.count, j);
        const auto [s0, s1] = interval(s.degree, s.shard);
        CHECK((s0 <= p0 && p1 <= s1));
        seen.insert(s.first_rank);
      }
      CHECK(seen == stages);
    }
  }
}

TEST_CASE("shard copies: a new degree is cut from, or gathered across, the holders") {
  // Node a is lost. c keeps every layer, now as two degree-1 stages; b
  // takes the whole model at degree 2, layers 0-1 sent from c.
  Plan next;
  next.pipelines = {pipeline({"c"}, {{0, 2, 1, 0}, {2, 5, 1, 0}}), pipeline({"b"}, {{0, 5, 2, 0}})};
  const std::vector<Transfer> transfers = {{0, "c", "b", 1}, {1, "c", "b", 1}};
  const auto copies = shard_copies(base_plan(), next, transfers, 2);
  // Ranks of next: c's GPUs 0, 1; b's 2, 3. c's GPU 0 held shard 0 of 2
  // and now holds layers 0-1 whole: it gathers both shards, its own one
  // included.
  auto has = [&](ShardCopy c) { return std::find(copies.begin(), copies.end(), c) != copies.end(); };
  CHECK(has({0, 0, 0, 2, 0}));
  CHECK(has({0, 1, 0, 2, 1}));
  CHECK(has({4, 0, 1, 2, 0}));
  CHECK(has({4, 1, 1, 2, 1}));
  // b's GPUs take layers 0-1 from c's matching shards, and cut layers 2-4
  // from what b held whole.
  CHECK(has({0, 0, 2, 2, 0}));
  CHECK(has({1, 1, 3, 2, 1}));
  CHECK(has({2, 2, 2, 1, 0}));
  CHECK(has({2, 2, 3, 1, 0}));
  CHECK(has({3, 3, 2, 1, 0}));
  CHECK(has({4, 3, 3, 1, 0}));
  // The oracle: every shard of next is covered by its copies, each from a
  // worker that held the layer at that degree and shard.
  const auto seats = worker_seats(next, 2);
  const auto old_seats = seats_by_node(base_plan(), 2);
  const auto nodes = ranked_nodes(next);
  for (std::size_t r = 0; r < seats.size(); ++r) {
    for (int l = seats[r].layer_begin; l < seats[r].layer_end; ++l) {
      std::vector<bool> covered(kUnits, false);
      for (const auto& c : copies) {
        if (c.to != static_cast<int>(r) || c.layer != l) continue;
        const auto& from = old_seats.at({nodes[static_cast<std::size_t>(c.from / 2)], c.from % 2});
        CHECK(from.holds(l));
        CHECK(from.degree == c.from_degree);
        CHECK(from.shard == c.from_shard);
        const auto [u0, u1] = interval(c.from_degree, c.from_shard);
        for (int u = u0; u < u1; ++u) covered[static_cast<std::size_t>(u)] = true;
      }
      const auto [m0, m1] = interval(seats[r].degree, seats[r].shard);
      for (int u = m0; u < m1; ++u) CHECK(covered[static_cast<std::size_t>(u)]);
    }
  }
}

TEST_CASE("shard copies: a worker that keeps its shard copies nothing") {
  Plan next = base_plan();
  next.pipelines.pop_back();  // c leaves; pipeline 0 is as it was
  CHECK(shard_copies(base_plan(), next, {}, 2).empty());
}

TEST_CASE("shard copies after a loss in a stage over two nodes: each part gathered from a living group, every shard covered") {
  // Two layers whose state needs two GPUs: only a stage over two 1-GPU
  // nodes holds one, so nothing holds a layer whole.
  const Profile profile = test::uniform_profile(2, 1, 1.0, 2.0, 1500, 10, 1000);
  CostModel cost(profile, 4);
  cost.set_tensor_parallel_nodes(2);
  const TemplateSet templates = build_templates(cost, 8);
  const Plan base = instantiate(cost, templates, {"a", "b", "c", "d", "e", "f", "g", "h"}, 1, 8);
  REQUIRE(base.pipelines.size() == 2);
  const auto& p0 = base.pipelines[0].nodes;
  const auto& p1 = base.pipelines[1].nodes;
  REQUIRE(base.pipelines[0].stages.front().node_span == 2);
  // p0's first node leaves and a fresh one joins: layer 0's group on p0 is
  // broken, so whoever holds layer 0 anew gathers it from p1's group.
  const Reconfiguration r = reconfigure(cost, templates, base, {p0[0]}, {"fresh"});
  REQUIRE(r.plan.pipelines.size() == 2);
  const std::set<std::string> group{p1[0], p1[1]};
  int gathered = 0;
  for (const auto& t : r.transfers) {
    CHECK(t.from_node != p0[0]);
    if (t.layer != 0) continue;
    CHECK(group.count(t.from_node) == 1);
    CHECK(t.bytes == cost.layer_state_bytes(0) / 2);
    ++gathered;
  }
  CHECK(gathered >= 2);
  check_shards_covered(base, r.plan, shard_copies(base, r.plan, r.transfers, 1), p0[0]);
  // The same nodes, p0's first two swapped: each holds the other's part
  // now, which it gathers from the other (no one holds layer 0 whole).
  Plan swapped = base;
  std::swap(swapped.pipelines[0].nodes[0], swapped.pipelines[0].nodes[1]);
  const Reconfiguration moved = rearrangement(cost, base, swapped);
  REQUIRE(moved.transfers.size() == 2);
  for (const auto& t : moved.transfers) {
    CHECK(t.layer == 0);
    CHECK(t.bytes == cost.layer_state_bytes(0) / 2);
    CHECK(t.from_node != t.to_node);
  }
  check_shards_covered(base, swapped, shard_copies(base, swapped, moved.transfers, 1), "");
  // Both groups of layer 0 broken: nothing holds it, whatever the parts left.
  CHECK_THROWS_WITH_AS((void)reconfigure(cost, templates, base, {p0[0], p1[1]}, {}),
                       doctest::Contains("no surviving replica"), NoPlanError);
}


TEST_CASE("worker seats: pipelines sharing nodes take each node's GPUs in plan order, and each node ranks once") {
  // Four 1-node pipelines on two 4-GPU nodes, two a node, each on two
  // GPUs: pipelines 0 and 2 on a (listed apart, as a re-plan may), 1 and 3
  // on b. Pipeline 0: one stage at degree 2; the others: two stages of one GPU.
  Plan plan;
  plan.pipelines_per_node = 2;
  plan.pipelines = {pipeline({"a"}, {{0, 5, 2, 0}}), pipeline({"b"}, {{0, 2, 1, 0}, {2, 5, 1, 0}}),
                    pipeline({"a"}, {{0, 3, 1, 0}, {3, 5, 1, 0}}), pipeline({"b"}, {{0, 1, 1, 0}, {1, 5, 1, 0}})};
  plan.spare_nodes = {"c"};
  CHECK(trainer_nodes(plan) == std::vector<std::string>{"a", "b"});
  CHECK(ranked_nodes(plan) == std::vector<std::string>{"a", "b", "c"});
  CHECK(node_layers(plan) == std::map<std::string, LayerRange>{{"a", {0, 5}}, {"b", {0, 5}}});
  // pipeline, stage, node position, GPU, layers, degree, shard, first rank
  check_seats(worker_seats(plan, 4), {{0, 0, 0, 0, 0, 5, 2, 0, 0},
                                      {0, 0, 0, 1, 0, 5, 2, 1, 0},
                                      {2, 0, 0, 2, 0, 3, 1, 0, 2},
                                      {2, 1, 0, 3, 3, 5, 1, 0, 3},
                                      {1, 0, 0, 0, 0, 2, 1, 0, 4},
                                      {1, 1, 0, 1, 2, 5, 1, 0, 5},
                                      {3, 0, 0, 2, 0, 1, 1, 0, 6},
                                      {3, 1, 0, 3, 1, 5, 1, 0, 7}});
  const auto by_node = seats_by_node(plan, 4);
  CHECK(by_node.at({"a", 2}).pipeline == 2);
  CHECK(by_node.at({"b", 3}).layer_begin == 1);
  // A pipeline on more or fewer than its share of a node is refused, naming it.
  plan.pipelines[3].stages = {{0, 5, 1, 0}};
  CHECK_THROWS_WITH_AS((void)worker_seats(plan, 4),
                       doctest::Contains("pipeline 3, node b (2 pipelines a node, 2 GPUs each)"), InputError);
}
