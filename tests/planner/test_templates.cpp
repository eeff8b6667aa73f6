// Template search against brute force on random small instances.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <optional>
#include <random>

#include "oobleck/planner.h"
#include "reference.h"
#include "composition.h"
#include "finishing_pool.h"
#include "solve_memo.h"
#include "template_search.h"

using namespace oobleck;

namespace {

using Answer = std::optional<std::pair<double, std::vector<Stage>>>;

// Two answers for one node count, the same bit for bit (sigma and layout);
// counts the pair in `checked` and, where it holds a layout, in `found`.
template <typename Count>
void check_same_answer(const Answer& a, const Answer& b, Count& checked, Count& found) {
  ++checked;
  REQUIRE(a.has_value() == b.has_value());
  if (!a) return;
  ++found;
  CHECK(a->first == b->first);
  CHECK(a->second == b->second);
}

void check_layout(const CostModel& cost, const PipelineTemplate& t) {
  const int gpus = cost.gpus_per_node();
  std::vector<int> on_node(t.nodes, 0);
  int next = 0;
  for (const auto& s : t.stages) {
    REQUIRE(s.layer_begin == next);
    REQUIRE(s.layer_end > s.layer_begin);
    // A divisor of the node's GPUs, or k whole nodes.
    REQUIRE((gpus % s.gpus == 0 ? s.node_span == 1 : s.gpus % gpus == 0 && s.node_span == s.gpus / gpus));
    REQUIRE(s.node_span <= cost.tensor_parallel_nodes());
    REQUIRE(s.node >= 0);
    REQUIRE(s.node + s.node_span <= t.nodes);
    for (int n = s.node; n < s.node + s.node_span; ++n) on_node[n] += std::min(s.gpus, gpus);
    next = s.layer_end;
  }
  CHECK(next == cost.layers());
  for (int n = 0; n < t.nodes; ++n) CHECK(on_node[n] == gpus);
  CHECK(cost.pipeline_fits(t.stages, t.microbatches));
  if (gpus == 1 && cost.tensor_parallel_nodes() == 1) CHECK(static_cast<int>(t.stages.size()) == t.nodes);
  CHECK(t.iteration_ms == doctest::Approx(test::direct_iteration_ms(cost, t.stages, t.microbatches)).epsilon(1e-9));
  // A local optimum: no boundary moved by one layer gives a layout that
  // fits and plays faster.
  for (std::size_t b = 0; b + 1 < t.stages.size(); ++b) {
    for (const int step : {-1, 1}) {
      std::vector<Stage> moved = t.stages;
      moved[b].layer_end += step;
      moved[b + 1].layer_begin += step;
      if (moved[b].layer_end <= moved[b].layer_begin || moved[b + 1].layer_begin >= moved[b + 1].layer_end) continue;
      if (!cost.pipeline_fits(moved, t.microbatches)) continue;
      CHECK(test::direct_iteration_ms(cost, moved, t.microbatches) >= t.iteration_ms * (1 - 1e-12));
    }
  }
}

// The search is exact for T(M) with the suffixes' round trips in the period
// and prices its templates with every run's. Against brute force: never
// below the least T(M); and wherever the template's T(M) equals the least
// with suffixes alone (a lower bound on every layout's), it is the least.
struct Optimality {
  int compared = 0, least = 0, certified = 0;
  double worst_gap = 0;
  void check(const PipelineTemplate& t, const test::BruteTemplate& brute) {
    ++compared;
    CHECK(t.iteration_ms >= brute.iteration_ms * (1 - 1e-9));
    CHECK(brute.suffix_iteration_ms <= brute.iteration_ms * (1 + 1e-9));
    const bool at_bound = t.iteration_ms <= brute.suffix_iteration_ms * (1 + 1e-9);
    if (at_bound) CHECK(t.iteration_ms == doctest::Approx(brute.iteration_ms).epsilon(1e-9));
    certified += at_bound;
    const double gap = t.iteration_ms / brute.iteration_ms - 1;
    least += gap <= 1e-9;
    worst_gap = std::max(worst_gap, gap);
  }
};

// Each node count's template against brute force (Optimality, the layout's
// rules); `also` sees each template compared. The templates compared.
template <typename Also>
int compare_with_brute_force(const CostModel& cost, const TemplateSet& set, int max_nodes, int instance,
                             Optimality& optimality, Also&& also) {
  const auto brute = test::brute_force_templates(cost, max_nodes);
  int compared = 0;
  for (int n = 1; n <= max_nodes; ++n) {
    const PipelineTemplate* t = set.find(n);
    CAPTURE(instance);
    CAPTURE(n);
    REQUIRE(static_cast<bool>(t) == brute[n].has_value());
    if (!t) continue;
    ++compared;
    optimality.check(*t, *brute[n]);
    check_layout(cost, *t);
    also(*t);
  }
  return compared;
}

}  // namespace

TEST_CASE("templates against brute force, 1200 random instances: the least T(M) wherever the suffixes' bound certifies it") {
  std::mt19937_64 rng(20261121);
  std::uniform_int_distribution<int> microbatches(1, 8);
  int compared = 0, infeasible = 0, non_monotone = 0;
  Optimality optimality;
  for (int instance = 0; instance < 1200; ++instance) {
    const int gpus = std::array{1, 2, 4}[instance % 3];
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.max_layers = gpus == 4 ? 6 : 7;
    options.memory_bound = instance % 2 == 1;
    options.activation_shares_seed = instance % 4 == 1 ? 5000 + static_cast<std::uint64_t>(instance) : 0;
    Profile profile = test::random_profile(rng, options);
    if (instance % 5 == 4) {  // slow links between nodes: runs of stages inside the pipeline may pace it
      profile.hardware.inter_node_bytes_per_s /= 300;
    }
    const CostModel cost(profile, microbatches(rng));
    const int max_nodes = 4;
    const TemplateSet set = build_templates(cost, max_nodes);
    const auto brute = test::brute_force_templates(cost, max_nodes);
    std::vector<bool> feasible(max_nodes + 1, false);
    for (int n = 1; n <= max_nodes; ++n) {
      const PipelineTemplate* t = set.find(n);
      CAPTURE(instance);
      CAPTURE(n);
      REQUIRE(static_cast<bool>(t) == brute[n].has_value());
      if (!t) {
        infeasible += n <= cost.layers();
        continue;
      }
      feasible[n] = true;
      ++compared;
      optimality.check(*t, *brute[n]);
      check_layout(cost, *t);
    }
    // Feasible at n but not at n+1 although there are layers enough: memory,
    // through the microbatches that more stages keep in flight.
    bool falls = false;
    for (int n = 1; n < max_nodes; ++n) falls |= feasible[n] && !feasible[n + 1] && n + 1 <= cost.layers();
    non_monotone += falls;
  }
  MESSAGE("compared " << compared << " templates; " << infeasible << " node counts infeasible by memory; "
                      << non_monotone << " instances where feasibility falls as nodes are added; "
                      << optimality.least << " the least T(M) over every run (" << optimality.certified
                      << " certified by the suffixes' bound), the others at most " << 100 * optimality.worst_gap
                      << " % above it");
  CHECK(compared > 2000);
  CHECK(optimality.least >= optimality.compared * 99 / 100);
  CHECK(optimality.worst_gap < 0.1);
  CHECK(infeasible > 200);
  CHECK(non_monotone > 0);
}

