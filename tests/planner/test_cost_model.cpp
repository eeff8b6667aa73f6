// The cost model's formulas on hand-computed cases.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <type_traits>

#include "oobleck/planner.h"
#include "reference.h"
#include "steady_period.h"

using namespace oobleck;

TEST_CASE("stage-to-stage transfers between nodes spread over the cards of the stage's GPUs") {
  // 1 MiB outputs; 4 GPUs a node at 100 GB/s inside, 10 GB/s a card between nodes.
  const Profile profile = test::uniform_profile(4, 4, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 4);
  const double one_card = (1 << 20) / 10e9 * 1000;
  CHECK(cost.transfer_ms(2, false) == doctest::Approx(one_card + 0.01));
  CHECK(cost.transfer_ms(2, false, 4) == doctest::Approx(one_card / 4 + 0.01));
  CHECK(cost.transfer_ms(2, true, 4) == doctest::Approx((1 << 20) / 100e9 * 1000 + 0.01));  // inside: NVLink
  // A pipeline's first microbatch pays each boundary's transfers at the
  // degree of the stage before it.
  const std::vector<Stage> stages = {{0, 2, 4, 0}, {2, 3, 2, 1}, {3, 4, 2, 1}};
  const double compute = cost.stage_compute_ms(0, 2, 4) + cost.stage_compute_ms(2, 3, 2) + cost.stage_compute_ms(3, 4, 2);
  CHECK(cost.first_microbatch_ms(stages) ==
        doctest::Approx(compute + 2 * cost.transfer_ms(2, false, 4) + 2 * cost.transfer_ms(3, true, 2)));
}

TEST_CASE("T(M) of DESIGN.md on a hand-computed pipeline") {
  // Two layers of 1+2 ms, 1 MiB outputs, inter-node 10 GB/s, latency 0.01 ms.
  const Profile profile = test::uniform_profile(2, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 5);
  const std::vector<Stage> stages = {{0, 1, 1, 0}, {1, 2, 1, 1}};
  const double transfer = (1 << 20) / 10e9 * 1000 + 0.01;
  CHECK(cost.transfer_ms(1, false) == doctest::Approx(transfer));
  // Two equal stages: stage 0's round trip (3 + 3 + 2 transfers over its 2
  // microbatches in flight) paces the pipeline, not the stages alone.
  CHECK(cost.pipeline_ms(stages, 5) == doctest::Approx(3 + 3 + 2 * transfer + 4 * (3 + transfer)));
  CHECK(cost.first_microbatch_ms(stages) == doctest::Approx(6 + 2 * transfer));
  CHECK(cost.bottleneck_ms(stages) == doctest::Approx(3 + transfer));
}

TEST_CASE("1F1B's period: the slowest stage, the slowest link, or a round trip, whichever is longest") {
  // Three layers of 1 + 2 ms on three one-GPU nodes; outputs of `bytes`.
  const auto period = [](Bytes bytes, double forward_0) {
    Profile profile = test::uniform_profile(3, 1, 1.0, 2.0, 1000, 100, 1 << 20);
    profile.layers[0].forward_ms = forward_0;
    for (auto& l : profile.layers) l.output_bytes = bytes;
    const CostModel cost(profile, 8);
    return std::pair{cost.bottleneck_ms({{0, 1, 1, 0}, {1, 2, 1, 1}, {2, 3, 1, 2}}), cost.transfer_ms(1, false)};
  };
  // A slow first stage (10 + 2 ms) with short links: it alone.
  const auto [slow_stage, short_link] = period(1 << 10, 10.0);
  CHECK(slow_stage == doctest::Approx(12));
  CHECK(short_link < 0.02);
  // Equal stages, links of about 1 ms: stage 0's round trip, 3 stages and
  // 2 links each way over its 3 microbatches in flight.
  const auto [round_trip, link] = period(10 << 20, 1.0);
  CHECK(link == doctest::Approx(1.0586).epsilon(1e-3));
  CHECK(round_trip == doctest::Approx((9 + 4 * link) / 3));
  // Links longer than any stage: each carries one microbatch each way per
  // period, and the round trip is longer still.
  const auto [long_links, long_link] = period(100 << 20, 1.0);
  CHECK(long_link > 3);
  CHECK(long_links == doctest::Approx((9 + 4 * long_link) / 3));
  CHECK(long_links > long_link);
}

