// The planner's predicted iteration against the iteration the simulator
// plays op by op, for the plans the planner chooses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/iteration.h"
#include "replay_fixtures.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::replay_fixtures;

namespace {

std::vector<std::string> node_names(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back("node" + std::to_string(i));
  return names;
}

struct Agreement {
  Plan plan;
  IterationResult played;
};

Agreement plan_and_play(const Profile& profile, int nodes, int f, int B,
                        GradientSync sync = GradientSync::per_layer,
                        double bucket_bytes = kDefaultGradientBucketBytes, int tensor_parallel_nodes = 1,
                        int pipelines_per_node = 1, int interleave = 1) {
  const ClusterPlan cluster = plan_cluster(profile, node_names(nodes), f, B, 0, {}, RecomputePolicy::none, sync,
                                           bucket_bytes, tensor_parallel_nodes, pipelines_per_node, interleave);
  CostModel cost(profile, cluster.templates.microbatches);
  cost.set_pipelines_per_node(cluster.plan.pipelines_per_node);
  IterationOptions options;
  options.optimizer_bytes_per_s = cost.optimizer_bytes_per_s();  // the profile's, as oobleck-sim plays it
  options.gradient_sync = cluster.plan.gradient_sync;
  options.gradient_bucket_bytes = cluster.plan.gradient_bucket_bytes;
  return {cluster.plan, simulate_iteration(cost, cluster.plan, options)};
}

}  // namespace

TEST_CASE("planner and simulator: the synchronisation tail of one-template plans is the simulated one") {
  // 1.3B on A100 nodes: every pipeline of one template, ending together.
  const Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-a100.analytic.json");
  int compared = 0;
  // Buckets of 25 MiB hold one 1.3B block (100 MB) each; of 400 MiB, four.
  const std::vector<std::pair<GradientSync, double>> modes = {{GradientSync::per_layer, 0},
                                                              {GradientSync::after_backward, 0},
                                                              {GradientSync::buckets, 25.0 * (1 << 20)},
                                                              {GradientSync::buckets, 400.0 * (1 << 20)}};
  for (const int nodes : {64, 256, 512, 2048}) {
   for (const auto& mode : modes) {
    const GradientSync sync = mode.first;
    const double bucket_bytes = mode.second;
    CAPTURE(nodes);
    CAPTURE(gradient_sync_name(sync));
    CAPTURE(bucket_bytes);
    const Agreement a = plan_and_play(profile, nodes, 1, 4096, sync,
                                      bucket_bytes > 0 ? bucket_bytes : kDefaultGradientBucketBytes);
    CHECK(a.plan.gradient_sync == sync);
    bool one_template = true;
    for (const auto& p : a.plan.pipelines) one_template &= p.template_nodes == a.plan.pipelines[0].template_nodes;
    // (plans of two templates are not compared)
    if (!one_template) continue;
    ++compared;
    // What follows the last backward: the all-reduces, then each stage's optimizer step.
    CHECK(a.plan.sync_ms == doctest::Approx(a.played.iteration_ms - a.played.last_backward_ms).epsilon(0.01));
   }
  }
  CHECK(compared >= 10);
}

TEST_CASE("planner and simulator: the predicted iteration against the played one on every bundled profile, 8 to 2048 nodes, f = 0 to 4, B = 512 and 4096") {
  // Every pipeline holds every layer, so each layer's all-reduce waits for
  // the slowest pipeline: the planner prices the synchronised iteration
  // (planner/src/synced_iteration.h) and chooses its plans for the slowest
  // pipeline plus the longest tail among the templates it mixes; each
  // pipeline's period counts every run of consecutive stages, as 1F1B
  // cycles through them (planner/src/steady_period.h).
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kRoot / "profiles")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 30);
  int cases = 0, within = 0, unsteady = 0;
  double error_sum = 0, worst = 0;
  for (const auto& file : files) {
    const Profile profile = load_profile(file);
    // Small batches leave the optimizer step a larger share of the iteration.
    for (const int B : {512, 4096}) {
     for (const int nodes : {8, 64, 512, 2048}) {
      std::size_t pipelines_at_f0 = 0;
      for (const int f : {0, 1, 2, 3, 4}) {
        // A plan of f + 1 pipelines or more at f = 0 is also the plan at f.
        if (f > 0 && pipelines_at_f0 >= static_cast<std::size_t>(f + 1)) continue;
        CAPTURE(file.filename().string());
        CAPTURE(B);
        CAPTURE(nodes);
        CAPTURE(f);
        Agreement a;
        try {
          a = plan_and_play(profile, nodes, f, B);
        } catch (const NoPlanError&) {
          continue;  // too few nodes for f + 1 pipelines of this model
        }
        if (f == 0) pipelines_at_f0 = a.plan.pipelines.size();
        const double error = std::abs(a.plan.iteration_ms / a.played.iteration_ms - 1);
        // Each pipeline priced as it plays (planner/src/played_pipeline.h),
        // also where it has no more microbatches than stages and never
        // reaches 1F1B's steady state.
        CHECK(error <= 0.01);
        bool steady = true;
        for (const auto& p : a.plan.pipelines) steady &= p.microbatches > static_cast<int>(p.stages.size());
        ++cases;
        within += error <= 0.05;
        unsteady += !steady;
        error_sum += error;
        worst = std::max(worst, error);
      }
     }
    }
  }
  MESSAGE(cases << " plans: mean error " << 100 * error_sum / cases << " %, " << within << " within 5 %, worst "
                << 100 * worst << " %; " << unsteady << " with a pipeline of no more microbatches than stages");
  CHECK(cases >= 300);
  CHECK(error_sum / cases <= 0.001);
  CHECK(unsteady >= 50);
  CHECK(within == cases);
}

