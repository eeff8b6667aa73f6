// Instantiation against brute force over every multiset of templates and
// every batch split.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <random>
#include <set>

#include "oobleck/planner.h"
#include "reference.h"

using namespace oobleck;

namespace {

std::vector<std::string> names(int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back("node" + std::to_string(i));
  return out;
}

void check_plan(const CostModel& cost, const TemplateSet& templates, const Plan& plan, const std::vector<std::string>& nodes,
                int f, int B) {
  std::multiset<std::string> seen;
  int total = 0;
  double slowest = 0;
  for (const auto& p : plan.pipelines) {
    const PipelineTemplate* t = templates.find(p.template_nodes);
    REQUIRE(t);
    CHECK(p.stages == t->stages);
    CHECK(static_cast<int>(p.nodes.size()) == p.template_nodes);
    seen.insert(p.nodes.begin(), p.nodes.end());
    CHECK(p.microbatches >= 1);
    if (t->max_microbatches > 0) CHECK(p.microbatches <= t->max_microbatches);
    // Priced as the pipeline plays (an event-by-event count), not as
    // first + (M - 1) x period, what the search weighs.
    CHECK(p.iteration_ms == doctest::Approx(test::play_1f1b(cost, p.stages, p.microbatches).end_ms).epsilon(1e-12));
    total += p.microbatches;
    slowest = std::max(slowest, p.iteration_ms);
  }
  seen.insert(plan.spare_nodes.begin(), plan.spare_nodes.end());
  CHECK(seen == std::multiset<std::string>(nodes.begin(), nodes.end()));
  CHECK(total == B);
  CHECK(static_cast<int>(plan.pipelines.size()) >= f + 1);
  CHECK(plan.pipelines_ms == doctest::Approx(slowest).epsilon(1e-12));
  // The iteration: every layer's all-reduce after the slowest pipeline's
  // last backward over it, counted pipeline by pipeline.
  CHECK(plan.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, plan)).epsilon(1e-12));
  CHECK(plan.iteration_ms >= slowest);
  CHECK(plan.sync_ms >= -1e-9);
  CHECK(plan.iteration_ms == doctest::Approx(plan.pipelines_ms + plan.sync_ms).epsilon(1e-12));
}

}  // namespace

TEST_CASE("instantiation is optimal given the templates: 1500 random instances against brute force") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> node_count(2, 9), fault(0, 2), extra(0, 9), microbatches(1, 6);
  int compared = 0, with_spare = 0, no_plan = 0, heterogeneous = 0, in_buckets = 0;
  for (int instance = 0; instance < 1500; ++instance) {
    test::RandomProfileOptions options;
    options.min_layers = 2;
    options.max_layers = 6;
    options.gpus_per_node_choices = {1, 2};
    options.memory_bound = instance % 3 == 0;
    options.allreduce_table_seed = instance % 4 == 1 ? 1000 + instance : 0;
    const Profile profile = test::random_profile(rng, options);
    CostModel cost(profile, microbatches(rng));
    // Every fifth instance in gradient buckets of about two layers' gradients,
    // every fifth after the backward (derived, not drawn: the draws stay those
    // of the instances before).
    if (instance % 5 == 2) {
      cost.set_gradient_sync(GradientSync::buckets);
      cost.set_gradient_bucket_bytes(1.6 * static_cast<double>(profile.layers[0].param_bytes));
    } else if (instance % 5 == 4) {
      cost.set_gradient_sync(GradientSync::after_backward);
    }
    const int N = node_count(rng);
    const int f = fault(rng);
    const int B = f + 1 + extra(rng);
    const TemplateSet templates = build_templates(cost, N);
    const auto nodes = names(N);
    CAPTURE(instance);
    // The reference uses the most nodes that any composition with f+1 pipelines can.
    std::optional<double> best;
    int used = N;
    for (; used >= 1 && !best; --used) best = test::brute_force_instantiation(cost, templates, used, f + 1, B);
    ++used;
    try {
      const Plan plan = instantiate(cost, templates, nodes, f, B);
      REQUIRE(best.has_value());
      CHECK(test::plan_objective_ms(cost, plan) == doctest::Approx(*best).epsilon(1e-9));
      CHECK(static_cast<int>(plan.spare_nodes.size()) == N - used);
      check_plan(cost, templates, plan, nodes, f, B);
      ++compared;
      with_spare += !plan.spare_nodes.empty();
      std::set<int> sizes;
      for (const auto& p : plan.pipelines) sizes.insert(p.template_nodes);
      heterogeneous += sizes.size() > 1;
      in_buckets += cost.gradient_sync() == GradientSync::buckets;
    } catch (const NoPlanError&) {
      CHECK_FALSE(best.has_value());
      ++no_plan;
    }
  }
  MESSAGE("compared " << compared << " plans (" << heterogeneous << " mixing template sizes, " << with_spare
                      << " with spare nodes, " << in_buckets << " in gradient buckets); " << no_plan
                      << " without a plan");
  CHECK(compared >= 1000);
  CHECK(in_buckets >= 150);
  CHECK(heterogeneous > 50);
}

