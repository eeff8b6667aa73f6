#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "oobleck/node_speeds.h"
#include "oobleck/planner.h"
#include "oobleck/sim/iteration.h"

using namespace oobleck;
using namespace oobleck::sim;

namespace {

struct LayerCost {
  double forward_ms;
  double backward_ms;
};

// Layers with the given costs; transfers cost `latency_ms` plus output bytes
// over the links, gradients are `param_bytes` per layer.
Profile profile_of(const std::vector<LayerCost>& costs, Bytes output_bytes = 0, double latency_ms = 0,
                   Bytes param_bytes = 1 << 20, int gpus_per_node = 1) {
  Profile p;
  p.origin = "test";
  p.model_name = "test";
  p.model_json = "{}";
  p.hardware = {"test", gpus_per_node, Bytes{1} << 40, 100e9, 10e9, latency_ms, 0, {}, {}};
  for (std::size_t l = 0; l < costs.size(); ++l) {
    LayerProfile layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = costs[l].forward_ms;
    layer.backward_ms = costs[l].backward_ms;
    layer.param_bytes = param_bytes;
    layer.optimizer_bytes = 3 * param_bytes;
    layer.activation_bytes = 1 << 20;
    layer.output_bytes = output_bytes;
    p.layers.push_back(layer);
  }
  return p;
}

// One pipeline per entry of `cuts` (stage boundaries, one stage per node).
Plan plan_of(const CostModel& cost, const std::vector<std::vector<int>>& cuts, const std::vector<int>& microbatches) {
  Plan plan;
  int node = 0;
  for (std::size_t p = 0; p < cuts.size(); ++p) {
    Pipeline pipeline;
    for (std::size_t s = 0; s + 1 < cuts[p].size(); ++s) {
      pipeline.stages.push_back({cuts[p][s], cuts[p][s + 1], 1, static_cast<int>(s)});
      pipeline.nodes.push_back(std::string("n").append(std::to_string(node++)));
    }
    pipeline.template_nodes = static_cast<int>(pipeline.nodes.size());
    pipeline.microbatches = microbatches[p];
    pipeline.iteration_ms = cost.pipeline_ms(pipeline.stages, pipeline.microbatches);
    plan.global_microbatches += pipeline.microbatches;
    plan.pipelines_ms = std::max(plan.pipelines_ms, pipeline.iteration_ms);
    plan.pipelines.push_back(std::move(pipeline));
  }
  plan.sync_ms = cost.gradient_sync_ms(static_cast<int>(cuts.size()));
  plan.iteration_ms = plan.pipelines_ms + plan.sync_ms;
  return plan;
}

std::vector<int> even_cuts(int stages, int layers_per_stage) {
  std::vector<int> cuts;
  for (int s = 0; s <= stages; ++s) cuts.push_back(s * layers_per_stage);
  return cuts;
}

}  // namespace

TEST_CASE("iteration: equal stages without transfers take exactly (M + S - 1)(F + B)") {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 12; ++M) {
      const Profile profile = profile_of(std::vector<LayerCost>(2 * S, {1.5, 2.75}));
      const CostModel cost(profile, M);
      const Plan plan = plan_of(cost, {even_cuts(S, 2)}, {M});
      const IterationResult r = simulate_iteration(cost, plan);
      const double F = 3.0, B = 5.5;
      CAPTURE(S);
      CAPTURE(M);
      CHECK(r.iteration_ms == (M + S - 1) * (F + B));
      // Here the planner's formula is exact too.
      CHECK(r.iteration_ms == plan.iteration_ms);
      for (const auto& st : r.stages) {
        CHECK(st.compute_ms == M * (F + B));
        CHECK(st.idle_ms == (S - 1) * (F + B));
      }
    }
  }
}

TEST_CASE("iteration: never beats the lower bounds, on random heterogeneous pipelines with transfers") {
  std::mt19937_64 random(11);
  int compared = 0, below_formula = 0, above_formula = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int layers = 2 + static_cast<int>(random() % 10);
    std::vector<LayerCost> costs;
    for (int l = 0; l < layers; ++l) {
      costs.push_back({0.25 * static_cast<double>(1 + random() % 12), 0.25 * static_cast<double>(1 + random() % 24)});
    }
    const Profile profile = profile_of(costs, static_cast<Bytes>(random() % 3) << 28, 0.01 * (random() % 3));
    const int pipelines = 1 + static_cast<int>(random() % 3);
    std::vector<std::vector<int>> cuts;
    std::vector<int> microbatches;
    for (int p = 0; p < pipelines; ++p) {
      std::vector<int> c = {0};
      for (int l = 1; l < layers; ++l) {
        if (random() % 3 == 0) c.push_back(l);
      }
      c.push_back(layers);
      cuts.push_back(c);
      microbatches.push_back(1 + static_cast<int>(random() % 9));
    }
    const CostModel cost(profile, 4);
    const Plan plan = plan_of(cost, cuts, microbatches);
    const IterationResult r = simulate_iteration(cost, plan);
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      const Pipeline& pipeline = plan.pipelines[p];
      double sum = 0, slowest = 0;
      for (const auto& st : pipeline.stages) {
        const double c = cost.stage_compute_ms(st.layer_begin, st.layer_end, st.gpus);
        sum += c;
        slowest = std::max(slowest, c);
      }
      // Microbatch 0 passes every stage in turn; the slowest stage runs all M.
      CHECK(r.iteration_ms >= sum * (1 - 1e-12));
      CHECK(r.iteration_ms >= pipeline.microbatches * slowest * (1 - 1e-12));
      ++compared;
      if (r.last_backward_ms < plan.pipelines_ms * (1 - 1e-9)) ++below_formula;
      if (r.last_backward_ms > plan.pipelines_ms * (1 + 1e-9)) ++above_formula;
    }
    for (const auto& st : r.stages) {
      CHECK(st.idle_ms >= -1e-9);
      CHECK(st.compute_ms + st.optimizer_ms + st.idle_ms == doctest::Approx(r.iteration_ms));
    }
  }
  CHECK(compared > 400);
  // The formula charges work a slow first stage hides (the case below), so
  // it is no bound from below. Since it prices 1F1B's round trip
  // (steady_period.h), no instance here plays slower than it.
  CHECK(below_formula > 0);
  CHECK(above_formula == 0);
}

