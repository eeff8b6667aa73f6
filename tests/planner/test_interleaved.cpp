// Interleaved templates (each device holding several model chunks) against
// brute force over every cut of the layers, and interleaved plans in files.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "interleaved_orders.h"
#include "oobleck/common/one_f_one_b.h"
#include "oobleck/planner.h"
#include "played_pipeline.h"
#include "reference.h"

using namespace oobleck;

namespace {

// The most bytes a device of an interleaved layout holds, counted from the
// layers' own fields: each chunk's state and, pass by pass in the device's
// interleaved order, the activations of the microbatches it has run
// forward and not yet backward (no recomputation: the profiles below have
// no attention cores and the policy is none).
Bytes device_bytes(const Profile& profile, const std::vector<Stage>& stages, int devices, int chunks, int d,
                   int microbatches) {
  std::vector<double> state(chunks, 0), activation(chunks, 0);
  for (int c = 0; c < chunks; ++c) {
    const Stage& st = stages[c * devices + d];
    for (int l = st.layer_begin; l < st.layer_end; ++l) {
      state[c] += static_cast<double>(profile.layers[l].param_bytes + profile.layers[l].optimizer_bytes);
      activation[c] += static_cast<double>(profile.layers[l].activation_bytes);
    }
  }
  double held = 0, most = 0, fixed = 0;
  for (double s : state) fixed += s / stages.front().gpus;
  for (const auto& pass : interleaved_one_f_one_b(d, devices, chunks, microbatches)) {
    held += (pass.forward ? 1 : -1) * activation[pass.chunk] / stages.front().gpus;
    most = std::max(most, held);
  }
  return static_cast<Bytes>(fixed + most);
}

// Every cut of L layers into `count` chunks.
void each_cut(int layers, int count, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> ends;
  std::function<void(int)> extend = [&](int begin) {
    if (static_cast<int>(ends.size()) == count) {
      if (begin == layers) visit(ends);
      return;
    }
    for (int end = begin + 1; end <= layers - (count - static_cast<int>(ends.size()) - 1); ++end) {
      ends.push_back(end);
      extend(end);
      ends.pop_back();
    }
  };
  extend(0);
}

}  // namespace