TEST_CASE("instantiation: names, hostfile order and bad requests") {
  const Profile profile = test::uniform_profile(8, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 8);
  const std::vector<std::string> hosts = {"gpu-a", "gpu-b", "gpu-c", "gpu-d"};
  const Plan plan = instantiate(cost, templates, hosts, 1, 8);
  std::vector<std::string> order;
  for (const auto& p : plan.pipelines) order.insert(order.end(), p.nodes.begin(), p.nodes.end());
  CHECK(order == hosts);
  CHECK_THROWS_AS((void)instantiate(cost, templates, {"a", "a"}, 0, 4), InputError);
  CHECK_THROWS_AS((void)instantiate(cost, templates, {"a,b"}, 0, 4), InputError);
  CHECK_THROWS_AS((void)instantiate(cost, templates, hosts, 3, 2), InputError);  // B < f+1
  CHECK_THROWS_WITH_AS((void)instantiate(cost, templates, hosts, 4, 16),
                       doctest::Contains("cannot form f+1 = 5 pipelines"), NoPlanError);
}

TEST_CASE("the batch split is the exact min-max split") {
  const Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 6);
  const TemplateSet templates = build_templates(cost, 6);
  // 5 nodes, f = 1: a 3-node and a 2-node pipeline (or better); 7 microbatches.
  const Plan plan = instantiate(cost, templates, {"a", "b", "c", "d", "e"}, 1, 7);
  const auto best = test::brute_force_instantiation(cost, templates, 5, 2, 7);
  REQUIRE(best);
  CHECK(test::plan_objective_ms(cost, plan) == doctest::Approx(*best).epsilon(1e-12));
}

TEST_CASE("plan_cluster: the default M follows the microbatches the pipelines run, and never plans worse") {
  const Profile profile = load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles/gpt3-175b-a100.handwritten.json");
  const auto nodes = names(64);
  const ClusterPlan searched = plan_cluster(profile, nodes, 3, 256);
  const int first_m = (256 + 3) / 4;
  const ClusterPlan fixed = plan_cluster(profile, nodes, 3, 256, first_m);
  CHECK(fixed.plan.template_microbatches == first_m);
  CHECK(searched.plan.iteration_ms <= fixed.plan.iteration_ms * (1 + 1e-12));
  int largest = 0;
  for (const auto& p : searched.plan.pipelines) largest = std::max(largest, p.microbatches);
  // Either the search settled (M equals what the biggest pipeline runs) or it stopped improving.
  if (searched.plan.template_microbatches != first_m) CHECK(searched.plan.template_microbatches <= first_m);
  MESSAGE("M " << first_m << " -> " << searched.plan.template_microbatches << " (largest pipeline runs " << largest
               << "): " << fixed.plan.iteration_ms << " -> " << searched.plan.iteration_ms << " ms");
  CHECK(searched.templates.microbatches == searched.plan.template_microbatches);
}

namespace {

Profile tiny_profile(std::vector<std::array<Bytes, 3>> layers, Bytes gpu_memory) {  // param, optimizer, activation
  Profile p;
  p.origin = "tiny";
  p.model_json = "{}";
  p.hardware = {"tiny", 1, gpu_memory, 1e9, 1e9, 0.01, 0, {}, {}};
  for (std::size_t l = 0; l < layers.size(); ++l) {
    std::string name = "l";
    name += std::to_string(l);
    p.layers.push_back({name, 1, 2, layers[l][0], layers[l][1], layers[l][2], 0, {}});
  }
  return p;
}

}  // namespace