TEST_CASE("1F1B's period: a run of stages inside the pipeline paces it where it is the slowest cycle") {
  // Five one-GPU stages: 1, 3, 3, 3 and 1 ms (forward 1/3, backward 2/3 of
  // it), links of about 1 ms. The round trip of the three middle stages,
  // (9 + 4 C) / 3, exceeds every suffix's: (7 + 4 C) / 3 from stage 2,
  // (10 + 6 C) / 4 from stage 1, (11 + 8 C) / 5 from stage 0.
  Profile profile = test::uniform_profile(5, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  for (int l : {0, 4}) {
    profile.layers[l].forward_ms = 1.0 / 3;
    profile.layers[l].backward_ms = 2.0 / 3;
  }
  for (auto& l : profile.layers) l.output_bytes = 10 << 20;
  const CostModel cost(profile, 8);
  const std::vector<Stage> stages = {{0, 1, 1, 0}, {1, 2, 1, 1}, {2, 3, 1, 2}, {3, 4, 1, 3}, {4, 5, 1, 4}};
  const double c = cost.transfer_ms(1, false);
  CHECK(cost.bottleneck_ms(stages) == doctest::Approx((9 + 4 * c) / 3));
  CHECK(cost.suffix_bottleneck_ms(stages) == doctest::Approx((10 + 6 * c) / 4));
  CHECK(cost.bottleneck_ms(stages) > cost.suffix_bottleneck_ms(stages));
  // Against every run counted directly, on random layouts of random profiles.
  std::mt19937_64 rng(20261128);
  int runs_bind = 0;
  for (int instance = 0; instance < 300; ++instance) {
    test::RandomProfileOptions options;
    options.max_layers = 9;
    options.gpus_per_node_choices = {1, 2};
    Profile random = test::random_profile(rng, options);
    if (instance % 2 == 1) {  // links slow beside the compute, where runs pace the pipeline
      random.hardware.inter_node_bytes_per_s /= 300;
      random.hardware.intra_node_bytes_per_s /= 300;
    }
    const CostModel random_cost(random, 4);
    std::vector<Stage> layout;
    for (int l = 0; l < random_cost.layers(); ++l) {
      if (layout.empty() || rng() % 2 == 0) {
        layout.push_back({l, l + 1, 1, static_cast<int>(layout.size()) / random.hardware.gpus_per_node});
      } else {
        layout.back().layer_end = l + 1;
      }
    }
    for (auto& st : layout) st.node = static_cast<int>(&st - layout.data()) / random.hardware.gpus_per_node;
    std::vector<double> stage_ms, transfer_ms;
    for (std::size_t s = 0; s < layout.size(); ++s) {
      stage_ms.push_back(random_cost.stage_compute_ms(layout[s].layer_begin, layout[s].layer_end, 1));
      transfer_ms.push_back(s + 1 < layout.size() ? random_cost.transfer_ms(layout[s].layer_end,
                                                                             layout[s].node == layout[s + 1].node)
                                                  : 0.0);
    }
    CAPTURE(instance);
    const double every = test::direct_period_ms(stage_ms, transfer_ms);
    CHECK(random_cost.bottleneck_ms(layout) == doctest::Approx(every).epsilon(1e-12));
    CHECK(random_cost.suffix_bottleneck_ms(layout) ==
          doctest::Approx(test::direct_period_ms(stage_ms, transfer_ms, test::Runs::suffixes)).epsilon(1e-12));
    runs_bind += random_cost.suffix_bottleneck_ms(layout) < every * (1 - 1e-9);
  }
  MESSAGE(runs_bind << " of 300 random layouts paced by a run inside the pipeline");
  CHECK(runs_bind > 10);
}

TEST_CASE("1F1B's period names what sets it: a run whose mean it is, or a link whose transfer it is") {
  // The template polish bounds a move's period below by that run's mean
  // (layout_moves.cpp): the mean, summed the same way, must be the period
  // bit for bit, and no run or link may exceed it. Random stages and links,
  // with ties (equal stages are common: uniform layers on equal degrees).
  std::mt19937_64 rng(20261201);
  int by_link = 0, by_long_run = 0;
  for (int instance = 0; instance < 2000; ++instance) {
    const int count = 1 + static_cast<int>(rng() % 12);
    std::vector<double> compute(static_cast<std::size_t>(count)), transfers(static_cast<std::size_t>(count - 1));
    const double link_scale = std::uniform_real_distribution<double>(0.01, 3.0)(rng);
    for (auto& c : compute) c = rng() % 3 == 0 ? 2.0 : std::uniform_real_distribution<double>(0.5, 4.0)(rng);
    for (auto& t : transfers) t = rng() % 3 == 0 ? link_scale : std::uniform_real_distribution<double>(0.0, 2 * link_scale)(rng);
    CAPTURE(instance);
    const detail::SteadyPeriod period = detail::steady_period(compute, transfers);
    CHECK(period.ms == detail::steady_period_ms(compute, transfers));
    double largest = 0;
    for (double t : transfers) largest = std::max(largest, t);
    for (int b = 0; b < count; ++b) {
      double run = 0;
      for (int e = b; e < count; ++e) {
        run += compute[static_cast<std::size_t>(e)];
        largest = std::max(largest, run / (e - b + 1));
        if (e + 1 < count) run += 2 * transfers[static_cast<std::size_t>(e)];
      }
    }
    CHECK(period.ms == doctest::Approx(largest).epsilon(1e-12));
    if (period.link) {
      ++by_link;
      REQUIRE(period.first < transfers.size());
      CHECK(period.ms == transfers[period.first]);
    } else {
      REQUIRE(period.first <= period.last);
      REQUIRE(period.last < compute.size());
      double run = 0;
      for (std::size_t j = period.first; j <= period.last; ++j) run += compute[j] + (j < period.last ? 2 * transfers[j] : 0.0);
      CHECK(period.ms == run / static_cast<double>(period.last - period.first + 1));
      by_long_run += period.last > period.first;
    }
  }
  // Runs longer than a stage are exercised. (A link alone never sets it
  // where stages take time: the run of its two stages is at least as long.)
  CHECK(by_link == 0);
  CHECK(by_long_run > 100);
}

TEST_CASE("memory rule: stage s keeps min(M, S-s+1) microbatches, split over its t GPUs") {
  const Profile profile = test::uniform_profile(4, 4, 1.0, 2.0, 1000, 100, 700);
  const CostModel cost(profile, 3);
  CHECK(cost.stage_memory_bytes(0, 2, 1, 3) == 2000 + 3 * 200);
  CHECK(cost.stage_memory_bytes(0, 2, 4, 3) == (2000 + 3 * 200 + 3) / 4);
  CHECK(cost.stage_max_in_flight(0, 1, 2) == (1400 - 1000) / 100);
  CHECK_FALSE(cost.stage_fits(0, 1, 1, 1));  // 1000 bytes of state > 700
  CHECK(cost.stage_fits(0, 1, 2, 4));
  CHECK_FALSE(cost.stage_fits(0, 1, 2, 5));
  // Four stages of one layer each on 2 GPUs: the first keeps min(3, 4) = 3, the last 1.
  const std::vector<Stage> stages = {{0, 1, 2, 0}, {1, 2, 2, 0}, {2, 3, 2, 1}, {3, 4, 2, 1}};
  CHECK(cost.pipeline_fits(stages, 3));
}

TEST_CASE("gradient synchronisation: ring all-reduce of layer 0 across the pipelines") {
  const Profile profile = test::uniform_profile(3, 1, 1.0, 2.0, 4000, 100, 1 << 20);
  const CostModel cost(profile, 2);
  CHECK(cost.gradient_sync_ms(1) == 0);
  const double bytes = profile.layers[0].param_bytes;
  CHECK(cost.gradient_sync_ms(4) == doctest::Approx(2.0 * 3 / 4 * bytes / 10e9 * 1000 + 2 * 3 * 0.01));
}

TEST_CASE("gradient synchronisation after the backward: every layer's all-reduce queued once the last backward ends") {
  // Two stages of 3 layers; each layer's all-reduce among 4 replicas takes
  // `one`. Per layer, the last stage's all-reduces overlap the first
  // stage's backward; after the backward, each stage queues all of its own.
  const Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 4000, 100, 1 << 20);
  CostModel cost(profile, 2);
  const std::vector<Stage> stages = {{0, 3, 1, 0}, {3, 6, 1, 1}};
  const double one = cost.allreduce_ms(static_cast<double>(profile.layers[0].param_bytes), 4,
                                       profile.hardware.inter_node_bytes_per_s);
  const double per_layer = cost.sync_tail_ms(stages, 4);
  cost.set_gradient_sync(GradientSync::after_backward);
  CHECK(cost.gradient_sync() == GradientSync::after_backward);
  // Stage 0 ends last (at the tail's zero): its three all-reduces follow it.
  CHECK(cost.sync_tail_ms(stages, 4) == doctest::Approx(3 * one));
  CHECK(cost.sync_tail_ms(stages, 4) >= per_layer);
  CHECK(cost.sync_tail_ms(stages, 1) == 0);
  CHECK(gradient_sync_named("after-backward") == GradientSync::after_backward);
  CHECK(gradient_sync_name(GradientSync::per_layer) == "per-layer");
  CHECK(gradient_sync_named("buckets") == GradientSync::buckets);
  CHECK_FALSE(gradient_sync_named("sometimes"));
}