TEST_CASE("templates on part of a node against brute force, 600 random instances: the least T(M) wherever the suffixes' bound certifies it") {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<int> microbatches(1, 8);
  int compared = 0, infeasible = 0;
  Optimality optimality;
  for (int instance = 0; instance < 600; ++instance) {
    const int gpus = std::array{2, 4, 8}[instance % 3];
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.max_layers = gpus == 2 ? 7 : gpus == 4 ? 6 : 5;
    options.memory_bound = instance % 4 == 3;
    options.activation_shares_seed = instance % 4 == 1 ? 9000 + static_cast<std::uint64_t>(instance) : 0;
    Profile profile = test::random_profile(rng, options);
    // Memory drawn for whole nodes rules out most layouts on fewer GPUs:
    // half the instances get GPUs of a node's memory.
    if (instance % 2 == 0) profile.hardware.gpu_memory_bytes *= gpus;
    const CostModel cost(profile, microbatches(rng));
    const auto brute = test::brute_force_shared_node_templates(cost);
    for (int u = 1; u < gpus; ++u) {
      CAPTURE(instance);
      CAPTURE(u);
      const auto t = build_shared_node_template(cost, u);
      REQUIRE(t.has_value() == brute[u].has_value());
      if (!t) {
        ++infeasible;
        continue;
      }
      ++compared;
      optimality.check(*t, *brute[u]);
      CHECK(t->nodes == 1);
      CHECK(t->gpus == u);
      int used = 0, next = 0;
      for (const auto& s : t->stages) {
        CHECK(s.node == 0);
        CHECK(s.layer_begin == next);
        CHECK(gpus % s.gpus == 0);
        used += s.gpus;
        next = s.layer_end;
      }
      CHECK(used == u);
      CHECK(next == cost.layers());
      CHECK(t->iteration_ms == doctest::Approx(test::direct_iteration_ms(cost, t->stages, t->microbatches)).epsilon(1e-9));
    }
  }
  MESSAGE("compared " << compared << " templates on part of a node (" << infeasible << " GPU counts infeasible); "
                      << optimality.least << " the least T(M) over every run (" << optimality.certified
                      << " certified), the others at most " << 100 * optimality.worst_gap << " % above it");
  CHECK(compared > 1000);
  CHECK(infeasible > 50);
  CHECK(optimality.least >= optimality.compared * 99 / 100);
  const Profile four_gpus = test::uniform_profile(4, 4, 1, 2, 1, 1, 1 << 30);
  const CostModel whole(four_gpus, 2);
  CHECK_THROWS_AS((void)build_shared_node_template(whole, 4), InputError);
  CHECK_THROWS_AS((void)build_shared_node_template(whole, 0), InputError);
}

TEST_CASE("stages over whole nodes against brute force, 600 random instances: the least T(M) wherever the suffixes' bound certifies it") {
  std::mt19937_64 rng(20261128);
  std::uniform_int_distribution<int> microbatches(1, 8);
  int compared = 0, spanning = 0, only_by_spanning = 0, faster_by_spanning = 0;
  Optimality optimality;
  for (int instance = 0; instance < 600; ++instance) {
    const int gpus = std::array{1, 2}[instance % 2];
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.max_layers = gpus == 2 ? 5 : 6;
    options.memory_bound = instance % 3 != 0;
    options.activation_shares_seed = instance % 4 == 1 ? 7000 + static_cast<std::uint64_t>(instance) : 0;
    Profile profile = test::random_profile(rng, options);
    if (instance % 5 == 4) profile.hardware.inter_node_bytes_per_s /= 300;
    CostModel cost(profile, microbatches(rng));
    const TemplateSet within = build_templates(cost, 4);
    cost.set_tensor_parallel_nodes(2 + instance % 3);
    const TemplateSet set = build_templates(cost, 4);
    const auto brute = test::brute_force_templates(cost, 4);
    for (int n = 1; n <= 4; ++n) {
      const PipelineTemplate* t = set.find(n);
      CAPTURE(instance);
      CAPTURE(n);
      REQUIRE(static_cast<bool>(t) == brute[n].has_value());
      if (!t) {
        CHECK(within.find(n) == nullptr);  // more choices never lose a node count
        continue;
      }
      ++compared;
      optimality.check(*t, *brute[n]);
      check_layout(cost, *t);
      const bool spans = std::any_of(t->stages.begin(), t->stages.end(), [](const Stage& s) { return s.node_span > 1; });
      spanning += spans;
      const PipelineTemplate* inside = within.find(n);
      only_by_spanning += inside == nullptr;
      if (inside) {
        CHECK(brute[n]->iteration_ms <= inside->iteration_ms * (1 + 1e-9));  // more choices, never slower
        faster_by_spanning += spans && t->iteration_ms < inside->iteration_ms * (1 - 1e-9);
      }
    }
  }
  MESSAGE("compared " << compared << " templates; " << spanning << " with a stage over several nodes, "
                      << only_by_spanning << " node counts feasible only so, " << faster_by_spanning
                      << " faster so; " << optimality.least << " the least T(M) over every run ("
                      << optimality.certified << " certified), the others at most " << 100 * optimality.worst_gap
                      << " % above it");
  CHECK(compared > 1400);
  CHECK(spanning > 1000);
  CHECK(only_by_spanning > 500);
  CHECK(faster_by_spanning > 300);
  CHECK(optimality.least >= optimality.compared * 99 / 100);
  CHECK(optimality.worst_gap < 0.1);
}

namespace {

// The random instance the kept-answer tests use: 1, 2 or 4 GPUs a node,
// in turn, half of them bound by memory.
Profile memo_instance_profile(std::mt19937_64& rng, int instance) {
  const int gpus = std::array{1, 2, 4}[instance % 3];
  test::RandomProfileOptions options;
  options.gpus_per_node_choices = {gpus};
  options.max_layers = gpus == 4 ? 6 : 7;
  options.memory_bound = instance % 2 == 1;
  return test::random_profile(rng, options);
}

}  // namespace