TEST_CASE("iteration: the formula charges later stages' work that a slow first stage hides") {
  // Stage 0 takes F = B = 10, stage 1 takes F = B = 1, M = 2. Stage 1's round
  // trip for microbatch 0 (2 ms) runs while stage 0 does its second forward,
  // so the iteration is 2 M (F0 + B0) = 40, not a + (M-1) b = 22 + 20 = 42.
  const Profile profile = profile_of({{10, 10}, {1, 1}});
  const CostModel cost(profile, 2);
  const Plan plan = plan_of(cost, {{0, 1, 2}}, {2});
  CHECK(plan.iteration_ms == 42);
  CHECK(simulate_iteration(cost, plan).iteration_ms == 40);
}

TEST_CASE("iteration: 1F1B does not hide the round trip of transfers, and the formula prices it") {
  // Two equal stages, F = B = 1, transfers of c = 0.5 each way. Stage 0 keeps
  // two microbatches in flight and alternates F(m+1), B(m); B(m) waits for
  // the gradient to come back from stage 1. The second forward in flight
  // covers the round trip only every other cycle, so every second cycle
  // takes F + B + 2c: T(M) = a + (M-1)(F+B) + floor((M-1)/2) 2c. The
  // formula's period is that round trip over the 2 in flight, 2 + c: exact
  // at odd M, c over at even M (the last cycle's half).
  const double c = 0.5;
  const Profile profile = profile_of({{1, 1}, {1, 1}}, 0, c);
  for (int M = 1; M <= 8; ++M) {
    const CostModel cost(profile, M);
    const Plan plan = plan_of(cost, {{0, 1, 2}}, {M});
    CAPTURE(M);
    CHECK(plan.iteration_ms == doctest::Approx(4 + 2 * c + (M - 1) * (2 + c)));
    const IterationResult r = simulate_iteration(cost, plan);
    CHECK(r.iteration_ms == doctest::Approx(4 + 2 * c + (M - 1) * 2 + ((M - 1) / 2) * 2 * c));
    CHECK(plan.iteration_ms - r.iteration_ms == doctest::Approx(M % 2 == 0 ? c : 0.0));
  }
}

TEST_CASE("iteration: gradient all-reduce across pipelines, per layer, overlapping the backward") {
  // Two pipelines of one stage over 4 layers, 1 ms backward each. Layer 3's
  // gradient is ready first and its all-reduce runs while layers 2..0 are
  // still in backward; only layer 0's all-reduce is left after the backward.
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 1}), 0, 0, Bytes{100} << 20);
  const CostModel cost(profile, 2);
  const Plan plan = plan_of(cost, {{0, 4}, {0, 4}}, {2, 2});
  IterationOptions options;
  options.record_ops = true;
  const IterationResult r = simulate_iteration(cost, plan, options);
  const double one = cost.allreduce_ms(static_cast<double>(Bytes{100} << 20), 2, profile.hardware.inter_node_bytes_per_s);
  REQUIRE(one > 1);  // longer than a layer's backward: they queue on the network
  std::vector<OpRecord> reductions;
  for (const auto& op : r.ops) {
    if (op.kind == OpKind::allreduce) reductions.push_back(op);
  }
  REQUIRE(reductions.size() == 4);
  // Layer 3 first, as soon as the last backward (from 12 to 16 ms) has passed it.
  CHECK(reductions[0].index == 3);
  CHECK(reductions[0].start_ms == doctest::Approx(13));
  // Each waits for the previous one: the holders' network is busy.
  for (std::size_t i = 1; i < reductions.size(); ++i) {
    CHECK(reductions[i].start_ms == doctest::Approx(reductions[i - 1].end_ms));
  }
  CHECK(r.last_backward_ms == 16);
  CHECK(r.iteration_ms == doctest::Approx(13 + 4 * one));
  // The planner counts only layer 0's all-reduce after the backward; here
  // the queue of earlier layers' all-reduces makes more of it exposed.
  CHECK(r.sync_exposed_ms == doctest::Approx(13 + 4 * one - 16));
  CHECK(r.sync_exposed_ms > plan.sync_ms);

  SUBCASE("handed over after the whole backward, every all-reduce is exposed") {
    options.gradient_sync = GradientSync::after_backward;
    const IterationResult late = simulate_iteration(cost, plan, options);
    std::vector<OpRecord> after;
    for (const auto& op : late.ops) {
      if (op.kind == OpKind::allreduce) after.push_back(op);
    }
    REQUIRE(after.size() == 4);
    CHECK(after[0].start_ms == doctest::Approx(16));  // once the last backward ends
    CHECK(late.iteration_ms == doctest::Approx(16 + 4 * one));
    CHECK(late.sync_exposed_ms == doctest::Approx(4 * one));
  }

  SUBCASE("with small gradients only the last layer's all-reduce is exposed, as the planner assumes") {
    const Profile small = profile_of(std::vector<LayerCost>(4, {1, 1}), 0, 0, Bytes{1} << 20);
    const CostModel small_cost(small, 2);
    const Plan small_plan = plan_of(small_cost, {{0, 4}, {0, 4}}, {2, 2});
    const IterationResult s = simulate_iteration(small_cost, small_plan);
    CHECK(s.sync_exposed_ms == doctest::Approx(small_plan.sync_ms));
    CHECK(s.iteration_ms == doctest::Approx(small_plan.iteration_ms));
  }
}