TEST_CASE("plan_cluster: a default M too large for memory does not hide the plans that exist") {
  // Each layer fits a GPU only with one microbatch in flight; M = ceil(B/(f+1))
  // = 2 rules out every template, M = 1 gives two 2-node pipelines.
  const Profile tight = tiny_profile({{25, 75, 100}, {25, 75, 100}}, 250);
  const ClusterPlan plan = plan_cluster(tight, names(4), 0, 2);
  CHECK(plan.plan.pipelines.size() == 2);
  CHECK(plan.plan.template_microbatches == 1);
  // A later round's M (3, what the biggest pipeline runs) loses the 3-node
  // template; the first round's plan stands.
  const Profile rounds = tiny_profile({{50, 200, 100}, {50, 200, 100}, {100, 400, 100}, {100, 400, 100}}, 1000);
  const ClusterPlan kept = plan_cluster(rounds, names(7), 1, 4);
  CHECK(kept.plan.pipelines.size() == 2);
  CHECK(kept.plan.spare_nodes.empty());
  CHECK_THROWS_AS((void)plan_cluster(rounds, names(7), 1, 4, 3), NoPlanError);  // that M, asked for, has no plan
}

TEST_CASE("microbatch size: the fastest of every size's own plan, exactly that plan; sizes that cannot plan are said") {
  // One model at sizes 1, 2, 4 and 8: per microbatch, a fixed cost per layer
  // plus one per sample (bigger microbatches use the device better), and
  // activations in proportion to the size. Size 8 does not fit the memory.
  std::vector<Profile> sized;
  for (const int size : {1, 2, 4, 8}) {
    Profile p = test::uniform_profile(12, 1, 0.5 + 1.0 * size, 1.0 + 2.0 * size, 1 << 20,
                                      size == 8 ? Bytes{1} << 30 : Bytes{size} << 22, Bytes{1} << 30);
    p.origin = "mb" + std::to_string(size) + ".json";
    p.microbatch_size = size;
    sized.push_back(std::move(p));
  }
  std::vector<const Profile*> profiles;
  for (const auto& p : sized) profiles.push_back(&p);
  const auto nodes = numbered_nodes(8);
  for (const int samples : {16, 64, 256}) {
    CAPTURE(samples);
    const SizedClusterPlan result = plan_cluster_over_sizes(profiles, nodes, 1, samples);
    REQUIRE(result.choices.size() == 4);
    // The oracle: each size planned on its own.
    double best = std::numeric_limits<double>::infinity();
    std::size_t best_index = 0;
    for (std::size_t i = 0; i < sized.size(); ++i) {
      const MicrobatchSizeChoice& c = result.choices[i];
      CHECK(c.microbatch_size == sized[i].microbatch_size);
      CHECK(c.global_microbatches == samples / sized[i].microbatch_size);
      try {
        const ClusterPlan alone = plan_cluster(sized[i], nodes, 1, samples / sized[i].microbatch_size);
        CHECK(c.planned);
        CHECK(c.iteration_ms == alone.plan.iteration_ms);
        if (alone.plan.iteration_ms < best) {
          best = alone.plan.iteration_ms;
          best_index = i;
        }
      } catch (const NoPlanError&) {
        CHECK_FALSE(c.planned);
        CHECK_FALSE(c.problem.empty());
      }
    }
    CHECK(result.chosen == best_index);
    CHECK(result.cluster.plan.iteration_ms == best);
    const ClusterPlan alone =
        plan_cluster(sized[best_index], nodes, 1, samples / sized[best_index].microbatch_size);
    CHECK(result.cluster.plan.pipelines.size() == alone.plan.pipelines.size());
    CHECK(result.cluster.plan.global_microbatches == samples / sized[best_index].microbatch_size);
  }
  // Size 8 cannot plan: its activations do not fit.
  CHECK_FALSE(plan_cluster_over_sizes(profiles, nodes, 1, 64).choices[3].planned);

  // A size that does not divide the batch is skipped, and said so.
  const SizedClusterPlan odd = plan_cluster_over_sizes(profiles, nodes, 1, 6);
  CHECK(odd.choices[2].global_microbatches == 0);
  CHECK(odd.choices[2].problem == "does not divide the batch of 6");
  CHECK(odd.choices[odd.chosen].microbatch_size <= 2);

  // Bad input.
  Profile other = sized[1];
  other.model_name = "another";
  CHECK_THROWS_WITH_AS((void)plan_cluster_over_sizes({&sized[0], &other}, nodes, 1, 16),
                       doctest::Contains("mb2.json: the model (another) differs from mb1.json's"), InputError);
  CHECK_THROWS_WITH_AS((void)plan_cluster_over_sizes({&sized[0], &sized[0]}, nodes, 1, 16),
                       doctest::Contains("microbatch size 1 given twice"), InputError);
  CHECK_THROWS_WITH_AS((void)plan_cluster_over_sizes({&sized[2], &sized[3]}, nodes, 1, 6),
                       "global batch of 6 samples: no microbatch size given divides it", InputError);
  CHECK_THROWS_AS((void)plan_cluster_over_sizes({&sized[3]}, nodes, 1, 64), NoPlanError);
}