TEST_CASE("a kept answer is what a fresh solve at that bound finds: the same sigma, or none") {
  // solve_memo.h's claim, bit for bit: an answer found under bound K for n
  // nodes, of period mu, answers every bound in (mu, K]; none under K, none
  // under any lower bound.
  std::mt19937_64 rng(20261130);
  std::uniform_int_distribution<int> microbatches(1, 12);
  std::uniform_real_distribution<double> share(0.3, 1.2);
  int checked = 0, found = 0;
  for (int instance = 0; instance < 300; ++instance) {
    const Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    CostModel cost(profile, microbatches(rng));
    if (gpus < 4 && instance % 4 == 3) cost.set_tensor_parallel_nodes(2);
    detail::TemplateSearch search(cost, 4);
    detail::SolveMemo memo;
    CHECK_FALSE(memo.serve(cost));
    const int rows = 4 * cost.gpus_per_node();
    std::vector<double> periods;
    const auto solve_and_keep = [&](double bound) {
      search.solve(bound, rows);
      for (int n = 1; n <= 4; ++n) {
        const auto answer = search.best(n);
        const double mu = answer ? cost.suffix_bottleneck_ms(answer->second) : 0.0;
        if (answer) periods.push_back(mu);
        memo.record(n, bound, answer, cost, search.same_down_to_in_flight());
      }
    };
    // Bounds as walks take them: none, then under the periods found.
    solve_and_keep(std::numeric_limits<double>::infinity());
    for (int k = 0; k < 6 && !periods.empty(); ++k) {
      solve_and_keep(periods[rng() % periods.size()] * std::uniform_real_distribution<double>(0.6, 1.0)(rng));
    }
    if (periods.empty()) continue;
    const double widest = *std::max_element(periods.begin(), periods.end());
    for (int q = 0; q < 12; ++q) {
      const double b = widest * share(rng);
      search.solve(b, rows);
      for (int n = 1; n <= 4; ++n) {
        const auto hit = memo.find(n, b, b);
        if (!hit) continue;
        CAPTURE(instance);
        CAPTURE(n);
        CHECK(hit->bound == b);
        const auto fresh = search.best(n);
        ++checked;
        REQUIRE(hit->found.has_value() == fresh.has_value());
        if (!fresh) continue;
        ++found;
        CHECK(hit->found->first == fresh->first);
        CHECK(cost.suffix_bottleneck_ms(hit->found->second) < b);
      }
    }
  }
  MESSAGE(checked << " kept answers checked against fresh solves, " << found << " of them layouts");
  CHECK(checked > 2000);
  CHECK(found > 1000);
  CHECK(found < checked);
}

TEST_CASE("a kept answer serves a lower cap on microbatches in flight only where it is what a fresh solve finds") {
  // solve_memo.h's claim across M: an answer solved with min(M, layers) = c
  // holds for a cap c' < c from the solve's same_down_to_in_flight() up,
  // and a search at c' that takes it finds what its own solve would, bit
  // for bit (sigma and layout).
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> share(0.3, 1.2);
  int checked = 0, found = 0, refused = 0;
  for (int instance = 0; instance < 300; ++instance) {
    const Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    const int layers = static_cast<int>(profile.layers.size());
    if (layers < 3) continue;
    const int lower = std::uniform_int_distribution<int>(1, layers - 1)(rng);
    CostModel high(profile, layers + 2), low(profile, lower);
    if (gpus < 4 && instance % 4 == 3) {
      high.set_tensor_parallel_nodes(2);
      low.set_tensor_parallel_nodes(2);
    }
    detail::TemplateSearch first(high, 4), second(low, 4);
    detail::SolveMemo memo;
    CHECK_FALSE(memo.serve(high));
    const int rows = 4 * gpus;
    std::vector<double> periods;
    const auto solve_and_keep = [&](double bound) {
      first.solve(bound, rows);
      for (int n = 1; n <= 4; ++n) {
        const auto answer = first.best(n);
        if (answer) periods.push_back(high.suffix_bottleneck_ms(answer->second));
        memo.record(n, bound, answer, high, first.same_down_to_in_flight());
        refused += first.same_down_to_in_flight() > lower;
      }
    };
    solve_and_keep(std::numeric_limits<double>::infinity());
    for (int k = 0; k < 6 && !periods.empty(); ++k) {
      solve_and_keep(periods[rng() % periods.size()] * std::uniform_real_distribution<double>(0.6, 1.0)(rng));
    }
    CHECK_FALSE(memo.serve(low));  // none at this cap yet
    if (periods.empty()) continue;
    const double widest = *std::max_element(periods.begin(), periods.end());
    for (int q = 0; q < 12; ++q) {
      const double b = widest * share(rng);
      second.solve(b, rows);
      for (int n = 1; n <= 4; ++n) {
        const auto hit = memo.find_at(n, b);
        if (!hit) continue;
        CAPTURE(instance);
        CAPTURE(n);
        check_same_answer(hit->found, second.best(n), checked, found);
      }
    }
  }
  MESSAGE(checked << " answers kept at a higher cap checked against fresh solves, " << found
                  << " of them layouts; " << refused << " refused to the lower cap");
  CHECK(checked > 1000);
  CHECK(found > 500);
  CHECK(refused > 100);
}

TEST_CASE("a solve just under the last one, where only the round trips tighten, answers as a fresh solve does") {
  // TemplateSearch updates the last solve's table where the new bound is
  // no higher, no stage's compute and no transfer lies between the two,
  // and the GPU limit is no larger than the table's (that of the last full
  // solve, which updates on fewer GPUs keep). Walks make such solves one after
  // another (each bound just under the last answer's period): every
  // answer must be what a search that sweeps anew finds, bit for bit.
  // Uniform blocks between a first and a last layer of their own, as in a
  // GPT: stages of equal blocks compute alike, and suffixes of many stages
  // average to many periods in between.
  std::mt19937_64 rng(20261204);
  std::uniform_int_distribution<int> microbatches(1, 12);
  std::int64_t tightened = 0, checked = 0, found = 0;
  constexpr int kNodes = 6;
  for (int instance = 0; instance < 200; ++instance) {
    const int gpus = std::array{1, 2, 4}[instance % 3];
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.min_layers = 10;
    options.max_layers = 16;
    options.memory_bound = instance % 2 == 1;
    Profile profile = test::random_profile(rng, options);
    for (std::size_t i = 2; i + 1 < profile.layers.size(); ++i) profile.layers[i] = profile.layers[1];
    // Slow links, on some: the suffixes' round trips then set most periods.
    if (instance % 5 < 3) profile.hardware.inter_node_bytes_per_s /= 100;
    CostModel cost(profile, microbatches(rng));
    if (gpus < 4 && instance % 4 == 3) cost.set_tensor_parallel_nodes(2);
    // Every link's time one way, inside nodes and between them at each degree.
    std::vector<double> links;
    for (int e = 1; e < cost.layers(); ++e) {
      links.push_back(cost.transfer_ms(e, true));
      for (int t : cost.degrees()) links.push_back(cost.transfer_ms(e, false, t));
    }
    // Solves `search` at `bound` on `limit` GPUs and checks every answer
    // against a search that sweeps anew; the largest period among them.
    const auto solve_and_check = [&](detail::TemplateSearch& search, double bound, int limit) {
      search.solve(bound, limit);
      detail::TemplateSearch fresh(cost, kNodes);
      fresh.solve(bound, limit);
      double widest = 0;
      for (int n = 1; n <= kNodes; ++n) {
        const auto a = search.best(n), b = fresh.best(n);
        CAPTURE(instance);
        CAPTURE(bound);
        CAPTURE(n);
        check_same_answer(a, b, checked, found);
        if (a) widest = std::max(widest, cost.suffix_bottleneck_ms(a->second));
      }
      return widest;
    };
    detail::TemplateSearch walked(cost, kNodes);
    int limit = kNodes * gpus;
    double bound = std::numeric_limits<double>::infinity();
    for (int step = 0; step < 40; ++step) {
      const double widest = solve_and_check(walked, bound, limit);
      if (widest == 0) break;
      // Just under the widest answer's period, as a walk goes; or a little
      // further, past a few more suffixes' round trips; or just under the
      // slowest link below that, which then no longer passes (a full
      // solve: a value may rise without its round trip).
      bound = widest * (1 - (step % 3 == 2 ? 1e-4 : 1e-12));
      if (step % 7 == 6) {
        double link = 0;
        for (const double c : links) {
          if (c < bound) link = std::max(link, c);
        }
        if (link > 0) bound = link * (1 - 1e-12);
      }
      if (rng() % 4 == 0) limit = std::max(1, limit - static_cast<int>(rng() % 3));
    }
    tightened += walked.tightened_solves();
    // The same bounds on every GPU and on fewer, by turns: an update on
    // fewer keeps the table on all of them, which the next solve, on all
    // of them again, updates too.
    detail::TemplateSearch alternating(cost, kNodes);
    std::uniform_int_distribution<int> fewer(1, kNodes * gpus);
    bound = std::numeric_limits<double>::infinity();
    for (int step = 0; step < 40; ++step) {
      const double widest = solve_and_check(alternating, bound, step % 2 == 0 ? kNodes * gpus : fewer(rng));
      if (widest == 0 && step % 2 == 0) break;
      if (widest > 0) bound = widest * (1 - 1e-12);
    }
    tightened += alternating.tightened_solves();
    // Bounds just above and just under each link in turn: a link that no
    // longer passes while nothing else changes.
    std::sort(links.begin(), links.end(), std::greater<>());
    detail::TemplateSearch straddled(cost, kNodes);
    for (const double c : links) {
      for (const double at : {c * (1 + 1e-12), c * (1 - 1e-12)}) solve_and_check(straddled, at, kNodes * gpus);
    }
    tightened += straddled.tightened_solves();
  }
  MESSAGE(checked << " answers checked, " << found << " of them layouts; " << tightened
                  << " solves updated the last one's table");
  CHECK(found > 2000);
  CHECK(tightened > 300);
}

