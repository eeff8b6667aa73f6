// Planner speed on the bundled 98-layer GPT-3 175B profile (8-GPU A100 nodes).
//   BM_Templates/256: every template for 1..256 nodes (targets: < 1 s)
//   BM_TemplatesRecomputing/256: the same, each stage choosing whether it
//     recomputes its activations (--recompute auto: twice the stage kinds)
//   BM_TemplatesAnalytic{,Recomputing}/256: the analytic 175B profile, which
//     records attention cores, without recomputation and choosing among
//     none, selective and full (three times the stage kinds)
//   BM_TemplatesOverNodes/256: the same with stages over up to two nodes
//   BM_Instantiate/2048: 2048 nodes, f = 16, B = 4096, templates given (< 0.5 s)
//   BM_PlanCluster/2048: the same with templates and the default M search
//   BM_PlanClusterOverNodes/2048: the analytic profile with stages over up
//     to two nodes, f = 4: its later rounds run at M below the layer count
//     and take the first round's answers where they hold
//   BM_Reconfigure/2048: two nodes of different pipelines lost in a 2048-node
//     plan; /0 keeps the intact pipelines (default), /1 re-plans everything
// Counters named work_* count the work done (dynamic-programme states,
// feasibility tests): they do not depend on timing, so tools/bench-compare.sh
// flags any growth in them exactly, however noisy the machine.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "oobleck/planner.h"

namespace {

using namespace oobleck;

const Profile& gpt3_175b() {
  static const Profile profile =
      load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles/gpt3-175b-a100.handwritten.json");
  return profile;
}

// The analytic profile records attention cores: selective recomputation too.
const Profile& gpt3_175b_analytic() {
  static const Profile profile =
      load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles/gpt3-175b-a100.analytic.json");
  return profile;
}

std::vector<std::string> names(int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back("node" + std::to_string(i));
  return out;
}

void templates(benchmark::State& state, RecomputePolicy recompute, const Profile& profile = gpt3_175b(),
               int tensor_parallel_nodes = 1) {
  const int max_nodes = static_cast<int>(state.range(0));
  // The CLI's default M: the largest stage count any template can have.
  const int microbatches = std::min<int>(static_cast<int>(profile.layers.size()), max_nodes * profile.hardware.gpus_per_node);
  CostModel cost(profile, microbatches);
  cost.set_recompute(recompute);
  cost.set_tensor_parallel_nodes(tensor_parallel_nodes);
  TemplateSet set;
  for (auto _ : state) {
    set = build_templates(cost, max_nodes);
    benchmark::DoNotOptimize(set);
  }
  state.counters["templates"] = static_cast<double>(set.templates.size());
  state.counters["M"] = microbatches;
  state.counters["work_dp_solves"] = static_cast<double>(set.search_solves);
  state.counters["work_dp_states"] = static_cast<double>(set.search_states);
}
void BM_Templates(benchmark::State& state) { templates(state, RecomputePolicy::none); }
void BM_TemplatesRecomputing(benchmark::State& state) { templates(state, RecomputePolicy::automatic); }
void BM_TemplatesAnalytic(benchmark::State& state) {
  templates(state, RecomputePolicy::none, gpt3_175b_analytic());
}
void BM_TemplatesAnalyticRecomputing(benchmark::State& state) {
  templates(state, RecomputePolicy::automatic, gpt3_175b_analytic());
}
BENCHMARK(BM_Templates)->Arg(32)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TemplatesRecomputing)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TemplatesAnalytic)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TemplatesAnalyticRecomputing)->Arg(256)->Unit(benchmark::kMillisecond);
// Stages over up to two whole nodes (--tensor-parallel-nodes 2).
void BM_TemplatesOverNodes(benchmark::State& state) {
  templates(state, RecomputePolicy::none, gpt3_175b_analytic(), 2);
}
BENCHMARK(BM_TemplatesOverNodes)->Arg(256)->Unit(benchmark::kMillisecond);

void BM_Instantiate(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const Profile& profile = gpt3_175b();
  const auto all = names(nodes);
  // Templates for the M the default search settles on (18 for this case).
  const CostModel cost(profile, 18);
  const TemplateSet templates = build_templates(cost, nodes);
  Plan plan;
  for (auto _ : state) {
    plan = instantiate(cost, templates, all, 16, 4096);
    benchmark::DoNotOptimize(plan);
  }
  state.counters["iteration_ms"] = plan.iteration_ms;
  state.counters["pipelines"] = static_cast<double>(plan.pipelines.size());
  state.counters["work_composition_steps"] = static_cast<double>(plan.composition_steps);
}
BENCHMARK(BM_Instantiate)->Arg(2048)->Unit(benchmark::kMillisecond);

// A cluster plan's outcome and its work: the rounds' template searches,
// their states, the compositions' steps.
void count_cluster_plan(benchmark::State& state, const ClusterPlan& result) {
  state.counters["iteration_ms"] = result.plan.iteration_ms;
  state.counters["M"] = result.plan.template_microbatches;
  state.counters["work_template_searches"] = result.template_searches;
  state.counters["work_dp_states"] = static_cast<double>(result.template_states);
  state.counters["work_composition_steps"] = static_cast<double>(result.plan.composition_steps);
}

void BM_PlanCluster(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const auto all = names(nodes);
  ClusterPlan result;
  for (auto _ : state) {
    result = plan_cluster(gpt3_175b(), all, 16, 4096);
    benchmark::DoNotOptimize(result);
  }
  count_cluster_plan(state, result);
}
BENCHMARK(BM_PlanCluster)->Arg(2048)->Unit(benchmark::kMillisecond);

void BM_PlanClusterOverNodes(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const auto all = names(nodes);
  ClusterPlan result;
  for (auto _ : state) {
    result = plan_cluster(gpt3_175b_analytic(), all, 4, 4096, 0, {}, RecomputePolicy::none, GradientSync::per_layer,
                          kDefaultGradientBucketBytes, 2);
    benchmark::DoNotOptimize(result);
  }
  count_cluster_plan(state, result);
}
BENCHMARK(BM_PlanClusterOverNodes)->Arg(2048)->Unit(benchmark::kMillisecond);

void BM_Reconfigure(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  ReconfigureOptions options;
  options.replan_all = state.range(1) != 0;
  const ClusterPlan start = plan_cluster(gpt3_175b(), names(nodes), 16, 4096);
  const CostModel cost(gpt3_175b(), start.plan.template_microbatches);
  const std::vector<std::string> lost = {start.plan.pipelines[0].nodes[0], start.plan.pipelines[1].nodes[1]};
  Reconfiguration result;
  for (auto _ : state) {
    result = reconfigure(cost, start.templates, start.plan, lost, {}, options);
    benchmark::DoNotOptimize(result);
  }
  state.counters["layer_copies"] = static_cast<double>(result.transfers.size());
  state.counters["copy_GiB"] = static_cast<double>(result.copy_bytes) / (1 << 30);
  state.counters["iteration_ms"] = result.plan.iteration_ms;
  state.counters["work_composition_steps"] = static_cast<double>(result.plan.composition_steps);
}
BENCHMARK(BM_Reconfigure)->Args({2048, 0})->Args({2048, 1})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