TEST_CASE("interleaved templates against brute force over every cut: no slower than Megatron's equal cut, no single boundary move faster, memory as counted pass by pass, the played time, close to the fastest cut") {
  std::mt19937_64 rng(20261130);
  int compared = 0, at_best_cut = 0, none = 0, within_5 = 0;
  double worst_gap = 0, gap_sum = 0;
  for (int instance = 0; instance < 300; ++instance) {
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {1, 2};
    options.min_layers = 6;
    options.max_layers = 10;
    options.memory_bound = instance % 3 == 2;
    const Profile profile = test::random_profile(rng, options);
    CostModel cost(profile, 1 + instance % 8);
    const int G = profile.hardware.gpus_per_node;
    const int M = cost.microbatches();
    for (int nodes = 1; nodes <= 3; ++nodes) {
      for (int chunks = 2; chunks <= 3; ++chunks) {
        CAPTURE(instance);
        CAPTURE(nodes);
        CAPTURE(chunks);
        const auto t = build_interleaved_template(cost, nodes, chunks);
        // Brute force: every degree, every cut into D x chunks, memory
        // counted pass by pass; by degree, each fitting cut's played time,
        // and the fastest of them all.
        double best_played = 1e300;
        std::map<int, std::map<std::vector<int>, double>> played_cuts;
        for (int degree : cost.degrees()) {
          const int devices = nodes * G / degree;
          if (devices < 2 || devices * chunks > cost.layers()) continue;
          each_cut(cost.layers(), devices * chunks, [&](const std::vector<int>& ends) {
            std::vector<Stage> stages;
            for (std::size_t j = 0; j < ends.size(); ++j) {
              const int d = static_cast<int>(j) % devices;
              stages.push_back({j == 0 ? 0 : ends[j - 1], ends[j], degree, d * degree / G});
            }
            for (int d = 0; d < devices; ++d) {
              if (device_bytes(profile, stages, devices, chunks, d, M) > profile.hardware.gpu_memory_bytes) return;
            }
            const double played = test::play_interleaved(cost, stages, chunks, M);
            played_cuts[degree][ends] = played;
            best_played = std::min(best_played, played);
          });
        }
        if (!t) {
          ++none;  // (none of its cuts fits; brute force may know others that do)
          continue;
        }
        ++compared;
        const int devices = static_cast<int>(t->stages.size()) / chunks;
        REQUIRE(t->interleave == chunks);
        CHECK(t->nodes == nodes);
        // Every virtual stage on its device, layers in order.
        int next = 0;
        std::vector<int> ends;
        for (std::size_t j = 0; j < t->stages.size(); ++j) {
          const Stage& s = t->stages[j];
          CHECK(s.layer_begin == next);
          next = s.layer_end;
          ends.push_back(s.layer_end);
          const Stage& device = t->stages[j % static_cast<std::size_t>(devices)];
          CHECK(s.node == device.node);
          CHECK(s.gpus == device.gpus);
        }
        CHECK(next == cost.layers());
        for (int d = 0; d < devices; ++d) {
          CHECK(device_bytes(profile, t->stages, devices, chunks, d, M) <= profile.hardware.gpu_memory_bytes);
        }
        // No slower than Megatron's cut into equal layer counts (the first
        // L mod D v chunks one layer longer) at any degree where it fits.
        for (const auto& [degree, cuts] : played_cuts) {
          const int count = static_cast<int>(cuts.begin()->first.size());
          std::vector<int> equal;
          for (int j = 0, end = 0; j < count; ++j) {
            equal.push_back(end += cost.layers() / count + (j < cost.layers() % count ? 1 : 0));
          }
          if (cuts.count(equal)) CHECK(t->iteration_ms <= cuts.at(equal) * (1 + 1e-9));
        }
        // A local optimum where its moves were weighed at M (M <= 2 D): no
        // chunk boundary moved by one layer plays faster and fits.
        REQUIRE(played_cuts.count(t->stages.front().gpus));
        REQUIRE(played_cuts.at(t->stages.front().gpus).count(ends));
        if (M <= 2 * devices) {
          for (std::size_t j = 0; j + 1 < ends.size(); ++j) {
            for (int step : {-1, 1}) {
              std::vector<int> moved = ends;
              moved[j] += step;
              const auto& cuts = played_cuts.at(t->stages.front().gpus);
              if (cuts.count(moved)) CHECK(t->iteration_ms <= cuts.at(moved) * (1 + 1e-9));
            }
          }
        }
        // Priced as played, by an independent event-by-event count.
        CHECK(t->iteration_ms == doctest::Approx(test::play_interleaved(cost, t->stages, chunks, M)).epsilon(1e-9));
        CHECK(t->iteration_ms >= best_played * (1 - 1e-9));
        at_best_cut += t->iteration_ms <= best_played * (1 + 1e-9);
        worst_gap = std::max(worst_gap, t->iteration_ms / best_played - 1);
        gap_sum += t->iteration_ms / best_played - 1;
        within_5 += t->iteration_ms <= best_played * 1.05;
      }
    }
  }
  MESSAGE("compared " << compared << " interleaved templates (" << none << " with none): " << at_best_cut
                      << " the fastest of every cut, " << within_5 << " within 5 %, mean " << 100 * gap_sum / compared
                      << " % slower, worst " << 100 * worst_gap << " %");
  // A heuristic over the cuts, measured: most layouts are the fastest cut
  // or close to it.
  CHECK(compared > 500);
  CHECK(at_best_cut * 10 >= compared * 8);
  CHECK(within_5 * 100 >= compared * 97);
  CHECK(gap_sum / compared <= 0.005);
  CHECK(worst_gap <= 0.12);
}