TEST_CASE("a solve's answer for n nodes does not depend on the GPU limit it was solved under") {
  // A state whose prefix stages under the bound cannot cover on the GPUs its
  // suffix leaves lies on no layout within the limit, and is not swept: the
  // answers within the limit stay the same, layout and sigma bit for bit.
  std::mt19937_64 rng(20261201);
  std::uniform_int_distribution<int> microbatches(1, 12);
  std::uniform_real_distribution<double> share(0.4, 1.1);
  int checked = 0, found = 0;
  for (int instance = 0; instance < 200; ++instance) {
    const Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    CostModel cost(profile, microbatches(rng));
    if (gpus < 4 && instance % 4 == 3) cost.set_tensor_parallel_nodes(2);
    detail::TemplateSearch wide(cost, 4), narrow(cost, 4);
    wide.solve(std::numeric_limits<double>::infinity(), 4 * gpus);
    const auto loosest = wide.best(4);
    if (!loosest) continue;
    const double period = cost.suffix_bottleneck_ms(loosest->second);
    for (int q = 0; q < 4; ++q) {
      const double bound = q == 0 ? std::numeric_limits<double>::infinity() : period * share(rng);
      wide.solve(bound, 4 * gpus);
      for (int n = 1; n <= 4; ++n) {
        narrow.solve(bound, n * gpus);
        const auto a = wide.best(n), b = narrow.best(n);
        CAPTURE(instance);
        CAPTURE(n);
        check_same_answer(a, b, checked, found);
      }
    }
  }
  MESSAGE(checked << " answers checked, " << found << " of them layouts");
  CHECK(found > 500);
}

TEST_CASE("templates searched after a search at another M, taking its seeds and its answers, against brute force") {
  // The rounds of instantiation over M: a search given `earlier` and the
  // memo of that search takes its templates as seeds and its programme's
  // answers wherever they hold (the same programme when both M reach the
  // layer count). It must stay exact, and spend fewer solves than one given
  // the seeds alone.
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<int> microbatches(1, 12);
  int compared = 0, shared = 0;
  std::int64_t solves_remembering = 0, solves_seeded = 0;
  Optimality optimality;
  for (int instance = 0; instance < 600; ++instance) {
    Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    if (instance % 5 == 4) profile.hardware.inter_node_bytes_per_s /= 300;
    CostModel first(profile, microbatches(rng)), second(profile, microbatches(rng));
    const bool spanning = gpus < 4 && instance % 4 == 3;
    if (spanning) {
      first.set_tensor_parallel_nodes(2);
      second.set_tensor_parallel_nodes(2);
    }
    detail::SolveMemo memo;
    const TemplateSet earlier = detail::build_templates_remembering(first, 4, {}, nullptr, memo);
    const TemplateSet set = detail::build_templates_remembering(second, 4, {}, &earlier, memo);
    const TemplateSet seeded = build_templates(second, 4, {}, &earlier);
    const int layers = static_cast<int>(profile.layers.size());
    const bool same_programme =
        std::min(first.microbatches(), layers) == std::min(second.microbatches(), layers);
    // (Spanning nodes, a search with no answers also probes: its solves
    // are not comparable.)
    if (same_programme && !spanning) {
      ++shared;
      solves_remembering += set.search_solves;
      solves_seeded += seeded.search_solves;
    }
    compared += compare_with_brute_force(second, set, 4, instance, optimality, [](const PipelineTemplate&) {});
    // Another programme's answers are dropped.
    CostModel other(profile, second.microbatches());
    other.set_recompute(RecomputePolicy::full);
    CHECK_FALSE(memo.serve(other));
    CHECK(memo.size() == 0);
  }
  MESSAGE("compared " << compared << " templates; " << shared << " searches within nodes took earlier answers: "
                      << solves_remembering << " solves against " << solves_seeded << " with the seeds alone; "
                      << optimality.least << " the least T(M) over every run (" << optimality.certified
                      << " certified)");
  CHECK(compared > 1000);
  CHECK(shared > 100);
  CHECK(solves_remembering < solves_seeded / 2);
  CHECK(optimality.least >= optimality.compared * 99 / 100);
  CHECK(optimality.worst_gap < 0.1);
}

namespace {

// Two template sets equal bit for bit: the same node counts, stages and times.
void check_same_templates(const TemplateSet& a, const TemplateSet& b) {
  REQUIRE(a.templates.size() == b.templates.size());
  for (std::size_t i = 0; i < a.templates.size(); ++i) {
    CHECK(a.templates[i].nodes == b.templates[i].nodes);
    CHECK(a.templates[i].stages == b.templates[i].stages);
    CHECK(a.templates[i].first_microbatch_ms == b.templates[i].first_microbatch_ms);
    CHECK(a.templates[i].bottleneck_ms == b.templates[i].bottleneck_ms);
    CHECK(a.templates[i].max_microbatches == b.templates[i].max_microbatches);
  }
}

}  // namespace