TEST_CASE("tensor parallelism: all-reduces measured inside a node price a stage's estimate") {
  // Four layers, 1 MiB outputs, 4 GPUs a node (intra-node 100 GB/s,
  // latency 0.01 ms): without a table, two rings a pass.
  Profile profile = test::uniform_profile(4, 4, 1.0, 2.0, 4000, 100, Bytes{1} << 30);
  const double out = static_cast<double>(profile.layers[1].output_bytes);
  const CostModel law(profile, 2);
  const double ring2 = ring_allreduce_ms(out, 2, profile.hardware.intra_node_bytes_per_s, profile.hardware.latency_ms);
  CHECK(law.layer_forward_allreduce_ms(1, 2) == doctest::Approx(2 * ring2));
  // One point measured at 2 GPUs and this size, three times the law: it
  // prices itself, and 4 GPUs the same, carried by the law.
  Profile with_table = profile;  // (a cost model reads its profile as it goes)
  with_table.hardware.intra_node_allreduce_table = {{2, out, 3 * ring2}};
  const CostModel measured(with_table, 2);
  CHECK(measured.layer_forward_allreduce_ms(1, 2) == doctest::Approx(6 * ring2));
  CHECK(measured.layer_backward_allreduce_ms(1, 4) == doctest::Approx(3 * law.layer_backward_allreduce_ms(1, 4)));
  CHECK(measured.layer_forward_ms(1, 2) == doctest::Approx(law.layer_forward_ms(1, 2) + 4 * ring2));
  // The gradients' all-reduce among replicas is another table.
  CHECK(measured.gradient_allreduce_ms(1e6, 4) == law.gradient_allreduce_ms(1e6, 4));
  // Written and read back.
  const Profile back = parse_profile(profile_to_json(with_table), "back.json");
  CHECK(back.hardware.intra_node_allreduce_table == with_table.hardware.intra_node_allreduce_table);
  CHECK(profile_fingerprint(back) != profile_fingerprint(profile));
}

