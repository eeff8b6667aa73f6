// Node speeds against brute force: every order of each pipeline's nodes and
// every split of the batch, on random small profiles and plans.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <random>

#include "oobleck/planner.h"
#include "reference.h"

using namespace oobleck;

namespace {

// 3 to 6 layers, one GPU a node: one stage a node position, where placement
// is exact.
Profile small_random_profile(std::mt19937_64& rng) {
  test::RandomProfileOptions options;
  options.min_layers = 3;
  options.max_layers = 6;
  options.gpus_per_node_choices = {1};
  return test::random_profile(rng, options);
}

// The best split objective over every node order within each pipeline
// (only the plan's own with `keep_places`) and every split of the batch
// that fits memory: the slowest pipeline's T(m), summed stage by stage at
// its nodes' speeds, plus its own tail (where the nodes run the
// collectives, at the slowest training node's speed: a ring is as fast as
// its slowest member) plus its slowest optimizer step at them. (The
// iteration is priced after the split: test::synced_iteration_ms.)
double brute_force_at_speeds(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds,
                             bool keep_places = false) {
  const int count = static_cast<int>(plan.pipelines.size());
  double ring_speed = kMaxNodeSpeed;
  for (const auto& p : plan.pipelines) {
    for (const auto& n : p.nodes) ring_speed = std::min(ring_speed, speeds.count(n) ? speeds.at(n) : 1.0);
  }
  if (!cost.collectives_at_node_speed()) ring_speed = 1;
  // For each pipeline, its fastest T(m) over node orders, for every m.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(count),
                                        std::vector<double>(static_cast<std::size_t>(plan.global_microbatches) + 1,
                                                            std::numeric_limits<double>::infinity()));
  for (int p = 0; p < count; ++p) {
    Pipeline pipe = plan.pipelines[static_cast<std::size_t>(p)];
    if (!keep_places) std::sort(pipe.nodes.begin(), pipe.nodes.end());
    do {
      for (int m = 1; m <= plan.global_microbatches; ++m) {
        if (!cost.pipeline_fits(pipe.stages, m)) continue;
        double first = 0, optimizer = 0;
        std::vector<double> stage_ms, transfer_ms;  // transfer_ms[s]: s to s + 1, one way
        for (std::size_t s = 0; s < pipe.stages.size(); ++s) {
          const Stage& st = pipe.stages[s];
          const auto it = speeds.find(pipe.nodes[static_cast<std::size_t>(st.node)]);
          const double speed = it == speeds.end() ? 1.0 : it->second;
          double t = 0;
          for (int l = st.layer_begin; l < st.layer_end; ++l) {
            t += cost.layer_forward_ms(l, st.gpus) + cost.layer_backward_ms(l, st.gpus, st.recompute);
          }
          t /= speed;
          if (cost.optimizer_bytes_per_s() > 0) {  // its state read and written once, at the node's speed
            const double bytes = 2.0 * static_cast<double>(cost.stage_state_bytes_per_gpu(st.layer_begin, st.layer_end, st.gpus));
            optimizer = std::max(optimizer, bytes / cost.optimizer_bytes_per_s() * 1000.0 / speed);
          }
          stage_ms.push_back(t);
          transfer_ms.push_back(
              s + 1 < pipe.stages.size() ? cost.transfer_ms(st.layer_end, st.node == pipe.stages[s + 1].node, st.gpus)
                                         : 0.0);
          first += t + 2 * transfer_ms.back();
        }
        const double total = first + (m - 1) * test::direct_period_ms(stage_ms, transfer_ms) +
                             cost.sync_tail_ms(pipe.stages, count) / ring_speed + optimizer;
        auto& b = best[static_cast<std::size_t>(p)][static_cast<std::size_t>(m)];
        b = std::min(b, total);
      }
    } while (!keep_places && std::next_permutation(pipe.nodes.begin(), pipe.nodes.end()));
  }
  double answer = std::numeric_limits<double>::infinity();
  std::vector<int> split(static_cast<std::size_t>(count), 0);
  std::function<void(int, int, double)> go = [&](int p, int left, double worst) {
    if (p == count - 1) {
      if (left >= 1) answer = std::min(answer, std::max(worst, best[static_cast<std::size_t>(p)][static_cast<std::size_t>(left)]));
      return;
    }
    for (int m = 1; m <= left - (count - 1 - p); ++m) {
      go(p + 1, left - m, std::max(worst, best[static_cast<std::size_t>(p)][static_cast<std::size_t>(m)]));
    }
  };
  go(0, plan.global_microbatches, 0);
  return answer;
}