TEST_CASE("rounds over M that share a scratch and the templates' tails search and compose as rounds without them") {
  // Instantiation's rounds pass a SearchScratch (the value table, never
  // filled, and the balanced seeds' splits) and a TailMemo from one M to
  // the next: what they pass must change nothing, bit for bit.
  std::mt19937_64 rng(20261201);
  std::uniform_int_distribution<int> microbatches(1, 12), fault(0, 1), extra(0, 8);
  int searches = 0, compositions = 0;
  for (int instance = 0; instance < 300; ++instance) {
    const Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    std::vector<CostModel> rounds;
    for (int r = 0; r < 3; ++r) {
      rounds.emplace_back(profile, microbatches(rng));
      if (gpus < 4 && instance % 4 == 3) rounds.back().set_tensor_parallel_nodes(2);
      if (instance % 3 == 1) rounds.back().set_gradient_sync(GradientSync::after_backward);
    }
    // Growing node counts: a later search's table may outgrow the kept one.
    const std::array max_nodes{3, 2, 5};
    detail::SolveMemo kept_memo, plain_memo;
    detail::SearchScratch scratch;
    detail::TailMemo tails;
    std::optional<TemplateSet> kept_earlier, plain_earlier;
    const int f = fault(rng), B = f + 1 + extra(rng);
    CAPTURE(instance);
    for (int r = 0; r < 3; ++r) {
      const CostModel& cost = rounds[static_cast<std::size_t>(r)];
      const int n = max_nodes[static_cast<std::size_t>(r)];
      const TemplateSet kept = detail::build_templates_remembering(cost, n, {}, kept_earlier ? &*kept_earlier : nullptr,
                                                                   kept_memo, &scratch);
      const TemplateSet plain =
          detail::build_templates_remembering(cost, n, {}, plain_earlier ? &*plain_earlier : nullptr, plain_memo);
      check_same_templates(kept, plain);
      ++searches;
      kept_earlier = kept;
      plain_earlier = plain;
      if (plain.templates.empty()) continue;
      const auto with_tails = detail::best_composition_on_most_nodes(cost, kept, n, f + 1, B, &tails);
      const auto without = detail::best_composition_on_most_nodes(cost, plain, n, f + 1, B);
      REQUIRE(with_tails.has_value() == without.has_value());
      if (!without) continue;
      CHECK(with_tails->template_nodes == without->template_nodes);
      CHECK(with_tails->microbatches == without->microbatches);
      CHECK(with_tails->iteration_ms == without->iteration_ms);
      ++compositions;
    }
  }
  MESSAGE(searches << " searches and " << compositions << " compositions the same with and without what rounds share");
  CHECK(compositions > 300);
}

TEST_CASE("layers too large for one node: no template within nodes, templates whose stages span two or three") {
  // One GPU per node holds 1000 bytes; each of two layers' state is 1500:
  // a layer needs a stage over two nodes (750 bytes each), both layers
  // over four (and four is more than three nodes allow).
  const Profile profile = test::uniform_profile(2, 1, 1.0, 2.0, 1500, 10, 1000);
  CostModel cost(profile, 4);
  const TemplateSet none = build_templates(cost, 8);
  CHECK(none.templates.empty());
  // The planner says what would help.
  CHECK_THROWS_WITH_AS((void)instantiate(cost, none, {"a", "b", "c", "d"}, 0, 4),
                       doctest::Contains("alone needs the GPUs of 2 nodes: let a stage span them "
                                         "(--tensor-parallel-nodes 2)"),
                       NoPlanError);
  cost.set_tensor_parallel_nodes(2);
  const TemplateSet two = build_templates(cost, 8);
  REQUIRE(two.templates.size() == 1);
  const PipelineTemplate& four = two.templates.front();
  CHECK(four.nodes == 4);
  CHECK(four.stages == std::vector<Stage>{{0, 1, 2, 0, Recompute::none, 2}, {1, 2, 2, 2, Recompute::none, 2}});
  check_layout(cost, four);
  cost.set_tensor_parallel_nodes(3);
  const TemplateSet three = build_templates(cost, 8);
  for (int n = 1; n <= 8; ++n) {
    CAPTURE(n);
    const PipelineTemplate* t = three.find(n);
    CHECK(static_cast<bool>(t) == (n >= 4 && n <= 6));
    if (!t) continue;
    check_layout(cost, *t);
    REQUIRE(t->stages.size() == 2);
    CHECK(t->stages[0].node_span + t->stages[1].node_span == n);
  }
  CHECK_THROWS_AS(cost.set_tensor_parallel_nodes(0), InputError);
  CHECK_THROWS_AS(cost.set_tensor_parallel_nodes(kMaxTensorParallelNodes + 1), InputError);
}

TEST_CASE("one GPU per node: a template for n nodes has exactly n stages, and more layers than nodes are needed") {
  const Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 4);
  const TemplateSet set = build_templates(cost, 8);
  REQUIRE(set.templates.size() == 6);
  for (const auto& t : set.templates) CHECK(static_cast<int>(t.stages.size()) == t.nodes);
  CHECK(set.find(7) == nullptr);
  // Six equal layers on three nodes: two layers each; T(4) = 3 stages x 6
  // ms + 2 transfers x 2 + 3 periods, each stage 0's round trip over its 3
  // microbatches in flight: (18 + 4 transfers) / 3.
  const PipelineTemplate* three = set.find(3);
  REQUIRE(three);
  const double transfer = cost.transfer_ms(2, false);
  CHECK(three->iteration_ms == doctest::Approx(18 + 4 * transfer + 3 * (18 + 4 * transfer) / 3));
}

TEST_CASE("memory decides which node counts have templates") {
  // Each layer's state needs more than one GPU: one node cannot hold the
  // model, two nodes of one GPU can hold half each.
  const Bytes memory = 1000;
  const Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, memory);
  const CostModel cost(profile, 4);
  const TemplateSet set = build_templates(cost, 4);
  CHECK(set.find(1) == nullptr);
  REQUIRE(set.find(2) != nullptr);
  CHECK(set.min_nodes() == 2);
  for (const auto& t : set.templates) CHECK(cost.pipeline_fits(t.stages, 4));
}