TEST_CASE("planner and simulator: where transfers are long, 1F1B's round trip paces both") {
  // One H200 per node, its links measured at 3 GB/s: a block's 16 MiB output
  // takes 5.7 ms to cross, against 5 to 17 ms of compute per stage. The
  // planner prices the round trip (steady_period.h), which the simulator
  // plays; priced at the slowest stage alone it predicted 38 % short.
  const Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-h200-mb1-bf16.measured.json");
  for (const int nodes : {8, 64, 512}) {
    CAPTURE(nodes);
    const Agreement a = plan_and_play(profile, nodes, 0, 4096);
    CHECK(a.plan.pipelines_ms == doctest::Approx(a.played.last_backward_ms).epsilon(0.01));
  }
}

TEST_CASE("planner and simulator: a measured gradient all-reduce table prices both alike") {
  // The law's shape measured 1.6x slower at 2 ranks: the planner and the
  // simulator both price every layer's all-reduce from the table.
  Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-a100.analytic.json");
  const Hardware& hw = profile.hardware;
  for (const double bytes : {1e5, 1e7, 1e9}) {
    profile.hardware.allreduce_table.push_back(
        {2, bytes, 1.6 * ring_allreduce_ms(bytes, 2, hw.gradient_allreduce_bytes_per_s(), hw.latency_ms)});
  }
  Profile lawful = profile;
  lawful.hardware.allreduce_table.clear();
  for (const int nodes : {64, 512}) {
    CAPTURE(nodes);
    const Agreement a = plan_and_play(profile, nodes, 1, 4096);
    CHECK(a.plan.iteration_ms == doctest::Approx(a.played.iteration_ms).epsilon(0.05));
    // The same plan without the table synchronises faster.
    const CostModel by_law(lawful, a.plan.template_microbatches);
    IterationOptions options;
    options.optimizer_bytes_per_s = by_law.optimizer_bytes_per_s();
    const IterationResult without = simulate_iteration(by_law, a.plan, options);
    CHECK(a.played.sync_exposed_ms > without.sync_exposed_ms);
  }
}

TEST_CASE("planner and simulator: stages over whole nodes, their all-reduces across nodes, priced alike") {
  // Llama 3 70B's costs on H100 nodes, any degree allowed
  // (replay_fixtures.h): with stages over two nodes (16 GPUs) the planner
  // finds a faster plan than within nodes; the simulator plays its
  // hierarchical all-reduces op by op.
  const Profile& profile = llama3_70b_any_degree();
  int spanning_plans = 0;
  for (const int nodes : {64, 128}) {
    const Agreement within = plan_and_play(profile, nodes, 1, 512);
    for (const int k : {2, 4}) {
      CAPTURE(nodes);
      CAPTURE(k);
      const Agreement a = plan_and_play(profile, nodes, 1, 512, GradientSync::per_layer, kDefaultGradientBucketBytes, k);
      CHECK(a.plan.tensor_parallel_nodes == k);
      bool spans = false;
      for (const auto& p : a.plan.pipelines) {
        for (const auto& st : p.stages) spans |= st.node_span > 1;
      }
      spanning_plans += spans;
      CHECK(a.plan.iteration_ms <= within.plan.iteration_ms * (1 + 1e-9));
      CHECK(a.plan.iteration_ms == doctest::Approx(a.played.iteration_ms).epsilon(0.05));
      if (spans) CHECK(a.played.iteration_ms < within.played.iteration_ms);
      MESSAGE(nodes << " nodes, stages over up to " << k << ": planned " << a.plan.iteration_ms << " ms, played "
                    << a.played.iteration_ms << " ms; within nodes played " << within.played.iteration_ms << " ms");
    }
  }
  CHECK(spanning_plans >= 2);
}