TEST_CASE("iteration: a pipeline given no microbatch (its passes kept) all-reduces its gradients at once") {
  // A resumed step: pipeline 1 kept its passes and trains nothing. Its
  // gradients are there from the start, so every all-reduce starts when
  // pipeline 0's layer is ready, as when both trained alike: the same
  // iteration, and the planner's price is the same too.
  const Profile profile = profile_of(std::vector<LayerCost>(6, {1, 2}), 1 << 20, 0.1, Bytes{40} << 20);
  const CostModel cost(profile, 4);
  for (const auto& cuts : {std::vector<int>{0, 6}, std::vector<int>{0, 2, 6}, std::vector<int>{0, 1, 3, 6}}) {
    CAPTURE(cuts.size());
    const Plan both = plan_of(cost, {cuts, cuts}, {4, 4});
    Plan one_kept = both;
    one_kept.pipelines[1].microbatches = 0;
    IterationOptions options;
    options.gradient_norm = true;
    const IterationResult full = simulate_iteration(cost, both, options);
    const IterationResult resumed = simulate_iteration(cost, one_kept, options);
    CHECK(resumed.iteration_ms == doctest::Approx(full.iteration_ms).epsilon(1e-12));
    CHECK(resumed.last_backward_ms == full.last_backward_ms);
    CHECK(iteration_ms_at_speeds(cost, one_kept, {}) == doctest::Approx(iteration_ms_at_speeds(cost, both, {})));
    Milliseconds last_pass = 0;
    for (const auto& st : resumed.stages) {
      if (st.pipeline == 1) {
        CHECK(st.passes_end_ms == 0);
        CHECK(st.compute_ms == 0);
      } else {
        CHECK(st.passes_end_ms > 0);
        CHECK(st.passes_end_ms <= st.finished_ms);
        last_pass = std::max(last_pass, st.passes_end_ms);
      }
      CHECK(st.finished_ms > 0);  // every stage steps
    }
    CHECK(last_pass == resumed.last_backward_ms);
  }
  // Both kept: nothing to train, only the all-reduces and the steps.
  Plan none = plan_of(cost, {{0, 6}, {0, 6}}, {0, 0});
  const IterationResult r = simulate_iteration(cost, none);
  CHECK(r.last_backward_ms == 0);
  CHECK(r.iteration_ms > 0);
  CHECK(r.iteration_ms < simulate_iteration(cost, plan_of(cost, {{0, 6}, {0, 6}}, {1, 1})).iteration_ms);
}

TEST_CASE("iteration: the optimizer step follows the stage's all-reduces") {
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 1}));
  const CostModel cost(profile, 3);
  const Plan plan = plan_of(cost, {{0, 2, 4}}, {3});
  IterationOptions options;
  options.optimizer_bytes_per_s = 1e12;
  const IterationResult with = simulate_iteration(cost, plan, options);
  const IterationResult without = simulate_iteration(cost, plan);
  const double step = 2.0 * static_cast<double>(cost.state_bytes(0, 2)) / 1e12 * 1000.0;
  CHECK(with.stages[0].optimizer_ms == doctest::Approx(step));
  // Stage 0 finishes last (it runs the last backward), then steps.
  CHECK(with.iteration_ms == doctest::Approx(without.iteration_ms + step));
}