TEST_CASE("templates with recomputation against brute force: the least T(M) wherever the suffixes' bound certifies it") {
  std::mt19937_64 rng(20261127);
  std::uniform_int_distribution<int> microbatches(1, 8);
  int compared = 0, recomputing = 0, mixed = 0, only_by_recomputing = 0, selective_chosen = 0, kinds_mixed = 0;
  Optimality optimality;
  for (int instance = 0; instance < 600; ++instance) {
    const int gpus = std::array{1, 2, 4}[instance % 3];
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.max_layers = gpus == 4 ? 5 : 6;
    options.memory_bound = true;
    options.activation_shares_seed = instance % 2 == 0 ? 9000 + static_cast<std::uint64_t>(instance) : 0;
    const Profile profile = test::random_profile(rng, options);
    const int m = microbatches(rng);
    const RecomputePolicy policy = instance % 4 == 3   ? RecomputePolicy::full
                                   : instance % 8 == 1 ? RecomputePolicy::selective
                                                       : RecomputePolicy::automatic;
    CostModel cost(profile, m);
    const TemplateSet without = build_templates(cost, 4);
    cost.set_recompute(policy);
    const TemplateSet set = build_templates(cost, 4);
    compared += compare_with_brute_force(cost, set, 4, instance, optimality, [&](const PipelineTemplate& t) {
      const auto count_of = [&](Recompute r) {
        return std::count_if(t.stages.begin(), t.stages.end(), [r](const Stage& s) { return s.recompute == r; });
      };
      const auto full = count_of(Recompute::full), selective = count_of(Recompute::selective);
      const auto stages = static_cast<long>(t.stages.size());
      if (policy == RecomputePolicy::full) CHECK(full == stages);
      if (policy == RecomputePolicy::selective) CHECK(selective == stages);
      if (policy == RecomputePolicy::automatic) {
        // Choosing is never worse than not recomputing at all.
        const PipelineTemplate* plain = without.find(t.nodes);
        if (plain) CHECK(t.iteration_ms <= plain->iteration_ms + 1e-9);
        only_by_recomputing += plain == nullptr;
        recomputing += full + selective > 0;
        mixed += full + selective > 0 && full + selective < stages;
        selective_chosen += selective > 0;
        kinds_mixed += full > 0 && selective > 0;
      }
    });
  }
  MESSAGE("compared " << compared << " templates; " << recomputing << " recompute somewhere (" << mixed
                      << " some stages only, " << selective_chosen << " selectively, " << kinds_mixed
                      << " both ways); " << only_by_recomputing << " exist only by recomputing; "
                      << optimality.least << " the least T(M) over every run, the others at most "
                      << 100 * optimality.worst_gap << " % above it");
  CHECK(optimality.least >= optimality.compared * 99 / 100);
  CHECK(compared > 300);
  CHECK(recomputing > 20);
  CHECK(mixed > 5);
  CHECK(selective_chosen > 5);
  CHECK(kinds_mixed >= 1);
  CHECK(only_by_recomputing > 5);
}

TEST_CASE("recomputation: each backward also runs the forward; a microbatch in flight keeps only the layers' inputs") {
  // Four layers of 1 ms forward and 2 ms backward, state 400 and 100 bytes
  // of activations each, 1 MiB outputs (uniform_profile).
  const Profile profile = test::uniform_profile(4, 2, 1.0, 2.0, 400, 100, Bytes{1} << 30);
  CostModel cost(profile, 4);
  CHECK(cost.stage_compute_ms(0, 4, 1, Recompute::full) == doctest::Approx(cost.stage_compute_ms(0, 4, 1) + 4.0));
  CHECK(cost.stage_backward_ms(1, 3, 1, Recompute::full) == doctest::Approx(2 * 2.0 + 2 * 1.0));
  CHECK(cost.layer_backward_ms(2, 1, Recompute::full) == doctest::Approx(3.0));
  // Layers 1..3 keep their inputs (layers 0..2's outputs, 1 MiB each) per
  // microbatch, whole; the state halved on two GPUs; one layer's 100 bytes
  // of activations halved.
  CHECK(cost.stage_memory_bytes(1, 4, 2, 5, Recompute::full) == 3 * 400 / 2 + 5 * 3 * (Bytes{1} << 20) + 50);
  CHECK(cost.stage_memory_bytes(0, 1, 1, 5, Recompute::full) == 400 + 100);  // the first layer's input: tokens
  CHECK(cost.stage_max_in_flight(0, 1, 1, Recompute::full) > 1000000);
  CHECK(cost.stage_memory_bytes(1, 4, 2, 5) == (3 * 400 + 5 * 3 * 100 + 1) / 2);
  CHECK(cost.recompute_choices() == std::vector<Recompute>{Recompute::none});
  cost.set_recompute(RecomputePolicy::automatic);
  // The profile records no attention cores: selective would be nothing.
  CHECK(cost.recompute_choices() == std::vector<Recompute>{Recompute::none, Recompute::full});
  CHECK_THROWS_AS(cost.set_recompute(RecomputePolicy::selective), InputError);
  CHECK(recompute_policy_named("auto") == RecomputePolicy::automatic);
  CHECK(recompute_policy_named("selective") == RecomputePolicy::selective);
  CHECK_FALSE(recompute_policy_named("sometimes").has_value());
}

TEST_CASE("selective recomputation: each backward also runs the attention core; microbatches keep the rest") {
  // As above, with attention cores of 0.25 ms and 60 of the 100 bytes on
  // layers 1 and 2; layer 3 has 90 of them.
  Profile profile = test::uniform_profile(4, 2, 1.0, 2.0, 400, 100, Bytes{1} << 30);
  for (int l : {1, 2}) profile.layers[l].attention_forward_ms = 0.25;
  for (int l : {1, 2}) profile.layers[l].attention_activation_bytes = 60;
  profile.layers[3].attention_activation_bytes = 90;
  CostModel cost(profile, 4);
  CHECK(cost.layer_backward_ms(1, 1, Recompute::selective) == doctest::Approx(2.25));
  CHECK(cost.layer_backward_ms(1, 2, Recompute::selective) ==
        doctest::Approx(cost.layer_backward_ms(1, 2) + 0.125));  // split with the heads
  CHECK(cost.stage_compute_ms(0, 4, 1, Recompute::selective) == doctest::Approx(cost.stage_compute_ms(0, 4, 1) + 0.5));
  CHECK(cost.stage_backward_allreduce_ms(0, 4, 2, Recompute::selective) ==
        doctest::Approx(cost.stage_backward_allreduce_ms(0, 4, 2)));
  // Layers 1..3 keep 40 + 40 + 10 bytes a microbatch; the largest attention
  // activations, 90 bytes, halved, return while layer 3's backward runs.
  CHECK(cost.stage_memory_bytes(1, 4, 2, 5, Recompute::selective) == (3 * 400 + 5 * 90) / 2 + 45);
  CHECK(cost.stage_memory_bytes(0, 1, 1, 5, Recompute::selective) == cost.stage_memory_bytes(0, 1, 1, 5));
  cost.set_recompute(RecomputePolicy::automatic);
  CHECK(cost.recompute_choices() == std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full});
  cost.set_recompute(RecomputePolicy::selective);
  CHECK(cost.recompute_choices() == std::vector<Recompute>{Recompute::selective});
  // Memory decides: ceil((state + n kept) / t) + W <= C exactly at the largest n.
  profile.hardware.gpu_memory_bytes = (3 * 400 + 7 * 90) / 2 + 45;
  const CostModel tight(profile, 4);
  CHECK(tight.stage_max_in_flight(1, 4, 2, Recompute::selective) == 7);
  CHECK(tight.stage_max_in_flight(1, 4, 2) == 2);  // 300 bytes a microbatch without
}