// A plan's split objective at speeds, as brute_force_at_speeds counts it:
// the slowest pipeline's T(m) plus its own tail plus its slowest optimizer
// step.
double passes_at_speeds(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds) {
  const int count = static_cast<int>(plan.pipelines.size());
  double ring_speed = kMaxNodeSpeed;
  for (const auto& p : plan.pipelines) {
    for (const auto& n : p.nodes) ring_speed = std::min(ring_speed, speeds.count(n) ? speeds.at(n) : 1.0);
  }
  if (!cost.collectives_at_node_speed()) ring_speed = 1;
  double out = 0;
  for (const auto& p : plan.pipelines) {
    double optimizer = 0;
    for (const auto& st : p.stages) {
      const auto it = speeds.find(p.nodes[static_cast<std::size_t>(st.node)]);
      optimizer = std::max(optimizer, cost.stage_optimizer_ms(st.layer_begin, st.layer_end, st.gpus) /
                                          (it == speeds.end() ? 1.0 : it->second));
    }
    out = std::max(out, pipeline_ms_at_speeds(cost, p, speeds, p.microbatches) +
                            cost.sync_tail_ms(p.stages, count) / ring_speed + optimizer);
  }
  return out;
}

}  // namespace

TEST_CASE("node speeds: placement and split equal brute force on 300 random plans") {
  std::mt19937_64 rng(20261127);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Profile profile = small_random_profile(rng);
    const int nodes = std::uniform_int_distribution<int>(2, 6)(rng);
    const int f = std::uniform_int_distribution<int>(0, 2)(rng);
    const int B = std::uniform_int_distribution<int>(f + 1, 10)(rng);
    const CostModel cost(profile, 4);
    const TemplateSet templates = build_templates(cost, nodes);
    Plan plan;
    try {
      plan = instantiate(cost, templates, numbered_nodes(nodes), f, B);
    } catch (const NoPlanError&) {
      continue;
    }
    NodeSpeeds speeds;
    const double factors[] = {0.25, 0.4, 0.7, 1.0, 1.5};
    for (int n = 0; n < nodes; ++n) {
      const double factor = factors[std::uniform_int_distribution<int>(0, 4)(rng)];
      if (factor != 1.0) speeds["node" + std::to_string(n)] = factor;
    }
    CAPTURE(trial);
    const Plan at_speeds = apply_node_speeds(cost, plan, speeds);
    CHECK(passes_at_speeds(cost, at_speeds, speeds) ==
          doctest::Approx(brute_force_at_speeds(cost, plan, speeds)).epsilon(1e-9));
    // Priced as the simulator plays it: each layer's all-reduce after its
    // slowest holder, stages at their nodes' speeds.
    CHECK(at_speeds.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, at_speeds, speeds)).epsilon(1e-12));
    // The same pipelines and nodes, the whole batch, the times stated.
    REQUIRE(at_speeds.pipelines.size() == plan.pipelines.size());
    int total = 0;
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      auto a = at_speeds.pipelines[p].nodes, b = plan.pipelines[p].nodes;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      CHECK(a == b);
      total += at_speeds.pipelines[p].microbatches;
      // Its passes played at its nodes' speeds.
      const Pipeline& pipe = at_speeds.pipelines[p];
      std::vector<double> stage_speeds;
      for (const Stage& st : pipe.stages) {
        const auto it = speeds.find(pipe.nodes[static_cast<std::size_t>(st.node)]);
        stage_speeds.push_back(it == speeds.end() ? 1.0 : it->second);
      }
      CHECK(pipe.iteration_ms ==
            doctest::Approx(test::play_1f1b(cost, pipe.stages, pipe.microbatches, stage_speeds).end_ms).epsilon(1e-12));
    }
    CHECK(total == B);
    // At speed 1 everywhere, the plan's own iteration.
    CHECK(apply_node_speeds(cost, plan, {}).iteration_ms == doctest::Approx(plan.iteration_ms).epsilon(1e-9));
    // The split alone: nodes in place, the best split at those places; and
    // the iteration priced at speeds is what each plan states.
    const Plan split = split_at_speeds(cost, plan, speeds);
    CHECK(passes_at_speeds(cost, split, speeds) ==
          doctest::Approx(brute_force_at_speeds(cost, plan, speeds, true)).epsilon(1e-9));
    CHECK(split.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, split, speeds)).epsilon(1e-12));
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) CHECK(split.pipelines[p].nodes == plan.pipelines[p].nodes);
    CHECK(iteration_ms_at_speeds(cost, split, speeds) == doctest::Approx(split.iteration_ms).epsilon(1e-12));
    CHECK(iteration_ms_at_speeds(cost, at_speeds, speeds) == doctest::Approx(at_speeds.iteration_ms).epsilon(1e-12));
    CHECK(iteration_ms_at_speeds(cost, plan, {}) == doctest::Approx(plan.iteration_ms).epsilon(1e-9));
    CHECK(passes_at_speeds(cost, at_speeds, speeds) <= passes_at_speeds(cost, split, speeds) * (1 + 1e-12));
    CHECK(passes_at_speeds(cost, split, speeds) <= passes_at_speeds(cost, plan, speeds) * (1 + 1e-12));
    // With the optimizer step priced (here at up to a whole layer pass of
    // the model's state), the split still equals brute force, and a slow
    // node's step counts in its pipeline's time.
    CostModel priced(profile, 4);
    double state = 0, passes = 0;
    for (int l = 0; l < priced.layers(); ++l) {
      state += static_cast<double>(priced.layer_state_bytes(l));
      passes += priced.layer_forward_ms(l, 1) + priced.layer_backward_ms(l, 1);
    }
    priced.set_optimizer_bytes_per_s(2 * state / (passes * std::uniform_real_distribution<double>(0.05, 1)(rng)) * 1000);
    const Plan priced_split = split_at_speeds(priced, plan, speeds);
    CHECK(passes_at_speeds(priced, priced_split, speeds) ==
          doctest::Approx(brute_force_at_speeds(priced, plan, speeds, true)).epsilon(1e-9));
    CHECK(priced_split.iteration_ms ==
          doctest::Approx(test::synced_iteration_ms(priced, priced_split, speeds)).epsilon(1e-12));
    CHECK(iteration_ms_at_speeds(priced, priced_split, speeds) == doctest::Approx(priced_split.iteration_ms).epsilon(1e-12));
    CHECK(iteration_ms_at_speeds(priced, plan, speeds) > iteration_ms_at_speeds(cost, plan, speeds));
    // With the collectives run by the nodes (CPU nodes), the same, every
    // all-reduce at the slowest node's speed.
    CostModel on_host(profile, 4);
    on_host.set_collectives_at_node_speed(true);
    const Plan host_split = split_at_speeds(on_host, plan, speeds);
    CHECK(passes_at_speeds(on_host, host_split, speeds) ==
          doctest::Approx(brute_force_at_speeds(on_host, plan, speeds, true)).epsilon(1e-9));
    CHECK(host_split.iteration_ms == doctest::Approx(test::synced_iteration_ms(on_host, host_split, speeds)).epsilon(1e-12));
    const Plan host_placed = apply_node_speeds(on_host, plan, speeds);
    CHECK(passes_at_speeds(on_host, host_placed, speeds) ==
          doctest::Approx(brute_force_at_speeds(on_host, plan, speeds)).epsilon(1e-9));
    CHECK(host_placed.iteration_ms ==
          doctest::Approx(test::synced_iteration_ms(on_host, host_placed, speeds)).epsilon(1e-12));
    if (!speeds.empty() && plan.pipelines.size() > 1) {
      CHECK(host_split.iteration_ms >= split.iteration_ms);  // the rings at the slowest node's speed
    }
    CHECK(iteration_ms_at_speeds(on_host, host_split, speeds) == doctest::Approx(host_split.iteration_ms).epsilon(1e-12));
    CHECK(iteration_ms_at_speeds(on_host, plan, {}) == doctest::Approx(plan.iteration_ms).epsilon(1e-9));
    // Rearranged, every node holds its new layers: kept or copied from a
    // node that held them, and nothing else is copied.
    const Reconfiguration moves = rearrangement(cost, plan, at_speeds);
    std::map<std::string, std::set<int>> before, after;
    for (const Plan* pl : std::initializer_list<const Plan*>{&plan, &at_speeds}) {
      for (const auto& pipe : pl->pipelines) {
        for (const auto& st : pipe.stages) {
          for (int l = st.layer_begin; l < st.layer_end; ++l) {
            (pl == &plan ? before : after)[pipe.nodes[static_cast<std::size_t>(st.node)]].insert(l);
          }
        }
      }
    }
    std::size_t needed = 0;
    Bytes bytes = 0;
    for (const auto& [node, layers] : after) {
      for (int l : layers) needed += before[node].count(l) ? 0 : 1;
    }
    CHECK(moves.transfers.size() == needed);
    for (const auto& t : moves.transfers) {
      CHECK(before[t.from_node].count(t.layer) == 1);
      CHECK(before[t.to_node].count(t.layer) == 0);
      CHECK(after[t.to_node].count(t.layer) == 1);
      bytes += t.bytes;
    }
    CHECK(moves.copy_bytes == bytes);
    CHECK((moves.transfers.empty() ? moves.copy_ms == 0 : moves.copy_ms > 0));
    ++checked;
  }
  CHECK(checked > 150);
}