TEST_CASE("iteration: chrome trace lists every op once, without overlaps on a stage") {
  const Profile profile = profile_of(std::vector<LayerCost>(6, {1, 2}), 1 << 24, 0.05);
  const CostModel cost(profile, 4);
  const Plan plan = plan_of(cost, {{0, 2, 4, 6}, {0, 3, 6}}, {4, 3});
  IterationOptions options;
  options.record_ops = true;
  options.optimizer_bytes_per_s = 1e12;
  const IterationResult r = simulate_iteration(cost, plan, options);
  const auto trace = nlohmann::json::parse(chrome_trace_json(r, plan, profile));
  int forwards = 0, backwards = 0;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> by_thread;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    CHECK(e["ts"].get<double>() >= 0);
    CHECK(e["dur"].get<double>() >= 0);
    const std::string name = e["name"];
    if (name[0] == 'F') ++forwards;
    if (name[0] == 'B') ++backwards;
    CHECK(!name.starts_with("TP"));  // degree 1: no tensor-parallel all-reduces
    by_thread[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(e["ts"].get<double>(),
                                                                        e["ts"].get<double>() + e["dur"].get<double>());
  }
  CHECK(forwards == 3 * 4 + 2 * 3);
  CHECK(backwards == forwards);
  for (auto& [thread, spans] : by_thread) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].first >= spans[i - 1].second - 1e-6);
  }
  // Same inputs, same bytes.
  CHECK(chrome_trace_json(simulate_iteration(cost, plan, options), plan, profile) == chrome_trace_json(r, plan, profile));
  CHECK(iteration_to_json(r, plan) == iteration_to_json(simulate_iteration(cost, plan, options), plan));
}

TEST_CASE("iteration: simulating one pipeline per distinct layout gives what simulating all of them gives") {
  std::mt19937_64 random(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int layers = 4 + static_cast<int>(random() % 6);
    std::vector<LayerCost> costs;
    for (int l = 0; l < layers; ++l) costs.push_back({1.0 + static_cast<double>(random() % 4), 2.0 + static_cast<double>(random() % 6)});
    const Profile profile = profile_of(costs, Bytes{1} << 26, 0.02, Bytes{64} << 20);
    // A few layouts, each used by several pipelines.
    std::vector<std::vector<int>> layouts = {{0, layers / 2, layers}, {0, 1, layers - 1, layers}, {0, layers}};
    std::vector<std::vector<int>> cuts;
    std::vector<int> microbatches;
    const int pipelines = 2 + static_cast<int>(random() % 6);
    for (int p = 0; p < pipelines; ++p) {
      cuts.push_back(layouts[random() % layouts.size()]);
      microbatches.push_back(1 + static_cast<int>(random() % 3));
    }
    const CostModel cost(profile, 2);
    const Plan plan = plan_of(cost, cuts, microbatches);
    IterationOptions all;
    all.record_ops = true;  // simulates every pipeline
    all.optimizer_bytes_per_s = 1e12;
    IterationOptions grouped = all;
    grouped.record_ops = false;
    const IterationResult a = simulate_iteration(cost, plan, all);
    const IterationResult b = simulate_iteration(cost, plan, grouped);
    CHECK(a.iteration_ms == b.iteration_ms);
    CHECK(a.sync_exposed_ms == b.sync_exposed_ms);
    REQUIRE(a.stages.size() == b.stages.size());
    for (std::size_t i = 0; i < a.stages.size(); ++i) {
      CHECK(a.stages[i].node == b.stages[i].node);
      CHECK(a.stages[i].compute_ms == b.stages[i].compute_ms);
      CHECK(a.stages[i].finished_ms == b.stages[i].finished_ms);
    }
    CHECK(b.events <= a.events);
  }
}

TEST_CASE("iteration: workers sharing one device take turns on it") {
  // Two pipelines of one stage, 4 layers of 1 + 2 ms, 3 microbatches each:
  // alone each takes 3 x 12 ms; on one device the two take turns, 72 ms.
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 2}), 0, 0, 1);
  const CostModel cost(profile, 3);
  const Plan plan = plan_of(cost, {{0, 4}, {0, 4}}, {3, 3});
  const IterationResult apart = simulate_iteration(cost, plan);
  IterationOptions shared;
  shared.shared_device = true;
  shared.record_ops = true;
  const IterationResult together = simulate_iteration(cost, plan, shared);
  CHECK(apart.last_backward_ms == doctest::Approx(36));
  CHECK(together.last_backward_ms == doctest::Approx(72));
  // Never two passes at once, in any pipeline.
  std::vector<std::pair<double, double>> passes;
  for (const auto& op : together.ops) {
    if (op.kind == OpKind::forward || op.kind == OpKind::backward) passes.emplace_back(op.start_ms, op.end_ms);
  }
  std::sort(passes.begin(), passes.end());
  REQUIRE(passes.size() == 12);
  for (std::size_t i = 1; i < passes.size(); ++i) CHECK(passes[i].first >= passes[i - 1].second - 1e-9);

  SUBCASE("a two-stage pipeline on one device is as slow as its work added up") {
    const Plan one = plan_of(cost, {{0, 2, 4}}, {4});
    const IterationResult r = simulate_iteration(cost, one, shared);
    CHECK(r.last_backward_ms == doctest::Approx(4 * 12));  // every pass of both stages, one after another
  }
}