TEST_CASE("gradient buckets: several layers' gradients in one all-reduce once the last of them is ready") {
  // Two stages of 3 layers, 1 ms forward and 2 ms backward each, and 1 GB
  // of weights a layer: an all-reduce among 4 replicas takes far longer
  // than a layer's backward.
  Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, Bytes{4} << 30, 100, Bytes{1} << 40);
  const std::vector<Stage> stages = {{0, 3, 1, 0}, {3, 6, 1, 1}};
  CostModel cost(profile, 2);
  const double b = static_cast<double>(profile.layers[0].param_bytes);
  const auto ring = [&](double bytes) { return cost.gradient_allreduce_ms(bytes, 4); };
  const double per_layer = cost.sync_tail_ms(stages, 4);
  cost.set_gradient_sync(GradientSync::buckets);
  // Buckets no larger than a layer: one layer each, as per layer.
  cost.set_gradient_bucket_bytes(b / 2);
  CHECK(cost.sync_tail_ms(stages, 4) == per_layer);
  // Two layers a bucket: stage 0 (ending at the tail's 0) sends layers 2
  // and 1 together once layer 1 is ready (at -2 ms), then layer 0 alone
  // (its bucket closes where the stage begins).
  cost.set_gradient_bucket_bytes(2 * b);
  CHECK(cost.sync_tail_ms(stages, 4) == doctest::Approx(std::max(-2.0 + ring(2 * b), 0.0) + ring(b)));
  CHECK(gradient_buckets(profile, 2 * b, {&stages}) == std::vector<int>{3, 2, 2, 1, 0, 0});
  // Cut wherever any layout's stage begins.
  const std::vector<Stage> other = {{0, 2, 1, 0}, {2, 6, 1, 1}};
  CHECK(gradient_buckets(profile, 2 * b, {&stages, &other}) == std::vector<int>{3, 3, 2, 1, 0, 0});
  // One bucket a stage, without latency and on the ring's law: what after
  // the backward costs (the same bytes, one message instead of three).
  profile.hardware.latency_ms = 0;
  CostModel whole(profile, 2);
  whole.set_gradient_sync(GradientSync::after_backward);
  const double after = whole.sync_tail_ms(stages, 4);
  whole.set_gradient_sync(GradientSync::buckets);
  whole.set_gradient_bucket_bytes(1e18);
  CHECK(whole.sync_tail_ms(stages, 4) == doctest::Approx(after));
  CHECK_THROWS_AS(whole.set_gradient_bucket_bytes(0), InputError);
}

