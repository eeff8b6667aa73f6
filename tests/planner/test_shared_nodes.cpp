// Pipelines that share nodes: the all-reduce among them, the plan, its
// file, and re-planning it.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "oobleck/planner.h"
#include "reference.h"

using namespace oobleck;

namespace {

// Eight layers on nodes of four GPUs, each layer 2 MB of state; memory for
// the whole model and a few microbatches on one GPU.
Profile small_model() { return test::uniform_profile(8, 4, 1.0, 2.0, 2'000'000, 100'000, 64'000'000); }

CostModel sharing(const Profile& profile, int microbatches, int pipelines_per_node) {
  CostModel cost(profile, microbatches);
  cost.set_pipelines_per_node(pipelines_per_node);
  return cost;
}

// The set reconfigure and the plan file take: the template alone.
TemplateSet set_of(const PipelineTemplate& shared) {
  TemplateSet set;
  set.microbatches = shared.microbatches;
  set.max_nodes = 1;
  set.templates = {shared};
  return set;
}

// Two pipelines a node of the small model, each on two GPUs (M = 2): the
// cost model, the template and its set. (Not to be copied: the cost model
// keeps a reference to the profile.)
struct TwoPerNode {
  Profile profile = small_model();
  CostModel cost = sharing(profile, 2, 2);
  PipelineTemplate shared = build_shared_node_template(cost, 2).value();
  TemplateSet templates = set_of(shared);
};

std::map<std::string, int> pipelines_by_node(const Plan& plan) {
  std::map<std::string, int> count;
  for (const auto& p : plan.pipelines) {
    for (const auto& n : p.nodes) count[n] += 1;
  }
  return count;
}

}  // namespace

TEST_CASE("shared nodes: replicas all-reduce inside their node, then 1/r of the bytes across the nodes") {
  const Profile profile = small_model();
  const double bytes = 8e6;
  for (int r : {2, 4}) {
    const CostModel cost = sharing(profile, 1, r);
    const Hardware& hw = profile.hardware;
    for (int nodes : {1, 2, 5}) {
      CAPTURE(r);
      CAPTURE(nodes);
      const double expected = ring_allreduce_ms(bytes, r, hw.intra_node_bytes_per_s, hw.latency_ms) +
                              ring_allreduce_ms(bytes / r, nodes, hw.inter_node_bytes_per_s, hw.latency_ms);
      CHECK(cost.gradient_allreduce_ms(bytes, nodes * r) == doctest::Approx(expected).epsilon(1e-12));
    }
    CHECK(cost.gradient_allreduce_ms(bytes, 1) == 0);
  }
  // On whole nodes the ring across them all, as before.
  const CostModel whole(profile, 1);
  CHECK(whole.gradient_allreduce_ms(bytes, 6) ==
        doctest::Approx(ring_allreduce_ms(bytes, 6, profile.hardware.inter_node_bytes_per_s, profile.hardware.latency_ms)));
  CostModel bad(profile, 1);
  CHECK_THROWS_AS(bad.set_pipelines_per_node(3), InputError);
  CHECK_THROWS_AS(bad.set_pipelines_per_node(0), InputError);
}

TEST_CASE("shared nodes: r pipelines of one template on every node, the batch split evenly, f+1 nodes") {
  const Profile profile = small_model();
  for (int r : {2, 4}) {
    const CostModel cost = sharing(profile, 3, r);
    const auto shared = build_shared_node_template(cost, 4 / r);
    REQUIRE(shared);
    const std::vector<std::string> nodes = {"a", "b", "c", "d", "e"};
    for (int B : {5 * r, 5 * r + 3, 17 * r - 1}) {
      CAPTURE(r);
      CAPTURE(B);
      const Plan plan = instantiate_sharing_nodes(cost, *shared, nodes, 1, B);
      CHECK(plan.pipelines_per_node == r);
      CHECK(plan.pipelines.size() == nodes.size() * static_cast<std::size_t>(r));
      CHECK(plan.spare_nodes.empty());
      CHECK(plan_node_count(plan) == 5);
      for (const auto& [node, count] : pipelines_by_node(plan)) CHECK(count == r);
      int total = 0, least = B, most = 0;
      for (const auto& p : plan.pipelines) {
        CHECK(p.stages == shared->stages);
        CHECK(p.template_nodes == 1);
        total += p.microbatches;
        least = std::min(least, p.microbatches);
        most = std::max(most, p.microbatches);
      }
      CHECK(total == B);
      CHECK(most - least <= 1);
      // Priced as the pipelines play and the layers' all-reduces queue,
      // counted pipeline by pipeline.
      CHECK(plan.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, plan)).epsilon(1e-9));
      CHECK(plan.pipelines_ms + plan.sync_ms == doctest::Approx(plan.iteration_ms));
    }
    // Nodes whose pipelines would get no microbatch are spares.
    const Plan few = instantiate_sharing_nodes(cost, *shared, nodes, 1, 3 * r + 1);
    CHECK(few.pipelines.size() == 3u * static_cast<std::size_t>(r));
    CHECK(few.spare_nodes == std::vector<std::string>{"d", "e"});
    CHECK(plan_node_count(few) == 5);
    // f+1 nodes, not f+1 pipelines: a node's loss takes all its pipelines.
    CHECK_THROWS_WITH_AS((void)instantiate_sharing_nodes(cost, *shared, {"a", "b"}, 2, 64),
                         doctest::Contains("f+1 = 3"), NoPlanError);
    CHECK_THROWS_WITH_AS((void)instantiate_sharing_nodes(cost, *shared, nodes, 2, 2 * r),
                         doctest::Contains("only 2 nodes"), NoPlanError);
    CHECK_THROWS_AS((void)instantiate_sharing_nodes(cost, *shared, {"a", "a"}, 0, 8), InputError);
    // The template must be the cost model's share of a node.
    const CostModel other = sharing(profile, 3, r == 2 ? 4 : 2);
    CHECK_THROWS_AS((void)instantiate_sharing_nodes(other, *shared, nodes, 1, 16), std::invalid_argument);
  }
}