TEST_CASE("iteration: tied embeddings add the first and last stages' all-reduce; the gradient scale its bytes") {
  // One pipeline of two stages: without tying nothing is all-reduced (each
  // layer has one holder); tied, the embedding and the head's gradients are
  // summed between the two stages once the first stage's backward is done.
  const Bytes bytes = Bytes{100} << 20;
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 1}), 0, 0, bytes);
  const CostModel cost(profile, 2);
  const Plan plan = plan_of(cost, {{0, 2, 4}}, {2});
  const IterationResult untied = simulate_iteration(cost, plan);
  CHECK(untied.sync_exposed_ms == 0);
  IterationOptions tied;
  tied.tied_embedding = true;
  const IterationResult r = simulate_iteration(cost, plan, tied);
  const double both_ends = cost.allreduce_ms(2.0 * static_cast<double>(bytes), 2, profile.hardware.inter_node_bytes_per_s);
  CHECK(r.last_backward_ms == untied.last_backward_ms);
  CHECK(r.iteration_ms == doctest::Approx(untied.last_backward_ms + both_ends));

  tied.gradient_scale = 2;
  const IterationResult doubled = simulate_iteration(cost, plan, tied);
  const double twice = cost.allreduce_ms(4.0 * static_cast<double>(bytes), 2, profile.hardware.inter_node_bytes_per_s);
  CHECK(doubled.iteration_ms == doctest::Approx(untied.last_backward_ms + twice));

  SUBCASE("a measured all-reduce bandwidth in the profile replaces the links'") {
    Profile measured = profile;
    measured.hardware.allreduce_bytes_per_s = profile.hardware.inter_node_bytes_per_s / 4;
    const CostModel measured_cost(measured, 2);
    tied.gradient_scale = 1;
    const IterationResult slow = simulate_iteration(measured_cost, plan, tied);
    const double quarter = cost.allreduce_ms(2.0 * static_cast<double>(bytes), 2, measured.hardware.allreduce_bytes_per_s);
    CHECK(slow.iteration_ms == doctest::Approx(untied.last_backward_ms + quarter));
    const Profile again = parse_profile(profile_to_json(measured), "again.json");
    CHECK(again.hardware.allreduce_bytes_per_s == measured.hardware.allreduce_bytes_per_s);
  }
}

namespace {

// One pipeline of the given stages on nodes n0, n1, ...
Plan plan_with_stages(const CostModel& cost, const std::vector<Stage>& stages, int microbatches) {
  Pipeline pipeline;
  pipeline.stages = stages;
  for (int n = 0; n <= stages.back().node; ++n) pipeline.nodes.push_back(std::string("n").append(std::to_string(n)));
  pipeline.template_nodes = static_cast<int>(pipeline.nodes.size());
  pipeline.microbatches = microbatches;
  pipeline.iteration_ms = cost.pipeline_ms(stages, microbatches);
  Plan plan;
  plan.global_microbatches = microbatches;
  plan.pipelines_ms = plan.iteration_ms = pipeline.iteration_ms;
  plan.pipelines.push_back(std::move(pipeline));
  return plan;
}

std::vector<OpRecord> ops_of(const IterationResult& r, OpKind kind) {
  std::vector<OpRecord> out;
  std::copy_if(r.ops.begin(), r.ops.end(), std::back_inserter(out),
               [kind](const OpRecord& op) { return op.kind == kind; });
  return out;
}

// Two GPUs per node, four layers of F = 2, B = 4 with 16 MiB outputs, M = 3.
// Node 0 holds stage 0 (layers 0-1) at degree 2; node 1 holds stages 1 and 2
// (layers 2 and 3) at degree 1 each. The model: each pass of a stage at
// degree 2 is its compute (F/2, B/2 per layer), then one TP op for all the
// pass's all-reduces, two per split layer: 2 x 2 AR(16 MiB, 2 GPUs).
struct TensorParallelCase {
  static constexpr int M = 3;
  static constexpr Bytes output = Bytes{1} << 24;
  Profile profile = profile_of(std::vector<LayerCost>(4, {2, 4}), output, 0.01, Bytes{1} << 20, 2);
  CostModel cost{profile, M};
  Plan plan = plan_with_stages(cost, {{0, 2, 2, 0}, {2, 3, 1, 1}, {3, 4, 1, 1}}, M);
  IterationOptions options;
  // One ring all-reduce of a layer's output between the two GPUs of a node.
  double ring = 2.0 * 1 / 2 * static_cast<double>(output) / 100e9 * 1000 + 2 * 1 * 0.01;
  double pass_allreduce = 2 * 2 * ring;  // two layers, two all-reduces each
  TensorParallelCase() { options.record_ops = true; }
};

}  // namespace