TEST_CASE("tensor parallelism: the all-reduce part of a pass, and compute the rest of it") {
  // Five layers of 3 + 6 ms, 1 MiB outputs, 4 GPUs per node (intra-node
  // 100 GB/s, latency 0.01 ms). Layers 0 and 4 are replicated at every degree
  // (measured as fast as at degree 1, as the embedding and LM head are);
  // layer 2 is measured at degree 2 below the all-reduce estimate; layer 3 is
  // replicated at degree 2 only; layer 1 has no measurements.
  Profile profile = test::uniform_profile(5, 4, 3.0, 6.0, 1000, 100, Bytes{1} << 30);
  for (int t : {2, 4}) {
    profile.layers[0].tensor_parallel.push_back({t, 3.0, 6.0});
    profile.layers[4].tensor_parallel.push_back({t, 3.0, 6.0});
  }
  profile.layers[2].tensor_parallel.push_back({2, 0.05, 4.0});
  profile.layers[3].tensor_parallel.push_back({2, 3.5, 6.0});
  const CostModel cost(profile, 4);
  const double ring = 2.0 * 1 / 2 * (1 << 20) / 100e9 * 1000 + 2 * 1 * 0.01;  // AR(1 MiB, 2 GPUs)
  const double ring4 = 2.0 * 3 / 4 * (1 << 20) / 100e9 * 1000 + 2 * 3 * 0.01;
  REQUIRE(2 * ring > 0.05);

  // Degree 1: nothing to all-reduce.
  for (int l = 0; l < 5; ++l) CHECK(cost.layer_forward_allreduce_ms(l, 1) == 0);
  CHECK(cost.stage_backward_allreduce_ms(0, 5, 1) == 0);
  // Without measurements: two all-reduces per pass; compute is the 1/t share.
  CHECK(cost.layer_forward_allreduce_ms(1, 2) == doctest::Approx(2 * ring));
  CHECK(cost.layer_backward_allreduce_ms(1, 4) == doctest::Approx(2 * ring4));
  CHECK(cost.layer_forward_ms(1, 2) - cost.layer_forward_allreduce_ms(1, 2) == doctest::Approx(1.5));
  CHECK(cost.layer_backward_ms(1, 4) - cost.layer_backward_allreduce_ms(1, 4) == doctest::Approx(1.5));
  // Replicated layers: the whole pass is compute, at any degree.
  for (int t : {2, 4}) {
    for (int l : {0, 4}) {
      CHECK(cost.layer_forward_allreduce_ms(l, t) == 0);
      CHECK(cost.layer_backward_allreduce_ms(l, t) == 0);
      CHECK(cost.layer_forward_ms(l, t) == 3.0);
    }
  }
  CHECK(cost.layer_forward_allreduce_ms(3, 2) == 0);  // not faster at 2: not split there
  CHECK(cost.layer_forward_allreduce_ms(3, 4) == doctest::Approx(2 * ring4));
  // Measured below the estimate: the all-reduce takes the whole measured pass.
  CHECK(cost.layer_forward_allreduce_ms(2, 2) == 0.05);
  CHECK(cost.layer_backward_allreduce_ms(2, 2) == doctest::Approx(2 * ring));

  // Stages: sums over their layers; compute plus all-reduce is the total.
  for (int t : cost.degrees()) {
    for (int begin = 0; begin < 5; ++begin) {
      for (int end = begin + 1; end <= 5; ++end) {
        double forward = 0, backward = 0;
        for (int l = begin; l < end; ++l) {
          forward += cost.layer_forward_allreduce_ms(l, t);
          backward += cost.layer_backward_allreduce_ms(l, t);
          CHECK(cost.layer_forward_allreduce_ms(l, t) <= cost.layer_forward_ms(l, t));
          CHECK(cost.layer_backward_allreduce_ms(l, t) <= cost.layer_backward_ms(l, t));
        }
        CHECK(cost.stage_forward_allreduce_ms(begin, end, t) == doctest::Approx(forward));
        CHECK(cost.stage_backward_allreduce_ms(begin, end, t) == doctest::Approx(backward));
      }
    }
  }
  const double compute2 = 3.0 + 1.5 + 0.0 + 3.5 + 3.0;  // layers 0..4 forward at degree 2, all-reduces aside
  CHECK(cost.stage_forward_ms(0, 5, 2) - cost.stage_forward_allreduce_ms(0, 5, 2) == doctest::Approx(compute2));
  CHECK(cost.stage_forward_allreduce_ms(0, 5, 2) == doctest::Approx(2 * ring + 0.05));
}

TEST_CASE("tensor parallelism: replicated layers are held whole by every GPU of their stage") {
  // Four layers, state 1000 and activations 100 bytes each, 4 GPUs per node
  // with 2000 bytes each. Layer 0 is replicated at degrees 2 and 4 (measured
  // no faster), layer 3 only at 4; layers 1 and 2 are split.
  Profile profile = test::uniform_profile(4, 4, 3.0, 6.0, 1000, 100, 2000);
  for (int t : {2, 4}) profile.layers[0].tensor_parallel.push_back({t, 3.0, 6.0});
  profile.layers[3].tensor_parallel.push_back({2, 1.0, 2.0});
  profile.layers[3].tensor_parallel.push_back({4, 3.0, 6.0});
  const CostModel cost(profile, 4);
  CHECK_FALSE(cost.layer_replicated(0, 1));
  CHECK(cost.layer_replicated(0, 2));
  CHECK_FALSE(cost.layer_replicated(1, 2));
  CHECK_FALSE(cost.layer_replicated(3, 2));
  CHECK(cost.layer_replicated(3, 4));
  // Brute force: per GPU, each layer's bytes whole or divided by the degree.
  for (int t : cost.degrees()) {
    for (int begin = 0; begin < 4; ++begin) {
      for (int end = begin + 1; end <= 4; ++end) {
        for (int in_flight : {1, 3}) {
          double per_gpu = 0, state = 0;
          for (int l = begin; l < end; ++l) {
            const double share = cost.layer_replicated(l, t) ? 1.0 : 1.0 / t;
            per_gpu += (1000 + in_flight * 100) * share;
            state += 1000 * share;
          }
          CHECK(cost.stage_memory_bytes(begin, end, t, in_flight) == static_cast<Bytes>(std::ceil(per_gpu - 1e-9)));
          CHECK(cost.stage_state_bytes_per_gpu(begin, end, t) == static_cast<Bytes>(std::ceil(state - 1e-9)));
          CHECK(cost.stage_fits(begin, end, t, in_flight) == (per_gpu <= 2000 + 1e-9));
        }
      }
    }
  }
  // Layers 0-1 at degree 2: 1000 + 500 bytes of state per GPU, 150 per
  // microbatch: 3 in flight fit in 2000 bytes, 4 do not.
  CHECK(cost.stage_max_in_flight(0, 2, 2) == 3);
}