TEST_CASE("shared nodes: a template's memory limit on microbatches rules a split out") {
  const Profile profile = small_model();
  const CostModel cost = sharing(profile, 2, 2);
  auto shared = build_shared_node_template(cost, 2);
  REQUIRE(shared);
  shared->max_microbatches = 2;  // as a template whose first stage fits two in flight
  CHECK(instantiate_sharing_nodes(cost, *shared, {"a", "b"}, 1, 8).pipelines.size() == 4u);
  CHECK_THROWS_WITH_AS((void)instantiate_sharing_nodes(cost, *shared, {"a", "b"}, 1, 9),
                       doctest::Contains("memory limit of 2"), NoPlanError);
}

TEST_CASE("shared nodes: plan_cluster with auto keeps the fastest of every pipelines-per-node, exactly that plan") {
  std::mt19937_64 rng(20261129);
  int shared_won = 0, whole_won = 0;
  for (int instance = 0; instance < 40; ++instance) {
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {4};
    options.max_layers = 6;
    Profile profile = test::random_profile(rng, options);
    if (instance % 2 == 0) profile.hardware.gpu_memory_bytes *= 4;
    const std::vector<std::string> nodes = numbered_nodes(2 + instance % 5);
    const int B = 4 + instance % 13;
    const int f = instance % 2;
    CAPTURE(instance);
    std::optional<ClusterPlan> best;
    int best_r = 0;
    for (int r : {1, 2, 4}) {
      try {
        ClusterPlan c = plan_cluster(profile, nodes, f, B, 0, {}, RecomputePolicy::none, GradientSync::per_layer,
                                     kDefaultGradientBucketBytes, 1, r);
        CHECK(c.plan.pipelines_per_node == r);
        if (!best || c.plan.iteration_ms < best->plan.iteration_ms * (1 - 1e-12)) best = std::move(c), best_r = r;
      } catch (const NoPlanError&) {
      }
    }
    if (!best) {
      CHECK_THROWS_AS((void)plan_cluster(profile, nodes, f, B, 0, {}, RecomputePolicy::none, GradientSync::per_layer,
                                         kDefaultGradientBucketBytes, 1, 0),
                      NoPlanError);
      continue;
    }
    const ClusterPlan chosen = plan_cluster(profile, nodes, f, B, 0, {}, RecomputePolicy::none,
                                            GradientSync::per_layer, kDefaultGradientBucketBytes, 1, 0);
    CHECK(chosen.plan.pipelines_per_node == best_r);
    CHECK(chosen.plan.iteration_ms == best->plan.iteration_ms);
    (best_r > 1 ? shared_won : whole_won) += 1;
  }
  MESSAGE("pipelines sharing nodes won " << shared_won << " of " << shared_won + whole_won << " instances");
  CHECK(shared_won > 5);
  CHECK(whole_won > 5);
}