TEST_CASE("iteration: a tensor-parallel stage's passes are compute, then one op with the pass's all-reduces") {
  const TensorParallelCase c;
  const int M = c.M;
  const IterationResult r = simulate_iteration(c.cost, c.plan, c.options);
  const auto forward_tp = ops_of(r, OpKind::tp_allreduce_forward);
  const auto backward_tp = ops_of(r, OpKind::tp_allreduce_backward);
  REQUIRE(forward_tp.size() == M);  // one per pass, on stage 0 only
  REQUIRE(backward_tp.size() == M);
  const auto forwards = ops_of(r, OpKind::forward);
  for (const auto& tp : forward_tp) {
    CHECK(tp.stage == 0);
    CHECK(tp.end_ms - tp.start_ms == doctest::Approx(c.pass_allreduce));
    // Right after its forward's compute (F/2 per layer), on the stage's lane.
    const auto f = std::find_if(forwards.begin(), forwards.end(),
                                [&](const OpRecord& op) { return op.stage == 0 && op.index == tp.index; });
    REQUIRE(f != forwards.end());
    CHECK(f->end_ms - f->start_ms == doctest::Approx(2.0));
    CHECK(tp.start_ms == f->end_ms);
  }
  for (const auto& tp : backward_tp) CHECK(tp.end_ms - tp.start_ms == doctest::Approx(c.pass_allreduce));
  CHECK(r.stages[0].tp_allreduces_per_pass == 4);
  CHECK(r.stages[0].tp_allreduce_ms == doctest::Approx(2 * M * c.pass_allreduce));
  CHECK(r.stages[0].compute_ms == doctest::Approx(M * (2.0 + 4.0)));
  CHECK(r.stages[1].tp_allreduce_ms == 0);
  CHECK(r.stages[0].compute_ms + r.stages[0].tp_allreduce_ms + r.stages[0].idle_ms == doctest::Approx(r.iteration_ms));

  // Iteration time as before the split: the same plan at degree 1 with layers
  // 0-1 costing their degree-2 totals, and its one network card twice as
  // fast as each of the degree-2 stage's two, plays exactly the same schedule.
  Profile totals = c.profile;
  for (int l : {0, 1}) {
    totals.layers[l].forward_ms = 1 + 2 * c.ring;
    totals.layers[l].backward_ms = 2 + 2 * c.ring;
  }
  totals.hardware.inter_node_bytes_per_s *= 2;
  const CostModel totals_cost(totals, M);
  CHECK(c.cost.stage_forward_ms(0, 2, 2) == totals_cost.stage_forward_ms(0, 2, 1));
  const Plan flat = plan_with_stages(totals_cost, {{0, 2, 1, 0}, {2, 3, 1, 1}, {3, 4, 1, 1}}, M);
  const IterationResult before = simulate_iteration(totals_cost, flat, c.options);
  CHECK(r.iteration_ms == before.iteration_ms);
  CHECK(r.events == before.events);
  CHECK(ops_of(before, OpKind::tp_allreduce_forward).empty());  // degree 1: no TP ops
  CHECK(ops_of(before, OpKind::tp_allreduce_backward).empty());
  CHECK(before.stages[0].tp_allreduces_per_pass == 0);

  SUBCASE("a layer the profile shows replicated at degree 2 has no all-reduces") {
    Profile replicated = c.profile;
    replicated.layers[0].tensor_parallel.push_back({2, 2, 4});  // as fast as at degree 1: computed whole
    const CostModel replicated_cost(replicated, M);
    const IterationResult s = simulate_iteration(replicated_cost, c.plan, c.options);
    CHECK(s.stages[0].tp_allreduces_per_pass == 2);
    for (const auto& tp : ops_of(s, OpKind::tp_allreduce_forward)) {
      CHECK(tp.end_ms - tp.start_ms == doctest::Approx(2 * c.ring));
    }
    CHECK(s.stages[0].compute_ms == doctest::Approx(M * (2 + 1 + 4 + 2)));
  }
}

TEST_CASE("iteration: stages on one node hand over at the intra-node bandwidth, across nodes over the cards of the stage before") {
  const TensorParallelCase c;
  const IterationResult r = simulate_iteration(c.cost, c.plan, c.options);
  // Stage 0 -> 1 crosses nodes, both ways over stage 0's two GPUs' cards;
  // stages 1 and 2 share node 1.
  REQUIRE(c.plan.pipelines[0].stages[0].gpus == 2);
  const double inter = static_cast<double>(c.output) / (2 * 10e9) * 1000 + 0.01;
  const double intra = static_cast<double>(c.output) / 100e9 * 1000 + 0.01;
  CHECK(c.cost.transfer_ms(3, true) == doctest::Approx(intra));
  for (const auto& send : ops_of(r, OpKind::send_activation)) {
    CHECK(send.end_ms - send.start_ms == doctest::Approx(send.stage == 0 ? inter : intra));
  }
  for (const auto& send : ops_of(r, OpKind::send_gradient)) {
    CHECK(send.end_ms - send.start_ms == doctest::Approx(send.stage == 1 ? inter : intra));
  }
}

TEST_CASE("iteration: the trace names TP all-reduces and links; the summary shows node, degree, TP time") {
  const TensorParallelCase c;
  const IterationResult r = simulate_iteration(c.cost, c.plan, c.options);
  const auto trace = nlohmann::json::parse(chrome_trace_json(r, c.plan, c.profile));
  int tp_spans = 0, intra_spans = 0, inter_spans = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    if (name.starts_with("TP all-reduce ")) {
      ++tp_spans;
      CHECK(e["tid"] == 0);
      CHECK(e["args"]["allreduces"] == 4);
      const std::string microbatch = std::to_string(e["args"]["microbatch"].get<int>());
      CHECK((name == "TP all-reduce F" + microbatch || name == "TP all-reduce B" + microbatch));
    } else if (e["args"].contains("link")) {
      const bool same_node = e["args"]["link"] == "intra-node";
      ++(same_node ? intra_spans : inter_spans);
      CHECK(name.ends_with(same_node ? " (intra-node)" : " (inter-node)"));
    }
  }
  CHECK(tp_spans == 2 * c.M);
  CHECK(intra_spans == 2 * c.M);  // stage 1 -> 2 activations, 2 -> 1 gradients
  CHECK(inter_spans == 2 * c.M);
  const auto json = nlohmann::json::parse(iteration_to_json(r, c.plan));
  CHECK(json["stages"][2]["node"] == "n1");
  CHECK(json["stages"][2]["node_index"] == 1);
  CHECK(json["stages"][0]["tp_degree"] == 2);
  CHECK(json["stages"][0]["tp_allreduces_per_pass"] == 4);
  CHECK(json["stages"][0]["tp_allreduce_ms"].get<double>() == doctest::Approx(2 * c.M * c.pass_allreduce));
}