TEST_CASE("tensor parallelism without sequence parallelism: one GPU's recorded share of a layer's activations") {
  // Four layers, state 1000 and activations 100 bytes each, 2 GPUs per
  // node. Layer 1 records 70 bytes per GPU at degree 2 (30 of its 100 are
  // LayerNorm inputs and the like, kept whole), layer 2 records 50 (all
  // divided, as with sequence parallelism); layers 0 and 3 record nothing
  // and divide. Outputs are 1 MiB (uniform_profile).
  Profile profile = test::uniform_profile(4, 2, 3.0, 6.0, 1000, 100, Bytes{1} << 30);
  profile.layers[1].tensor_parallel.push_back({2, 1.6, 3.2, 70});
  profile.layers[2].tensor_parallel.push_back({2, 1.6, 3.2, 50});
  for (auto& layer : profile.layers) layer.attention_activation_bytes = 40;
  CostModel cost(profile, 4);
  CHECK(cost.layer_activation_bytes(0, 2) == 50);
  CHECK(cost.layer_activation_bytes(1, 2) == 70);
  CHECK(cost.layer_activation_bytes(1, 1) == 100);
  // Layers 0-2 at degree 2, 3 in flight: (3000 + 3 x (100 + 140 + 100)) / 2.
  CHECK(cost.stage_memory_bytes(0, 3, 2, 3) == (3000 + 3 * 340) / 2);
  // Selective: the attention cores (40 a layer, divided) go; one layer's
  // on one GPU (20) comes back while its backward runs.
  CHECK(cost.stage_memory_bytes(0, 3, 2, 3, Recompute::selective) == (3000 + 3 * (340 - 120)) / 2 + 20);
  // Full: the inputs (layers 0 and 1's outputs) whole on each GPU, and the
  // largest one-GPU share (layer 1's 70) while its backward runs.
  CHECK(cost.stage_memory_bytes(0, 3, 2, 3, Recompute::full) == 3000 / 2 + 3 * (Bytes{2} << 20) + 70);
  // With sequence parallelism the hidden states between layers are split too.
  profile.sequence_parallel = true;
  const CostModel sequence_parallel(profile, 4);
  CHECK(sequence_parallel.stage_memory_bytes(0, 3, 2, 3, Recompute::full) == 3000 / 2 + 3 * (Bytes{1} << 20) + 70);
  CHECK(sequence_parallel.stage_memory_bytes(0, 3, 1, 3, Recompute::full) == 3000 + 3 * (Bytes{2} << 20) + 100);
  // The shares travel with the profile, and a share below 1/degree or above
  // the whole is refused by name.
  const Profile again = parse_profile(profile_to_json(profile), "again");
  CHECK(again.layers[1].tensor_parallel.at(0).activation_bytes == 70);
  CHECK(again.layers[0].tensor_parallel.empty());
  CHECK(again.sequence_parallel);
  CHECK(profile_fingerprint(again) == profile_fingerprint(profile));
  profile.sequence_parallel = false;
  CHECK(profile_fingerprint(again) != profile_fingerprint(profile));
  for (const Bytes wrong : {Bytes{49}, Bytes{101}}) {
    profile.layers[1].tensor_parallel[0].activation_bytes = wrong;
    CHECK_THROWS_WITH_AS((void)parse_profile(profile_to_json(profile), "p.json"),
                         doctest::Contains("layers[1].tensor_parallel.2.activation_bytes"), InputError);
  }
}

TEST_CASE("a profile whose bytes over its layers and a node's GPUs reach 2^62 is refused by name") {
  // Within every field's limit (2^46), but the sums a stage forms would overflow.
  Profile profile = test::uniform_profile(300, 1024, 1.0, 2.0, Bytes{1} << 46, Bytes{1} << 45, Bytes{1} << 40);
  CHECK_THROWS_WITH_AS(CostModel(profile, 4), doctest::Contains("hardware.gpus_per_node reach 2^62"), InputError);
  profile.hardware.gpus_per_node = 8;
  CHECK_NOTHROW(CostModel(profile, 4));
}