TEST_CASE("node speeds: a slow node's pipeline takes fewer microbatches, and bad speeds are refused") {
  const Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 6);
  const TemplateSet templates = build_templates(cost, 6);
  const Plan plan = instantiate(cost, templates, numbered_nodes(4), 1, 12);
  REQUIRE(plan.pipelines.size() == 4);  // one node each, 3 microbatches each
  REQUIRE(plan.pipelines[0].microbatches == 3);
  const std::string slow = plan.pipelines[0].nodes.front();
  const Plan at_speeds = apply_node_speeds(cost, plan, {{slow, 0.4}});
  CHECK(at_speeds.pipelines[0].microbatches == 1);  // 2.5x as slow: 1 microbatch against the others' 3 or 4
  for (std::size_t p = 1; p < 4; ++p) CHECK(at_speeds.pipelines[p].microbatches >= 3);
  // Slower than the plan at full speed, faster than keeping its split.
  CHECK(at_speeds.iteration_ms > plan.iteration_ms);
  CHECK(at_speeds.pipelines_ms < pipeline_ms_at_speeds(cost, plan.pipelines[0], {{slow, 0.4}}, 3));
  CHECK_THROWS_WITH_AS((void)apply_node_speeds(cost, plan, {{"node9", 0.5}}),
                       "--node-speed: node \"node9\" is not in the cluster", InputError);
  CHECK_THROWS_WITH_AS((void)apply_node_speeds(cost, plan, {{slow, 0}}), doctest::Contains("expected a factor in"),
                       InputError);
}