TEST_CASE("interleaved plans: each node count's faster layout, priced as its pipelines play, in the plan file and re-planned") {
  // GPT-3 175B on 64 A100 nodes, f = 1, B = 128: 16-node pipelines with 32
  // microbatches each; up to 4 chunks a device.
  const Profile profile = load_profile(std::string(OOBLECK_SOURCE_DIR) + "/profiles/gpt3-175b-a100.analytic.json");
  const std::vector<std::string> nodes = numbered_nodes(64);
  const ClusterPlan plain = plan_cluster(profile, nodes, 1, 128);
  const ClusterPlan interleaved =
      plan_cluster(profile, nodes, 1, 128, 0, {}, RecomputePolicy::none, GradientSync::per_layer,
                   kDefaultGradientBucketBytes, 1, 1, 4);
  CHECK(interleaved.plan.interleave == 4);
  bool any = false;
  for (const auto& p : interleaved.plan.pipelines) any |= p.interleave > 1;
  CHECK(any);
  CHECK(interleaved.plan.iteration_ms < 0.9 * plain.plan.iteration_ms);
  // Each template the faster of its node count's plain and interleaved layouts.
  CostModel cost(profile, interleaved.templates.microbatches);
  cost.set_interleave(4);
  for (const auto& t : interleaved.templates.templates) {
    if (t.interleave == 1) continue;
    const auto again = build_interleaved_template(cost, t.nodes, t.interleave);
    REQUIRE(again);
    CHECK(again->stages == t.stages);
  }
  // Priced pipeline by pipeline, each played event by event.
  CHECK(interleaved.plan.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, interleaved.plan)).epsilon(1e-9));
  // The file keeps every pipeline's interleave; a malformed one is refused.
  const std::string text = plan_to_json(interleaved.plan, interleaved.templates, profile);
  const Plan back = parse_plan(text, "plan.json", profile);
  CHECK(back.interleave == 4);
  for (std::size_t i = 0; i < back.pipelines.size(); ++i) {
    CHECK(back.pipelines[i].interleave == interleaved.plan.pipelines[i].interleave);
    CHECK(back.pipelines[i].stages == interleaved.plan.pipelines[i].stages);
  }
  const auto json = nlohmann::json::parse(text);
  std::size_t which = 0;
  while (json["pipelines"][which].value("interleave", 1) == 1) ++which;
  const auto refused = [&](const std::function<void(nlohmann::json&)>& change, const std::string& says) {
    nlohmann::json bad = json;
    change(bad);
    CAPTURE(says);
    CHECK_THROWS_WITH_AS((void)parse_plan(bad.dump(), "plan.json", profile), doctest::Contains(says.c_str()),
                         InputError);
  };
  refused([&](auto& j) { j["pipelines"][which]["interleave"] = 5; }, "interleave");
  refused([&](auto& j) { j.erase("interleave"); }, "interleave");
  refused([&](auto& j) { j["pipelines"][which]["stages"].erase(j["pipelines"][which]["stages"].size() - 1); },
          "expected a multiple of interleave");
  refused([&](auto& j) { j["pipelines"][which]["stages"].back()["node"] = 0; }, "runs on the device of stage");
  // Re-planned with the same choice after a loss: the plan's interleave kept.
  const TemplateSet templates = replanning_templates(cost, interleaved.plan, 1, 0);
  const Reconfiguration r = reconfigure(cost, templates, interleaved.plan, {"node3"}, {});
  CHECK(r.plan.interleave == 4);
  CHECK(r.plan.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, r.plan)).epsilon(1e-9));
  // Node speeds plan plain pipelines only, but price interleaved ones as
  // they play: at full speed the plan's price, slower with a slow node.
  CHECK_THROWS_AS((void)split_at_speeds(cost, interleaved.plan, {{"node1", 0.5}}), InputError);
  CHECK(iteration_ms_at_speeds(cost, interleaved.plan, {}) == doctest::Approx(interleaved.plan.iteration_ms).epsilon(1e-12));
  const std::string& busy = interleaved.plan.pipelines.front().nodes.front();
  CHECK(iteration_ms_at_speeds(cost, interleaved.plan, {{busy, 0.5}}) > interleaved.plan.iteration_ms * 1.1);
}