// The cost model refers to its profile: a temporary would dangle.
static_assert(!std::is_constructible_v<CostModel, Profile&&, int>);
static_assert(std::is_constructible_v<CostModel, const Profile&, int>);

TEST_CASE("gradient all-reduce from a measured table: the points themselves, linear between, the ring's law beyond") {
  Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 4000, 100, 1 << 20);
  const Hardware& hw = profile.hardware;
  const double beta = hw.gradient_allreduce_bytes_per_s();
  auto ring = [&](double bytes, int ranks) { return ring_allreduce_ms(bytes, ranks, beta, hw.latency_ms); };
  profile.hardware.allreduce_table = {{2, 1e3, 0.1}, {2, 1e6, 0.5}, {2, 1e8, 20.0}, {8, 1e6, 4.0}};
  const CostModel cost(profile, 2);
  // Measured points price themselves.
  CHECK(cost.gradient_allreduce_ms(1e3, 2) == doctest::Approx(0.1));
  CHECK(cost.gradient_allreduce_ms(1e6, 2) == doctest::Approx(0.5));
  CHECK(cost.gradient_allreduce_ms(1e8, 2) == doctest::Approx(20.0));
  CHECK(cost.gradient_allreduce_ms(1e6, 8) == doctest::Approx(4.0));
  // Between two sizes: linear.
  CHECK(cost.gradient_allreduce_ms(0.5e6 + 0.5e3, 2) == doctest::Approx(0.3));
  // Beyond the sizes: the nearest point carried by the ring's law.
  CHECK(cost.gradient_allreduce_ms(4e8, 2) == doctest::Approx(20.0 * ring(4e8, 2) / ring(1e8, 2)));
  CHECK(cost.gradient_allreduce_ms(10, 2) == doctest::Approx(0.1 * ring(10, 2) / ring(1e3, 2)));
  // Other rank counts: the largest measured at or below, carried by the law;
  // below the smallest measured, the smallest.
  CHECK(cost.gradient_allreduce_ms(1e6, 4) == doctest::Approx(0.5 * ring(1e6, 4) / ring(1e6, 2)));
  CHECK(cost.gradient_allreduce_ms(1e6, 64) == doctest::Approx(4.0 * ring(1e6, 64) / ring(1e6, 8)));
  CHECK(cost.gradient_allreduce_ms(1e6, 1) == 0);
  // Never falling as sizes grow, over and between the points.
  double last = 0;
  for (double bytes = 1; bytes < 1e9; bytes *= 1.7) {
    for (const int ranks : {2, 3, 8, 100}) CHECK(cost.gradient_allreduce_ms(bytes, ranks) >= 0);
    const double t = cost.gradient_allreduce_ms(bytes, 2);
    CHECK(t >= last * (1 - 1e-12));
    last = t;
  }
  // A table on the law gives the law back, at any size and rank count.
  Profile lawful = profile;
  lawful.hardware.allreduce_table = {{2, 1e4, ring(1e4, 2)}, {2, 1e7, ring(1e7, 2)}};
  const CostModel by_law(lawful, 2);
  for (const double bytes : {1e2, 1e4, 3e5, 1e7, 1e9}) {
    for (const int ranks : {2, 5, 1024}) {
      CHECK(by_law.gradient_allreduce_ms(bytes, ranks) == doctest::Approx(ring(bytes, ranks)).epsilon(0.05));
    }
  }
}

TEST_CASE("gradient all-reduce tables in profiles: sorted, never falling with size, refused when malformed") {
  const Profile base = test::uniform_profile(2, 1, 1.0, 2.0, 4000, 100, 1 << 20);
  nlohmann::json doc = nlohmann::json::parse(profile_to_json(base));
  doc["hardware"]["allreduce_table"] = {{{"ranks", 4}, {"bytes", 100}, {"ms", 1.0}},
                                        {{"ranks", 2}, {"bytes", 1000}, {"ms", 0.2}},
                                        {{"ranks", 2}, {"bytes", 100}, {"ms", 0.3}}};
  const Profile read = parse_profile(doc.dump(), "p.json");
  REQUIRE(read.hardware.allreduce_table.size() == 3);
  CHECK(read.hardware.allreduce_table[0] == AllreducePoint{2, 100, 0.3});
  CHECK(read.hardware.allreduce_table[1] == AllreducePoint{2, 1000, 0.3});  // not below the smaller size
  CHECK(read.hardware.allreduce_table[2] == AllreducePoint{4, 100, 1.0});
  // Written and read back whole.
  CHECK(parse_profile(profile_to_json(read), "again.json").hardware.allreduce_table == read.hardware.allreduce_table);
  auto refused = [&](nlohmann::json table, const std::string& says) {
    nlohmann::json bad = doc;
    bad["hardware"]["allreduce_table"] = std::move(table);
    CAPTURE(says);
    CHECK_THROWS_WITH_AS((void)parse_profile(bad.dump(), "p.json"), doctest::Contains(says.c_str()), InputError);
  };
  refused(3, "hardware.allreduce_table: expected an array");
  refused({{{"ranks", 1}, {"bytes", 100}, {"ms", 1.0}}}, "allreduce_table[0].ranks");
  refused({{{"ranks", 2}, {"bytes", 0}, {"ms", 1.0}}}, "allreduce_table[0].bytes");
  refused({{{"ranks", 2}, {"bytes", 10}, {"ms", -1.0}}}, "allreduce_table[0].ms");
  refused({{{"ranks", 2}, {"bytes", 10}}}, "allreduce_table[0]");
  refused({{{"ranks", 2}, {"bytes", 10}, {"ms", 1.0}}, {{"ranks", 2}, {"bytes", 10}, {"ms", 2.0}}},
          "two points for 2 ranks and 10 bytes");
}