namespace {

// Every composition of template sizes on `used` nodes (f + 1 to B parts),
// every order of all the nodes into its pipelines' positions and then the
// spares, each split exactly (split_at_speeds, checked against brute force
// above): the fastest iteration.
double brute_force_instantiation(const CostModel& cost, const TemplateSet& templates, std::vector<std::string> nodes,
                                 int f, int B, const NodeSpeeds& speeds, int used) {
  std::vector<std::vector<int>> compositions;
  std::vector<int> parts;
  std::function<void(std::size_t, int)> go = [&](std::size_t from, int left) {
    if (left == 0 && static_cast<int>(parts.size()) >= f + 1) compositions.push_back(parts);
    if (left == 0 || static_cast<int>(parts.size()) == B) return;
    for (std::size_t i = from; i < templates.templates.size(); ++i) {
      if (templates.templates[i].nodes > left) continue;
      parts.push_back(templates.templates[i].nodes);
      go(i, left - templates.templates[i].nodes);
      parts.pop_back();
    }
  };
  go(0, used);
  double best = std::numeric_limits<double>::infinity();
  std::sort(nodes.begin(), nodes.end());
  do {
    for (const auto& sizes : compositions) {
      Plan plan;
      plan.fault_tolerance = f;
      plan.global_microbatches = B;
      plan.template_microbatches = templates.microbatches;
      std::size_t next = 0;
      for (int size : sizes) {
        Pipeline p;
        p.template_nodes = size;
        p.stages = templates.find(size)->stages;
        p.nodes.assign(nodes.begin() + static_cast<std::ptrdiff_t>(next),
                       nodes.begin() + static_cast<std::ptrdiff_t>(next + static_cast<std::size_t>(size)));
        p.microbatches = 1;
        next += static_cast<std::size_t>(size);
        plan.pipelines.push_back(std::move(p));
      }
      try {
        best = std::min(best, split_at_speeds(cost, plan, speeds).iteration_ms);
      } catch (const NoPlanError&) {
      }
    }
  } while (std::next_permutation(nodes.begin(), nodes.end()));
  return best;
}

}  // namespace