TEST_CASE("the template search's threads share rows of a stage count, and the templates do not depend on them") {
  const Profile profile = load_profile(std::string(OOBLECK_SOURCE_DIR) + "/profiles/gpt3-175b-a100.analytic.json");
  CostModel cost(profile, 16);
  cost.set_tensor_parallel_nodes(2);
  std::vector<TemplateSet> by_threads;
  for (const int threads : {1, 2, 3}) {
    set_search_threads(threads);
    by_threads.push_back(build_templates(cost, 24));
  }
  set_search_threads(1);  // (the default)
  CHECK(by_threads[0].search_shared_levels == 0);
  const TemplateSet& one = by_threads[0];
  REQUIRE(!one.templates.empty());
  for (std::size_t i = 1; i < by_threads.size(); ++i) {
    const TemplateSet& many = by_threads[i];
    CAPTURE(i + 1);
    CHECK(many.search_shared_levels > 0);
    CHECK(many.search_solves == one.search_solves);
    CHECK(many.search_states == one.search_states);
    REQUIRE(many.templates.size() == one.templates.size());
    for (std::size_t t = 0; t < one.templates.size(); ++t) {
      CHECK(many.templates[t].nodes == one.templates[t].nodes);
      CHECK(many.templates[t].iteration_ms == one.templates[t].iteration_ms);  // bit for bit
      CHECK(many.templates[t].stages == one.templates[t].stages);
    }
  }
  CHECK_THROWS_AS(set_search_threads(-1), InputError);
}

TEST_CASE("the template search's threads take node counts' interleaved layouts, and the templates do not depend on them") {
  const Profile profile = load_profile(std::string(OOBLECK_SOURCE_DIR) + "/profiles/gpt3-175b-a100.analytic.json");
  CostModel cost(profile, 98);
  cost.set_tensor_parallel_nodes(2);
  cost.set_interleave(2);
  set_search_threads(3);
  const TemplateSet many = build_templates(cost, 48);
  // Node counts finished on three threads, a stage count's rows on one
  // (oobleck-plan's default, with the machine's cores).
  set_search_threads(1);
  set_finishing_threads(3);
  const TemplateSet finished_apart = build_templates(cost, 48);
  set_finishing_threads(-1);  // (the default: as the search's)
  const TemplateSet one = build_templates(cost, 48);
  CHECK(finished_apart.search_shared_levels == 0);
  int interleaved = 0;
  for (const TemplateSet* other : {&many, &finished_apart}) {
    REQUIRE(other->templates.size() == one.templates.size());
    for (std::size_t t = 0; t < one.templates.size(); ++t) {
      CHECK(other->templates[t].nodes == one.templates[t].nodes);
      CHECK(other->templates[t].interleave == one.templates[t].interleave);
      CHECK(other->templates[t].iteration_ms == one.templates[t].iteration_ms);  // bit for bit
      CHECK(other->templates[t].stages == one.templates[t].stages);
    }
  }
  for (const PipelineTemplate& t : one.templates) interleaved += t.interleave > 1;
  MESSAGE(interleaved << " of " << one.templates.size() << " templates interleaved");
  CHECK(interleaved > 0);
  CHECK_THROWS_AS(set_finishing_threads(-2), InputError);
  CHECK_THROWS_AS(set_finishing_threads(257), InputError);
}

TEST_CASE("the threads share the rows an update sweeps again, and the templates do not depend on them") {
  // Large enough that updates (a solve just under the last one) sweep
  // many rows of one stage count again: GPT-3 175B over up to 8 nodes a
  // stage.
  const Profile profile = load_profile(std::string(OOBLECK_SOURCE_DIR) + "/profiles/gpt3-175b-a100.analytic.json");
  CostModel cost(profile, 98);
  cost.set_tensor_parallel_nodes(8);
  set_search_threads(2);
  const TemplateSet many = build_templates(cost, 256);
  set_search_threads(1);  // (the default)
  const TemplateSet one = build_templates(cost, 256);
  MESSAGE(one.search_solves << " solves, " << one.search_updates << " of them updates; "
                            << many.search_shared_update_levels << " of the updates' stage counts shared");
  CHECK(one.search_updates > 10);
  CHECK(one.search_shared_update_levels == 0);
  CHECK(many.search_shared_update_levels > 0);
  CHECK(many.search_updates == one.search_updates);
  CHECK(many.search_states == one.search_states);
  REQUIRE(many.templates.size() == one.templates.size());
  for (std::size_t t = 0; t < one.templates.size(); ++t) {
    CHECK(many.templates[t].iteration_ms == one.templates[t].iteration_ms);  // bit for bit
    CHECK(many.templates[t].stages == one.templates[t].stages);
  }
}

TEST_CASE("of the layouts of least sigma, a solve returns one of least suffix period, against every layout") {
  // One GPU a node, no transfers, and whole-millisecond layers: every
  // layout on n nodes has the same sigma (all the layers' compute), bit for
  // bit, and differs only in its suffix period. A solve under bound K must
  // return, for each n, one whose period is the least of all layouts under
  // K, so that a walk's next bound passes every tie at once.
  std::mt19937_64 rng(20261201);
  std::uniform_int_distribution<int> layer_count(2, 9), layer_ms(1, 4), microbatches(1, 12);
  int checked = 0, ties = 0;
  for (int instance = 0; instance < 200; ++instance) {
    const int layers = layer_count(rng);
    Profile profile = test::uniform_profile(layers, 1, 1.0, 2.0, 1000, 0, Bytes{1} << 30);
    profile.hardware.latency_ms = 0;
    for (auto& layer : profile.layers) {
      layer.forward_ms = layer_ms(rng);
      layer.backward_ms = 2 * layer.forward_ms;
      layer.output_bytes = 0;
    }
    const CostModel cost(profile, microbatches(rng));
    REQUIRE(cost.transfer_ms(1, false) == 0);
    // Every layout on n nodes: a stage a node, so a composition of the layers.
    std::vector<std::vector<std::vector<Stage>>> layouts(layers + 1);
    for (unsigned mask = 0; mask < (1u << (layers - 1)); ++mask) {
      std::vector<Stage> stages;
      int begin = 0;
      for (int l = 1; l <= layers; ++l) {
        if (l == layers || (mask & (1u << (l - 1)))) {
          const int node = static_cast<int>(stages.size());
          stages.push_back({begin, l, 1, node, Recompute::none, 1});
          begin = l;
        }
      }
      layouts[stages.size()].push_back(std::move(stages));
    }
    detail::TemplateSearch search(cost, layers);
    std::vector<double> bounds = {std::numeric_limits<double>::infinity()};
    for (int k = 0; k < 4; ++k) bounds.push_back(std::uniform_real_distribution<double>(1.0, 3.0 * layers)(rng));
    for (const double bound : bounds) {
      search.solve(bound, layers);
      for (int n = 1; n <= layers; ++n) {
        std::optional<double> least_period;
        int under = 0;
        for (const auto& stages : layouts[n]) {
          const double period = cost.suffix_bottleneck_ms(stages);
          if (!(period < bound)) continue;
          ++under;
          if (!least_period || period < *least_period) least_period = period;
        }
        const auto answer = search.best(n);
        CAPTURE(instance);
        CAPTURE(n);
        CAPTURE(bound);
        REQUIRE(answer.has_value() == least_period.has_value());
        if (!answer) continue;
        ++checked;
        ties += under > 1;
        CHECK(answer->first == cost.first_microbatch_ms(layouts[n].front()));
        CHECK(cost.suffix_bottleneck_ms(answer->second) == *least_period);
      }
    }
  }
  MESSAGE(checked << " answers checked, " << ties << " among several layouts of equal sigma");
  CHECK(ties > 1000);
}