TEST_CASE("iteration: a node's send delay adds to what it sends and to each ring step of its all-reduces") {
  SUBCASE("one microbatch through two stages: the delayed node's one transfer") {
    const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 2}), 1 << 20, 0.5);
    const CostModel cost(profile, 1);
    const Plan plan = plan_of(cost, {{0, 2, 4}}, {1});
    const IterationResult plain = simulate_iteration(cost, plan);
    for (const std::string node : {"n0", "n1"}) {
      CAPTURE(node);
      IterationOptions options;
      options.node_send_delay_ms = {{node, 37.5}};
      // n0 sends the activation, n1 the gradient back: one each.
      CHECK(simulate_iteration(cost, plan, options).iteration_ms == doctest::Approx(plain.iteration_ms + 37.5));
    }
    IterationOptions elsewhere;
    elsewhere.node_send_delay_ms = {{"not-in-the-plan", 1000}};
    CHECK(simulate_iteration(cost, plan, elsewhere).iteration_ms == plain.iteration_ms);
  }
  SUBCASE("k one-stage pipelines: each layer's ring of k takes 2(k - 1) steps longer") {
    for (int k = 2; k <= 5; ++k) {
      CAPTURE(k);
      const Profile profile = profile_of(std::vector<LayerCost>(3, {1, 1}), 0, 0.25);
      const CostModel cost(profile, 2);
      const Plan plan = plan_of(cost, std::vector<std::vector<int>>(static_cast<std::size_t>(k), {0, 3}),
                                std::vector<int>(static_cast<std::size_t>(k), 2));
      const IterationResult plain = simulate_iteration(cost, plan);
      IterationOptions options;
      options.node_send_delay_ms = {{"n1", 10}, {"n0", 4}};  // the slowest sender sets each step
      const IterationResult delayed = simulate_iteration(cost, plan, options);
      CHECK(delayed.last_backward_ms == plain.last_backward_ms);  // no transfers
      CHECK(delayed.iteration_ms == doctest::Approx(plain.iteration_ms + 2 * (k - 1) * 10.0));
    }
  }
}

TEST_CASE("iteration: the gradient norm is one all-reduce among every trainer before any optimizer step") {
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 1}), 0, 0.5);
  const CostModel cost(profile, 2);
  const Plan plan = plan_of(cost, {{0, 2, 4}, {0, 2, 4}}, {2, 2});
  const IterationResult plain = simulate_iteration(cost, plan);
  IterationOptions options;
  options.gradient_norm = true;
  const IterationResult normed = simulate_iteration(cost, plan, options);
  // Four trainers, one number: 2 x 3 ring steps of latency, and 8 bytes.
  const double norm = cost.allreduce_ms(8, 4, profile.hardware.gradient_allreduce_bytes_per_s());
  CHECK(norm == doctest::Approx(6 * 0.5 + 1.5 * 8 / 10e9 * 1000));
  CHECK(normed.iteration_ms == doctest::Approx(plain.iteration_ms + norm));
  for (const auto& st : normed.stages) CHECK(st.finished_ms == doctest::Approx(normed.iteration_ms));
  IterationOptions delayed = options;
  delayed.node_send_delay_ms = {{"n3", 20}};
  // n3 holds layers 2..3 with n1: their ring of 2 waits 2 x 20 ms; the norm's ring of 4, 6 x 20 ms.
  CHECK(simulate_iteration(cost, plan, delayed).iteration_ms >= normed.iteration_ms + 6 * 20.0);
}