TEST_CASE("planner and simulator: pipelines sharing nodes, on every bundled profile of several GPUs a node, priced alike") {
  // r pipelines on every node, each on G / r GPUs: the simulator plays
  // their passes and their all-reduces, inside each node and then across.
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kRoot / "profiles")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  int cases = 0;
  double worst = 0;
  for (const auto& file : files) {
    const Profile profile = load_profile(file);
    const int per_node = profile.hardware.gpus_per_node;
    for (int r = 2; r <= per_node; r *= 2) {
      if (per_node % r != 0) continue;
      for (const int nodes : {8, 512}) {
        for (const int B : {512, 4096}) {
          CAPTURE(file.filename().string());
          CAPTURE(r);
          CAPTURE(nodes);
          CAPTURE(B);
          Agreement a;
          try {
            a = plan_and_play(profile, nodes, 1, B, GradientSync::per_layer, kDefaultGradientBucketBytes, 1, r);
          } catch (const NoPlanError&) {
            continue;  // the model does not fit on G / r GPUs
          }
          CHECK(a.plan.pipelines_per_node == r);
          const double error = std::abs(a.plan.iteration_ms / a.played.iteration_ms - 1);
          CHECK(error <= 0.01);
          worst = std::max(worst, error);
          ++cases;
        }
      }
    }
  }
  MESSAGE(cases << " plans of pipelines sharing nodes: worst error " << 100 * worst << " %");
  CHECK(cases >= 50);
}

TEST_CASE("planner and simulator: GPT-3 1.3B on 64 H100 nodes trains faster with a pipeline on every GPU") {
  // The model fits one GPU: eight pipelines a node skip the pipeline's fill
  // and drain and the tensor-parallel all-reduces, and all-reduce their
  // gradients inside each node before crossing it.
  const Profile profile = load_profile(kRoot / "profiles/gpt3-1.3b-h100.analytic.json");
  const Agreement whole = plan_and_play(profile, 64, 1, 512);
  const Agreement chosen =
      plan_and_play(profile, 64, 1, 512, GradientSync::per_layer, kDefaultGradientBucketBytes, 1, 0);
  MESSAGE("whole nodes: planned " << whole.plan.iteration_ms << " ms, played " << whole.played.iteration_ms
                                  << " ms; chosen (" << chosen.plan.pipelines_per_node << " a node): planned "
                                  << chosen.plan.iteration_ms << " ms, played " << chosen.played.iteration_ms << " ms");
  CHECK(chosen.plan.pipelines_per_node > 1);
  CHECK(chosen.played.iteration_ms < 0.8 * whole.played.iteration_ms);
  CHECK(chosen.plan.iteration_ms == doctest::Approx(chosen.played.iteration_ms).epsilon(0.01));
}

TEST_CASE("planner and simulator: interleaved pipelines on every bundled profile, priced alike") {
  // Up to 4 model chunks a device where that plays faster: the simulator
  // plays each device's passes in interleaved order.
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kRoot / "profiles")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  int cases = 0, interleaved = 0;
  double worst = 0, gain = 0;
  for (const auto& file : files) {
    const Profile profile = load_profile(file);
    for (const int nodes : {64}) {
      for (const int B : {64}) {
        CAPTURE(file.filename().string());
        CAPTURE(nodes);
        CAPTURE(B);
        Agreement a;
        try {
          a = plan_and_play(profile, nodes, 1, B, GradientSync::per_layer, kDefaultGradientBucketBytes, 1, 1, 4);
        } catch (const NoPlanError&) {
          continue;
        }
        bool any = false;
        for (const auto& p : a.plan.pipelines) any |= p.interleave > 1;
        const double error = std::abs(a.plan.iteration_ms / a.played.iteration_ms - 1);
        CHECK(error <= 0.01);
        worst = std::max(worst, error);
        ++cases;
        interleaved += any;
        // Against the plan without interleaving, on the largest models.
        if (any && file.filename().string().find("175b") != std::string::npos) {
          const Agreement plain = plan_and_play(profile, nodes, 1, B);
          gain = std::max(gain, 1 - a.played.iteration_ms / plain.played.iteration_ms);
        }
      }
    }
  }
  MESSAGE(cases << " plans, " << interleaved << " with interleaved pipelines: worst error " << 100 * worst
                << " %, at best " << 100 * gain << " % faster played than without");
  CHECK(cases >= 35);
  CHECK(interleaved >= 10);
  CHECK(gain > 0.1);
}