TEST_CASE("shared nodes: the plan file round-trips, and a malformed one is refused naming the field") {
  const TwoPerNode two;
  const auto& [profile, cost, shared, templates] = two;
  const Profile& plan_profile = profile;  // (clang 14's lambdas capture no structured binding)
  const Plan plan = instantiate_sharing_nodes(cost, shared, {"a", "b", "c"}, 1, 10);
  const std::string text = plan_to_json(plan, templates, profile);
  const Plan back = parse_plan(text, "plan.json", profile);
  CHECK(back.pipelines_per_node == 2);
  REQUIRE(back.pipelines.size() == plan.pipelines.size());
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    CHECK(back.pipelines[i].nodes == plan.pipelines[i].nodes);
    CHECK(back.pipelines[i].stages == plan.pipelines[i].stages);
    CHECK(back.pipelines[i].microbatches == plan.pipelines[i].microbatches);
  }
  const auto json = nlohmann::json::parse(text);
  const auto refused = [&](const std::function<void(nlohmann::json&)>& change, const std::string& says) {
    nlohmann::json bad = json;
    change(bad);
    CAPTURE(says);
    CHECK_THROWS_WITH_AS((void)parse_plan(bad.dump(), "plan.json", plan_profile), doctest::Contains(says.c_str()), InputError);
  };
  refused([](auto& j) { j["pipelines_per_node"] = 3; }, "pipelines_per_node");
  refused([](auto& j) { j["pipelines_per_node"] = 8; }, "pipelines_per_node");
  refused([](auto& j) { j["pipelines_per_node"] = 1; }, "expected 4 (gpus_per_node)");
  refused([](auto& j) { j["pipelines"][1]["nodes"][0] = "c"; }, "holds more than pipelines_per_node = 2");
  refused([](auto& j) { j["pipelines"][1]["nodes"][0] = "z"; }, "holds 1 pipelines, expected pipelines_per_node = 2");
  refused([](auto& j) { j["spare_nodes"] = {"a"}; }, "appears twice");
  refused([](auto& j) { j["pipelines"][0]["stages"][0]["gpus"] = 4; }, "expected 2 (gpus_per_node / pipelines_per_node)");
  refused(
      [](auto& j) {
        j["pipelines"][0]["template_nodes"] = 2;
        j["pipelines"][0]["nodes"].push_back("z");
      },
      "template_nodes");
}

TEST_CASE("shared nodes: re-planned after a loss and a join, every pipeline of a survivor kept, a newcomer given every layer") {
  const TwoPerNode two;
  const auto& [profile, cost, shared, templates] = two;
  const Plan plan = instantiate_sharing_nodes(cost, shared, {"a", "b", "c"}, 1, 12);
  const Reconfiguration lost = reconfigure(cost, templates, plan, {"b"}, {});
  CHECK(lost.plan.pipelines_per_node == 2);
  CHECK(lost.plan.pipelines.size() == 4u);
  CHECK(lost.plan.global_microbatches == 12);
  CHECK(lost.transfers.empty());
  CHECK(pipelines_by_node(lost.plan) == std::map<std::string, int>{{"a", 2}, {"c", 2}});
  const Reconfiguration joined = reconfigure(cost, templates, lost.plan, {}, {"d"});
  CHECK(pipelines_by_node(joined.plan) == std::map<std::string, int>{{"a", 2}, {"c", 2}, {"d", 2}});
  std::set<int> layers_to_d;
  for (const auto& t : joined.transfers) {
    CHECK(t.to_node == "d");
    CHECK(t.from_node != "d");
    layers_to_d.insert(t.layer);
  }
  CHECK(static_cast<int>(layers_to_d.size()) == cost.layers());
  CHECK(joined.copy_bytes > 0);
  // Every node lost: the state is gone.
  CHECK_THROWS_AS((void)reconfigure(cost, templates, plan, {"a", "b", "c"}, {"d"}), NoPlanError);
  // The cost model must price the plan's sharing.
  const CostModel whole(profile, 2);
  CHECK_THROWS_AS((void)reconfigure(whole, templates, plan, {"b"}, {}), std::invalid_argument);
}