TEST_CASE("iteration: a stage that recomputes runs its forward again in each backward, as the planner prices it") {
  for (int S = 1; S <= 4; ++S) {
    for (int M = 1; M <= 6; ++M) {
      CAPTURE(S);
      CAPTURE(M);
      const Profile profile = profile_of(std::vector<LayerCost>(2 * S, {1.5, 2.75}));
      const CostModel cost(profile, M);
      Plan plan = plan_of(cost, {even_cuts(S, 2)}, {M});
      for (auto& st : plan.pipelines[0].stages) st.recompute = Recompute::full;
      const IterationResult r = simulate_iteration(cost, plan);
      // Equal stages, no transfers: (M + S - 1)(F + B + F), exactly the formula's.
      CHECK(r.iteration_ms == doctest::Approx((M + S - 1) * (3.0 + 5.5 + 3.0)));
      CHECK(r.iteration_ms == doctest::Approx(cost.pipeline_ms(plan.pipelines[0].stages, M)));
    }
  }
  // Selectively: the attention core's forward (0.5 ms a layer) again.
  Profile with_attention = profile_of(std::vector<LayerCost>(4, {1.5, 2.75}));
  for (auto& layer : with_attention.layers) layer.attention_forward_ms = 0.5;
  const CostModel attention_cost(with_attention, 3);
  Plan selective = plan_of(attention_cost, {even_cuts(2, 2)}, {3});
  for (auto& st : selective.pipelines[0].stages) st.recompute = Recompute::selective;
  const IterationResult r = simulate_iteration(attention_cost, selective);
  CHECK(r.iteration_ms == doctest::Approx((3 + 2 - 1) * (3.0 + 5.5 + 1.0)));
  CHECK(r.iteration_ms == doctest::Approx(attention_cost.pipeline_ms(selective.pipelines[0].stages, 3)));
  // Two one-stage pipelines: each layer's gradient is ready after its
  // forward again and its backward, so the last all-reduce starts F later.
  const Profile profile = profile_of(std::vector<LayerCost>(4, {1, 1}), 0, 0, Bytes{1} << 20);
  const CostModel cost(profile, 2);
  Plan plan = plan_of(cost, {{0, 4}, {0, 4}}, {2, 2});
  const IterationResult plain = simulate_iteration(cost, plan);
  for (auto& p : plan.pipelines) p.stages[0].recompute = Recompute::full;
  const IterationResult again = simulate_iteration(cost, plan);
  CHECK(again.last_backward_ms == doctest::Approx(plain.last_backward_ms + 2 * 4 * 1.0));
  CHECK(again.sync_exposed_ms == doctest::Approx(plain.sync_exposed_ms));
}

TEST_CASE("iteration: interleaved 1F1B: v chunks a device shrink the bubble to (p - 1)(F + B) / v") {
  // p devices each holding v chunks of the model: p v equal virtual stages,
  // each with 1/v of a device's forward F and backward B, no transfers.
  for (const int p : {2, 4}) {
    for (const int v : {1, 2, 3}) {
      for (const int M : {p, 2 * p, 4 * p}) {
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(M);
        const double F = 1.2, B = 2.4;
        const Profile profile = profile_of(std::vector<LayerCost>(p * v, {F / v, B / v}));
        const CostModel cost(profile, M);
        const Plan plan = plan_of(cost, {even_cuts(p * v, 1)}, {M});
        IterationOptions options;
        options.interleave = v;
        const IterationResult r = simulate_iteration(cost, plan, options);
        CHECK(r.iteration_ms == doctest::Approx(M * (F + B) + (p - 1) * (F + B) / v));
        // Each device busy M (F + B) in all.
        for (int d = 0; d < p; ++d) {
          double busy = 0;
          for (int s = d; s < p * v; s += p) busy += r.stages[s].compute_ms;
          CHECK(busy == doctest::Approx(M * (F + B)));
        }
      }
    }
  }
  const Profile profile = profile_of(std::vector<LayerCost>(6, {1, 2}));
  const CostModel cost(profile, 4);
  const Plan plan = plan_of(cost, {even_cuts(3, 2)}, {4});
  IterationOptions options;
  options.interleave = 2;
  CHECK_THROWS_WITH_AS((void)simulate_iteration(cost, plan, options),
                       "plan: pipeline 0 has 3 stages, not a multiple of the interleave 2", InputError);
}

TEST_CASE("interleaved 1F1B with any number of microbatches: every pass runs, none waits forever") {
  // Microbatches in groups of the device count, the last group the rest:
  // played for every count from 1 on, the schedule never deadlocks, and
  // the iteration is at least every device's work and at least the first
  // microbatch's round trip.
  const Profile profile = profile_of(std::vector<LayerCost>(24, {1.0, 2.0}));
  int played = 0;
  for (int devices = 1; devices <= 5; ++devices) {
    for (int chunks = 1; chunks <= 4; ++chunks) {
      if (devices * chunks > 24) continue;
      for (int microbatches = 1; microbatches <= 13; ++microbatches) {
        CAPTURE(devices);
        CAPTURE(chunks);
        CAPTURE(microbatches);
        const CostModel cost(profile, microbatches);
        Plan plan;
        Pipeline pipeline;
        pipeline.microbatches = microbatches;
        pipeline.interleave = chunks;
        pipeline.template_nodes = devices;
        const int S = devices * chunks;
        for (int n = 0; n < devices; ++n) {
          std::string name = "n";
          name += std::to_string(n);
          pipeline.nodes.push_back(name);
        }
        for (int j = 0; j < S; ++j) pipeline.stages.push_back({j * 24 / S, (j + 1) * 24 / S, 1, j % devices});
        plan.pipelines.push_back(pipeline);
        plan.global_microbatches = microbatches;
        const IterationResult result = simulate_iteration(cost, plan, {});
        const double device_work = 3.0 * 24 / devices * microbatches;
        CHECK(result.iteration_ms >= device_work - 1e-9);
        CHECK(result.iteration_ms >= 3.0 * 24 - 1e-9);
        ++played;
      }
    }
  }
  CHECK(played > 200);
}