TEST_CASE("tensor parallelism: templates choose only the degrees the model's heads, key/value heads and MLP units divide") {
  const std::string root = OOBLECK_SOURCE_DIR;
  const auto degrees = [](const Profile& profile, int nodes) {
    CostModel cost(profile, 4);
    cost.set_tensor_parallel_nodes(nodes);
    return cost.degrees();
  };
  // GPT-3 175B's 96 heads split over 16, 24, 32 and 48 GPUs, not 40, 56 or 64.
  const Profile gpt3 = load_profile(root + "/profiles/gpt3-175b-a100.analytic.json");
  CHECK(degrees(gpt3, 1) == std::vector<int>{1, 2, 4, 8});
  CHECK(degrees(gpt3, 8) == std::vector<int>{1, 2, 4, 8, 16, 24, 32, 48});
  // Llama 3 70B's 8 key/value heads over no more than a node's 8 GPUs.
  const Profile llama = load_profile(root + "/profiles/llama3-70b-h100.analytic.json");
  CHECK(degrees(llama, 4) == std::vector<int>{1, 2, 4, 8});
  // GPT-2 XL's 25 heads over no two of a node's GPUs.
  const Profile gpt2_xl = load_profile(root + "/profiles/gpt2-xl-h200-mb4-bf16.analytic.json");
  CHECK(degrees(gpt2_xl, 2) == std::vector<int>{1});
  // A model section that names no heads, or names them as no count, splits
  // over any degree; a TorchScript model's layers over none.
  Profile plain = test::uniform_profile(6, 4, 1.0, 2.0, 100, 10, 1000);
  for (const char* section : {R"({})", R"({"heads": "96"})", R"({"heads": 0})", R"({"heads": -8})", R"([1, 2])",
                              R"({"heads": 2.5})", R"({"heads": 18446744073709551615})"}) {
    CAPTURE(section);
    plain.model_json = section;
    CHECK(degrees(plain, 2) == std::vector<int>{1, 2, 4, 8});
  }
  plain.model_json = R"({"architecture": "torchscript", "heads": 8})";
  CHECK(degrees(plain, 2) == std::vector<int>{1});
  // Where MLP units do not divide: 4 x hidden for GPT-2, ffn_hidden for Llama.
  plain.model_json = R"({"heads": 8, "hidden": 5})";  // 20 MLP units
  CHECK(degrees(plain, 2) == std::vector<int>{1, 2, 4});
  plain.model_json = R"({"heads": 8, "hidden": 9223372036854775807})";  // (no count: no MLP units named)
  CHECK(degrees(plain, 2) == std::vector<int>{1, 2, 4, 8});
  plain.model_json = R"({"architecture": "llama", "heads": 8, "kv_heads": 8, "ffn_hidden": 12})";
  CHECK(degrees(plain, 2) == std::vector<int>{1, 2, 4});
  plain.model_json = R"({"architecture": "llama", "heads": 8, "kv_heads": 2, "ffn_hidden": 16})";
  CHECK(degrees(plain, 2) == std::vector<int>{1, 2});
  // The others are still priced: a plan read from a file may hold them.
  const CostModel cost(gpt3, 4);
  CHECK(cost.stage_compute_ms(0, 10, 64) > 0);
  CHECK(cost.stage_compute_ms(0, 10, 64) < cost.stage_compute_ms(0, 10, 48));
  // And the template search keeps to them.
  CostModel spanning(gpt3, 98);
  spanning.set_tensor_parallel_nodes(8);
  const TemplateSet set = build_templates(spanning, 48);
  int wide = 0;
  for (const PipelineTemplate& t : set.templates) {
    for (const Stage& s : t.stages) {
      CHECK(splits_over(gpt3, s.gpus));
      wide += s.gpus > 8;
    }
  }
  CHECK(wide > 0);
}