TEST_CASE("node speeds: instantiation at speeds (templates, pipelines, places, split, spares) equals brute force") {
  std::mt19937_64 rng(20261128);
  int checked = 0, composition_changed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Profile profile = small_random_profile(rng);
    const int count = std::uniform_int_distribution<int>(2, 6)(rng);
    const int f = std::uniform_int_distribution<int>(0, 1)(rng);
    const int B = std::uniform_int_distribution<int>(f + 1, 8)(rng);
    const CostModel cost(profile, 4);
    // Templates on fewer nodes than the cluster, sometimes: then some
    // nodes are spares.
    const TemplateSet templates = build_templates(cost, std::uniform_int_distribution<int>(1, count)(rng));
    const std::vector<std::string> nodes = numbered_nodes(count);
    Plan blind;
    try {
      blind = instantiate(cost, templates, nodes, f, B);
    } catch (const NoPlanError&) {
      continue;
    }
    NodeSpeeds speeds;
    const double factors[] = {0.2, 0.4, 0.7, 1.5};
    const int slow = std::uniform_int_distribution<int>(1, std::min(3, count))(rng);
    for (int k = 0; k < slow; ++k) {
      speeds["node" + std::to_string(std::uniform_int_distribution<int>(0, count - 1)(rng))] =
          factors[std::uniform_int_distribution<int>(0, 3)(rng)];
    }
    CAPTURE(trial);
    const Plan plan = instantiate_at_speeds(cost, templates, nodes, f, B, speeds);
    const int used = count - static_cast<int>(blind.spare_nodes.size());
    CHECK(plan.iteration_ms ==
          doctest::Approx(brute_force_instantiation(cost, templates, nodes, f, B, speeds, used)).epsilon(1e-9));
    CHECK(iteration_ms_at_speeds(cost, plan, speeds) == doctest::Approx(plan.iteration_ms).epsilon(1e-12));
    CHECK(plan.iteration_ms <= apply_node_speeds(cost, blind, speeds).iteration_ms * (1 + 1e-12));
    // A plan: every node once, f + 1 pipelines, the whole batch.
    std::vector<std::string> seen(plan.spare_nodes);
    int total = 0;
    for (const auto& p : plan.pipelines) {
      seen.insert(seen.end(), p.nodes.begin(), p.nodes.end());
      total += p.microbatches;
      CHECK(p.stages == templates.find(p.template_nodes)->stages);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(seen == nodes);
    CHECK(total == B);
    CHECK(static_cast<int>(plan.pipelines.size()) >= f + 1);
    std::vector<int> sizes, blind_sizes;
    for (const auto& p : plan.pipelines) sizes.push_back(p.template_nodes);
    for (const auto& p : blind.pipelines) blind_sizes.push_back(p.template_nodes);
    composition_changed += sizes != blind_sizes;
    ++checked;
  }
  CHECK(checked > 100);
  CHECK(composition_changed > 0);  // speeds do change which templates are chosen
  MESSAGE(checked << " instantiations checked; the speeds changed the templates of " << composition_changed);
}

TEST_CASE("node speeds: beyond eight slow nodes, instantiation places them one at a time, never worse than placing "
          "within instantiate's plan") {
  const Profile profile = test::uniform_profile(8, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 8);
  const TemplateSet templates = build_templates(cost, 4);
  const std::vector<std::string> nodes = numbered_nodes(24);
  NodeSpeeds speeds;
  for (int n = 0; n < 10; ++n) speeds["node" + std::to_string(2 * n + 1)] = 0.3 + 0.05 * n;
  const Plan blind = instantiate(cost, templates, nodes, 2, 48);
  const Plan plan = instantiate_at_speeds(cost, templates, nodes, 2, 48, speeds);
  CHECK(plan.iteration_ms <= apply_node_speeds(cost, blind, speeds).iteration_ms * (1 + 1e-12));
  CHECK(iteration_ms_at_speeds(cost, plan, speeds) == doctest::Approx(plan.iteration_ms).epsilon(1e-12));
  std::vector<std::string> seen(plan.spare_nodes);
  for (const auto& p : plan.pipelines) seen.insert(seen.end(), p.nodes.begin(), p.nodes.end());
  std::sort(seen.begin(), seen.end());
  auto sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  CHECK(seen == sorted);
}