TEST_CASE("pipeline plays: one loop in an order made per shape equals the sweeps bit for bit, interleaved or not") {
  // play_pipeline runs each shape's passes in an order made once (each
  // pass after what it waits for, by depth); play_pipeline_by_sweeps tries
  // every device's next pass until none is ready. Both must give the same
  // sums, and played_end_ms the same end: random stages, links from none
  // to longer than the stages, ties, and shapes past the size up to which
  // orders are kept (2^18 passes).
  std::mt19937_64 rng(20261201);
  int interleaved = 0, past_kept = 0;
  for (int instance = 0; instance < 600; ++instance) {
    const int v = 1 + static_cast<int>(rng() % 4);
    const int D = 1 + static_cast<int>(rng() % 7);
    const int S = D * v;
    // Every hundredth just past the largest shape whose order is kept.
    const int M = instance % 100 == 99 ? (1 << 18) / (2 * S) + 1 + static_cast<int>(rng() % 100)
                                       : 1 + static_cast<int>(rng() % 40);
    const double link_scale = std::uniform_real_distribution<double>(0.0, 4.0)(rng);
    std::vector<double> forward(S), backward(S), transfer(S - 1);
    for (int s = 0; s < S; ++s) {
      forward[s] = rng() % 4 == 0 ? 1.0 : std::uniform_real_distribution<double>(0.1, 3.0)(rng);
      backward[s] = rng() % 4 == 0 ? 2.0 : std::uniform_real_distribution<double>(0.2, 6.0)(rng);
    }
    for (auto& t : transfer) t = rng() % 3 == 0 ? 0.0 : std::uniform_real_distribution<double>(0.0, link_scale)(rng);
    CAPTURE(instance);
    CAPTURE(D);
    CAPTURE(v);
    CAPTURE(M);
    const detail::PlayedPipeline ordered = detail::play_pipeline(forward, backward, transfer, M, v);
    const detail::PlayedPipeline swept = detail::play_pipeline_by_sweeps(forward, backward, transfer, M, v);
    CHECK(ordered.end_ms == swept.end_ms);
    CHECK(ordered.last_backward_ms == swept.last_backward_ms);
    CHECK(ordered.end_ms > 0);
    // The end alone, as searches weigh layouts, without the last backwards.
    CHECK(detail::played_end_ms(forward, backward, transfer, M, v) == ordered.end_ms);
    // And the simulator's way, event by event in time order.
    CHECK(ordered.end_ms == doctest::Approx(test::play_1f1b(forward, backward, transfer, M, v).end_ms).epsilon(1e-9));
    interleaved += v > 1;
    past_kept += 2.0 * S * M > (1 << 18);
  }
  CHECK(interleaved > 300);
  CHECK(past_kept == 6);
}

// Device d's undominated counts of chunk-microbatches in flight, from its
// order directly: every count vector after a forward, less those another
// covers component by component (and repeats), sorted.
std::vector<std::vector<int>> undominated_in_flight(int D, int v, int M, int d) {
  std::vector<std::vector<int>> after_forwards;
  std::vector<int> held(static_cast<std::size_t>(v), 0);
  for (const PipelinePass& pass : interleaved_one_f_one_b(d, D, v, M)) {
    held[static_cast<std::size_t>(pass.chunk)] += pass.forward ? 1 : -1;
    if (pass.forward) after_forwards.push_back(held);
  }
  const auto covers = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (std::size_t c = 0; c < a.size(); ++c) {
      if (a[c] < b[c]) return false;
    }
    return true;
  };
  std::vector<std::vector<int>> out;
  for (const auto& a : after_forwards) {
    const bool covered = std::any_of(after_forwards.begin(), after_forwards.end(),
                                     [&](const auto& b) { return b != a && covers(b, a); });
    if (!covered) out.push_back(a);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TEST_CASE("kept shapes: each shape's counts in flight are its own, whatever was asked between and past the bound") {
  // interleaved_orders keeps every shape's counts per thread until 2^21
  // passes are counted as kept, then drops them all (shape_cache.h).
  // Shapes asked in a random sequence with repeats, some large enough to
  // pass the bound several times, must each get their own devices' counts.
  std::mt19937_64 rng(20261202);
  int repeats = 0, large = 0;
  std::map<std::tuple<int, int, int>, int> asked;
  for (int i = 0; i < 400; ++i) {
    const int D = 1 + static_cast<int>(rng() % 6);
    const int v = 1 + static_cast<int>(rng() % 4);
    const int M = i % 20 == 19 ? 20000 + static_cast<int>(rng() % 3) : 1 + static_cast<int>(rng() % 12);
    CAPTURE(i);
    CAPTURE(D);
    CAPTURE(v);
    CAPTURE(M);
    const detail::InterleavedOrders& orders = detail::interleaved_orders(D, v, M);
    REQUIRE(orders.devices == D);
    REQUIRE(orders.chunks == v);
    REQUIRE(orders.microbatches == M);
    REQUIRE(static_cast<int>(orders.in_flight.size()) == D);
    for (int d = 0; d < D && M < 20000; ++d) {
      std::vector<std::vector<int>> kept = orders.in_flight[static_cast<std::size_t>(d)];
      std::sort(kept.begin(), kept.end());
      CHECK(kept == undominated_in_flight(D, v, M, d));
    }
    repeats += asked[{D, v, M}]++ > 0;
    large += M >= 20000;
  }
  CHECK(repeats > 100);
  CHECK(large == 20);  // 2 D v M passes each: up to 960,000, so the bound is passed again and again
}