TEST_CASE("a solve with kinds that recompute gives each node count the least sigma under its bound, against every layout") {
  // A kind that recomputes is swept only where memory lets its stages reach
  // past every cheaper kind's: its other stages cost no less than a cheaper
  // kind's. Memory-bound random profiles, some layers without an attention
  // core (selective costs what none does there), bounds at random.
  std::mt19937_64 rng(20261202);
  std::uniform_int_distribution<int> microbatches(1, 8);
  int checked = 0, recomputing = 0;
  for (int instance = 0; instance < 120; ++instance) {
    const int gpus = instance % 2 == 0 ? 1 : 2;
    test::RandomProfileOptions options;
    options.gpus_per_node_choices = {gpus};
    options.max_layers = gpus == 1 ? 6 : 4;
    options.memory_bound = true;
    const Profile profile = test::random_profile(rng, options);
    CostModel cost(profile, microbatches(rng));
    cost.set_recompute(RecomputePolicy::automatic);
    constexpr int kNodes = 4;
    struct Layout {
      double period;
      double sigma;
      bool recomputes;
    };
    std::vector<std::vector<Layout>> layouts(kNodes + 1);
    test::for_each_layout(cost, kNodes * gpus, [&](const std::vector<Stage>& stages, int used) {
      if (used % gpus != 0) return;
      const bool recomputes = std::any_of(stages.begin(), stages.end(),
                                          [](const Stage& stage) { return stage.recompute != Recompute::none; });
      layouts[used / gpus].push_back({cost.suffix_bottleneck_ms(stages), cost.first_microbatch_ms(stages), recomputes});
    });
    detail::TemplateSearch search(cost, kNodes);
    std::vector<double> bounds = {std::numeric_limits<double>::infinity()};
    for (int n = 1; n <= kNodes; ++n) {
      for (const Layout& layout : layouts[n]) {
        if (std::uniform_int_distribution<int>(0, 15)(rng) == 0) bounds.push_back(layout.period * 1.000001);
      }
    }
    std::sort(bounds.begin(), bounds.end(), std::greater<>());
    for (const double bound : bounds) {
      search.solve(bound, kNodes * gpus);
      for (int n = 1; n <= kNodes; ++n) {
        std::optional<Layout> least;
        for (const Layout& layout : layouts[n]) {
          if (layout.period < bound && (!least || layout.sigma < least->sigma)) least = layout;
        }
        const auto answer = search.best(n);
        CAPTURE(instance);
        CAPTURE(n);
        CAPTURE(bound);
        REQUIRE(answer.has_value() == least.has_value());
        if (!answer) continue;
        ++checked;
        recomputing += least->recomputes;
        CHECK(answer->first == doctest::Approx(least->sigma).epsilon(1e-12));
        CHECK(cost.suffix_bottleneck_ms(answer->second) < bound);
        CHECK(cost.pipeline_fits(answer->second, cost.microbatches()));
      }
    }
  }
  MESSAGE(checked << " answers checked, " << recomputing << " whose least sigma some layout reaches only by recomputing");
  CHECK(checked > 1000);
  CHECK(recomputing > 100);
}

TEST_CASE("a search below the layer count takes a higher cap's answers and finds the templates it finds without them") {
  // Instantiation's later rounds run at M under the layer count, where the
  // memo holds the answers of rounds at a higher cap on the microbatches in
  // flight. Taken only at a solve's very bound, in its place, they leave
  // every walk as it was: the same templates bit for bit, with fewer
  // solves, or fewer GPUs' rows swept.
  std::mt19937_64 rng(20261203);
  int searches = 0, took = 0;
  std::int64_t solves_taking = 0, solves_alone = 0, states_taking = 0, states_alone = 0;
  for (int instance = 0; instance < 400; ++instance) {
    const Profile profile = memo_instance_profile(rng, instance);
    const int gpus = profile.hardware.gpus_per_node;
    const int layers = static_cast<int>(profile.layers.size());
    if (layers < 3) continue;
    CostModel high(profile, layers + std::uniform_int_distribution<int>(0, 20)(rng));
    CostModel middle(profile, std::uniform_int_distribution<int>(2, layers - 1)(rng));
    CostModel low(profile, std::uniform_int_distribution<int>(1, middle.microbatches() - 1)(rng));
    if (gpus < 4 && instance % 4 == 3) {
      for (CostModel* cost : {&high, &middle, &low}) cost->set_tensor_parallel_nodes(2);
    }
    const int max_nodes = 4;
    detail::SolveMemo memo;
    const TemplateSet first = detail::build_templates_remembering(high, max_nodes, {}, nullptr, memo);
    std::optional<TemplateSet> earlier = first;
    for (const CostModel* cost : {&middle, &low}) {
      CAPTURE(instance);
      detail::SolveMemo alone_memo;
      const TemplateSet taking = detail::build_templates_remembering(*cost, max_nodes, {}, &*earlier, memo);
      const TemplateSet alone = detail::build_templates_remembering(*cost, max_nodes, {}, &*earlier, alone_memo);
      check_same_templates(taking, alone);
      ++searches;
      took += taking.search_solves < alone.search_solves || taking.search_states < alone.search_states;
      CHECK(taking.search_solves <= alone.search_solves);
      solves_taking += taking.search_solves;
      solves_alone += alone.search_solves;
      states_taking += taking.search_states;
      states_alone += alone.search_states;
      earlier = taking;
    }
  }
  MESSAGE(searches << " searches below the layer count the same with a higher cap's answers; " << took
                   << " took some: " << solves_taking << " solves against " << solves_alone << ", "
                   << states_taking << " states against " << states_alone);
  CHECK(searches > 500);
  CHECK(took > 100);
  CHECK(solves_taking < solves_alone);
}

TEST_CASE("the finishing pool finishes every node count handed over, once, and passes a failure on") {
  for (const int early : {0, 1, 3}) {
    for (const int threads : {1, 2, 4}) {
      std::vector<std::atomic<int>> finished(50);
      {
        detail::FinishingPool pool([&](int n) { ++finished[static_cast<std::size_t>(n)]; }, early);
        for (int n = 1; n < 30; ++n) pool.hand_over(n);
        for (int n = 30; n < 50; ++n) pool.hand_over(n);
        pool.finish_all(threads);
      }
      CHECK(finished[0] == 0);
      for (int n = 1; n < 50; ++n) CHECK(finished[static_cast<std::size_t>(n)] == 1);
    }
    detail::FinishingPool failing(
        [](int n) {
          if (n == 7) throw InputError("node count 7");
        },
        early);
    for (int n = 1; n < 20; ++n) failing.hand_over(n);
    CHECK_THROWS_WITH_AS(failing.finish_all(2), "node count 7", InputError);
  }
  // Dropped unfinished (a search that failed first): the pool joins its threads and finishes nothing more.
  std::atomic<int> count{0};
  {
    detail::FinishingPool dropped([&](int) { ++count; }, 2);
    dropped.hand_over(1);
  }
  CHECK(count <= 1);
}
