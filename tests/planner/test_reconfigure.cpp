// Reconfiguration: the Oobleck failure case, invariants over random sequences
// of losses and arrivals, and the cases where no plan exists.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
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

// node -> layers it holds
std::map<std::string, std::set<int>> holdings(const Plan& plan) {
  std::map<std::string, std::set<int>> out;
  for (const auto& p : plan.pipelines) {
    for (std::size_t r = 0; r < p.nodes.size(); ++r) out[p.nodes[r]];
    for (const auto& s : p.stages) {
      for (int l = s.layer_begin; l < s.layer_end; ++l) out[p.nodes[s.node]].insert(l);
    }
  }
  for (const auto& n : plan.spare_nodes) out[n];
  return out;
}

std::set<std::string> all_nodes(const Plan& plan) {
  std::set<std::string> out;
  for (const auto& [node, layers] : holdings(plan)) out.insert(node);
  return out;
}

// Whether some multiset of templates with count in [1, limit] adds up to `nodes`.
int max_pipelines_brute(const TemplateSet& templates, int nodes, int limit) {
  std::vector<std::set<int>> counts(nodes + 1);  // node total -> achievable pipeline counts
  counts[0].insert(0);
  for (int m = 1; m <= nodes; ++m) {
    for (const auto& t : templates.templates) {
      if (t.nodes > m) continue;
      for (int c : counts[m - t.nodes]) {
        if (c + 1 <= limit) counts[m].insert(c + 1);
      }
    }
  }
  return counts[nodes].empty() ? 0 : *counts[nodes].rbegin();
}

// Pipelines that lost no node and still have their template's layout.
std::vector<const Pipeline*> intact_pipelines(const TemplateSet& templates, const Plan& before,
                                              const std::vector<std::string>& lost) {
  std::vector<const Pipeline*> out;
  for (const auto& p : before.pipelines) {
    bool intact = true;
    for (const auto& n : p.nodes) intact = intact && std::find(lost.begin(), lost.end(), n) == lost.end();
    if (intact && templates.find(p.template_nodes) && templates.find(p.template_nodes)->stages == p.stages) {
      out.push_back(&p);
    }
  }
  return out;
}

// Transfers: exactly the layers each node of the new plan holds and did
// not before, each from a surviving node that held it.
void check_transfers(const CostModel& cost, std::map<std::string, std::set<int>> old_holdings,
                     const std::set<std::string>& survivors, const Reconfiguration& result) {
  std::set<std::pair<std::string, int>> needed, delivered;
  for (const auto& [node, layers] : holdings(result.plan)) {
    for (int l : layers) {
      if (!old_holdings[node].count(l)) needed.insert({node, l});
    }
  }
  Bytes bytes = 0;
  for (const auto& t : result.transfers) {
    CHECK(survivors.count(t.from_node));
    CHECK(old_holdings[t.from_node].count(t.layer));
    CHECK(t.bytes == cost.layer_state_bytes(t.layer));
    CHECK(delivered.insert({t.to_node, t.layer}).second);
    bytes += t.bytes;
  }
  CHECK(delivered == needed);
  CHECK(result.copy_bytes == bytes);
  CHECK((result.copy_ms > 0) == !result.transfers.empty());
}

// What each node holds before a reconfiguration, as the planner sees it:
// nodes that join hold nothing, even under a lost node's name.
std::map<std::string, std::set<int>> holdings_before(const Plan& before, const std::vector<std::string>& lost,
                                                     const std::vector<std::string>& added) {
  auto out = holdings(before);
  for (const auto& n : added) out[n].clear();
  for (const auto& n : lost) {
    if (std::find(added.begin(), added.end(), n) == added.end()) out.erase(n);
  }
  return out;
}

// The random sequences' profiles: 3 to 7 layers on 1- or 2-GPU nodes,
// memory-bound in every other sequence.
Profile sequence_profile(std::mt19937_64& rng, int sequence) {
  test::RandomProfileOptions options;
  options.min_layers = 3;
  options.max_layers = 7;
  options.gpus_per_node_choices = {1, 2};
  options.memory_bound = sequence % 2 == 0;
  options.allreduce_table_seed = sequence % 3 == 1 ? 500 + static_cast<std::uint64_t>(sequence) : 0;
  return test::random_profile(rng, options);
}

int random_below(std::mt19937_64& rng, int bound) {
  return static_cast<int>(std::uniform_real_distribution<double>(0, 1)(rng) * bound);
}

// Where a random sequence of changes starts: a random profile on 4 to 9
// nodes, f in [0, 2], B in [f + 1, f + 10], its templates and first plan
// (`planned` false where there is none). It holds the cost model's profile,
// so it stays where it is made.
struct SequenceStart {
  Profile profile;
  int nodes, f, B;
  CostModel cost;
  TemplateSet templates;
  Plan plan;
  bool planned = false;

  SequenceStart(std::mt19937_64& rng, int sequence)
      : profile(sequence_profile(rng, sequence)),
        nodes(4 + random_below(rng, 6)),
        f(random_below(rng, 3)),
        B(f + 1 + random_below(rng, 10)),
        cost(profile, std::max(1, B / (f + 1))),
        templates(build_templates(cost, 16)) {
    try {
      plan = instantiate(cost, templates, names(nodes), f, B);
      planned = true;
    } catch (const NoPlanError&) {
    }
  }
  SequenceStart(const SequenceStart&) = delete;
  SequenceStart& operator=(const SequenceStart&) = delete;
};

// Returns whether the kept-pipelines comparison applied.
bool check_reconfiguration(const CostModel& cost, const TemplateSet& templates, const Plan& before,
                           const std::vector<std::string>& lost, const std::vector<std::string>& added,
                           const Reconfiguration& result, bool replan_all = false) {
  const Plan& after = result.plan;
  auto old_holdings = holdings_before(before, lost, added);
  std::set<std::string> survivors = all_nodes(before);
  for (const auto& n : lost) survivors.erase(n);
  survivors.insert(added.begin(), added.end());
  // Every survivor is in the plan, nobody else.
  CHECK(all_nodes(after) == survivors);
  // Pipelines first: min(f+1, the most pipelines any subset of survivors can
  // form), stepping down only when memory rules that out; then as many nodes
  // as a plan with that many pipelines can use.
  const int B = before.global_microbatches;
  const int count = static_cast<int>(survivors.size());
  const int used = count - static_cast<int>(after.spare_nodes.size());
  int most = 0;
  for (int m = 1; m <= count; ++m) most = std::max(most, max_pipelines_brute(templates, m, B));
  auto plan_exists = [&](int m, int r) {
    return max_pipelines_brute(templates, m, B) >= r &&
           test::brute_force_instantiation(cost, templates, m, r, B).has_value();
  };
  int required = std::min(before.fault_tolerance + 1, most);
  int most_nodes = 0;
  for (; required >= 1 && most_nodes == 0; --required) {
    for (int m = count; m >= 1 && most_nodes == 0; --m) {
      if (plan_exists(m, required)) most_nodes = m;
    }
  }
  ++required;
  CHECK(used == most_nodes);
  // Batch kept, every pipeline fed.
  int total = 0;
  for (const auto& p : after.pipelines) {
    CHECK(p.microbatches >= 1);
    total += p.microbatches;
    CHECK(templates.find(p.template_nodes));
    CHECK(p.stages == templates.find(p.template_nodes)->stages);
  }
  CHECK(total == B);
  CHECK(static_cast<int>(after.pipelines.size()) >= required);
  // Throughput: never better than the best plan for the survivors; with
  // replan_all exactly that. Otherwise, when the affected pipelines' nodes
  // and the new ones can be composed next to every intact pipeline, the
  // intact pipelines stay untouched and the rest is the best such composition.
  const auto best = test::brute_force_instantiation(cost, templates, used, required, B);
  REQUIRE(best);
  const double objective = test::plan_objective_ms(cost, after);
  CHECK(objective >= *best * (1 - 1e-9));
  CHECK(after.iteration_ms == doctest::Approx(test::synced_iteration_ms(cost, after)).epsilon(1e-12));
  bool compared_keeping = false;
  if (replan_all) {
    CHECK(objective == doctest::Approx(*best).epsilon(1e-9));
  } else {
    const auto intact = intact_pipelines(templates, before, lost);
    std::vector<int> fixed;
    int fixed_nodes = 0;
    for (const auto* p : intact) {
      fixed.push_back(p->template_nodes);
      fixed_nodes += p->template_nodes;
    }
    const auto keeping = used >= fixed_nodes
                             ? test::brute_force_instantiation(cost, templates, used - fixed_nodes, required, B, fixed)
                             : std::nullopt;
    if (keeping) {
      compared_keeping = !intact.empty();
      CHECK(objective == doctest::Approx(*keeping).epsilon(1e-9));
      for (const auto* p : intact) {
        bool kept = false;
        for (const auto& q : after.pipelines) kept = kept || q.nodes == p->nodes;
        CHECK(kept);
      }
    }
  }
  check_transfers(cost, old_holdings, survivors, result);
  // Placement copies the fewest bytes for this composition: every way of
  // putting the survivors into its slots, for small clusters.
  if (survivors.size() <= 7) {
    struct Slot {
      std::set<int> layers;  // empty: spare
    };
    std::vector<Slot> slots;
    for (const auto& p : after.pipelines) {
      for (int r = 0; r < p.template_nodes; ++r) {
        Slot slot;
        for (const auto& st : p.stages) {
          if (st.node == r) {
            for (int l = st.layer_begin; l < st.layer_end; ++l) slot.layers.insert(l);
          }
        }
        slots.push_back(slot);
      }
    }
    slots.resize(survivors.size());
    std::vector<std::string> order(survivors.begin(), survivors.end());
    Bytes least = -1;
    std::vector<int> perm(order.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      Bytes fetched = 0;
      for (std::size_t i = 0; i < order.size(); ++i) {
        for (int l : slots[perm[i]].layers) {
          if (!old_holdings[order[i]].count(l)) fetched += cost.layer_state_bytes(l);
        }
      }
      if (least < 0 || fetched < least) least = fetched;
    } while (std::next_permutation(perm.begin(), perm.end()));
    CHECK(result.copy_bytes == least);
  }
  return compared_keeping;
}

}  // namespace

TEST_CASE("Oobleck's failure case: 8 nodes, 2-node minimum, f = 3, one loss in each of two pipelines") {
  // Four layers whose state needs two GPUs: no 1-node template exists.
  const Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 1000);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 8);
  REQUIRE(templates.min_nodes() == 2);
  const Plan plan = instantiate(cost, templates, names(8), 3, 16);
  REQUIRE(plan.pipelines.size() == 4);
  for (const auto& p : plan.pipelines) REQUIRE(p.template_nodes == 2);

  SUBCASE("the two orphans hold complementary halves: they pair up without copies") {
    const std::string first = plan.pipelines[0].nodes[0], second = plan.pipelines[1].nodes[1];
    const auto result = reconfigure(cost, templates, plan, {first, second}, {});
    CHECK(result.plan.pipelines.size() == 3);
    for (const auto& p : result.plan.pipelines) CHECK(p.template_nodes == 2);
    CHECK(result.plan.spare_nodes.empty());
    CHECK(result.transfers.empty());
    check_reconfiguration(cost, templates, plan, {first, second}, {}, result);
  }
  SUBCASE("the two orphans hold the same half: one fetches the other half from a replica") {
    const std::string first = plan.pipelines[0].nodes[0], second = plan.pipelines[1].nodes[0];
    const auto result = reconfigure(cost, templates, plan, {first, second}, {});
    CHECK(result.plan.pipelines.size() == 3);
    CHECK(result.plan.spare_nodes.empty());
    CHECK_FALSE(result.transfers.empty());
    check_reconfiguration(cost, templates, plan, {first, second}, {}, result);
  }
}

TEST_CASE("no plan: every replica of some layers lost, or too few nodes") {
  const Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 1000);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 4);
  const Plan plan = instantiate(cost, templates, names(4), 1, 8);
  REQUIRE(plan.pipelines.size() == 2);
  const std::string a = plan.pipelines[0].nodes[0], b = plan.pipelines[1].nodes[0];
  CHECK_THROWS_WITH_AS((void)reconfigure(cost, templates, plan, {a, b}, {}),
                       doctest::Contains("no surviving replica"), NoPlanError);
  CHECK_THROWS_WITH_AS((void)reconfigure(cost, templates, plan, {a, b}, {}), doctest::Contains("checkpoint"),
                       NoPlanError);
  // The survivors still hold every layer, but the templates (here: of a
  // machine with less memory) need more nodes than survive.
  const Profile smaller = test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 700);
  const CostModel smaller_cost(smaller, 4);
  const TemplateSet bigger_templates = build_templates(smaller_cost, 4);
  REQUIRE(bigger_templates.min_nodes() == 4);
  const std::string c = plan.pipelines[1].nodes[1];
  CHECK_THROWS_WITH_AS((void)reconfigure(smaller_cost, bigger_templates, plan, {a, c}, {}),
                       doctest::Contains("2 nodes survive but the smallest pipeline template needs 4"), NoPlanError);
  CHECK_THROWS_AS((void)reconfigure(cost, templates, plan, {"nobody"}, {}), InputError);
  CHECK_THROWS_AS((void)reconfigure(cost, templates, plan, {}, {a}), InputError);
}

TEST_CASE("added nodes join: a new node lets a shrunken pipeline grow back") {
  const Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 400, 10, 1000);
  const CostModel cost(profile, 6);
  const TemplateSet templates = build_templates(cost, 12);
  const Plan plan = instantiate(cost, templates, names(6), 1, 12);
  const std::string victim = plan.pipelines[0].nodes[0];
  const auto shrunk = reconfigure(cost, templates, plan, {victim}, {});
  check_reconfiguration(cost, templates, plan, {victim}, {}, shrunk);
  const auto grown = reconfigure(cost, templates, shrunk.plan, {}, {"fresh"});
  check_reconfiguration(cost, templates, shrunk.plan, {}, {"fresh"}, grown);
  CHECK(grown.plan.iteration_ms <= shrunk.plan.iteration_ms + 1e-9);
  bool fresh_used = false;
  for (const auto& p : grown.plan.pipelines) fresh_used |= std::count(p.nodes.begin(), p.nodes.end(), "fresh") > 0;
  CHECK(fresh_used);
}

TEST_CASE("reconfiguration invariants over 300 random sequences of losses and arrivals") {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> unit(0, 1);
  int steps = 0, no_plan = 0, with_copies = 0, kept = 0;
  for (int sequence = 0; sequence < 300; ++sequence) {
    const SequenceStart start(rng, sequence);
    if (!start.planned) continue;
    const CostModel& cost = start.cost;
    const TemplateSet& templates = start.templates;
    const int B = start.B;
    Plan plan = start.plan;
    int fresh = 0;
    for (int step = 0; step < 6; ++step) {
      const auto current_nodes = all_nodes(plan);
      std::vector<std::string> present(current_nodes.begin(), current_nodes.end());
      std::shuffle(present.begin(), present.end(), rng);
      std::vector<std::string> lost, added;
      const double kind = unit(rng);
      if (kind < 0.7) {
        const int losses = 1 + (unit(rng) < 0.3);
        for (int i = 0; i < losses && i + 1 < static_cast<int>(present.size()); ++i) lost.push_back(present[i]);
      }
      if (kind > 0.5) {
        const int joins = 1 + (unit(rng) < 0.3);
        for (int i = 0; i < joins; ++i) added.push_back("fresh" + std::to_string(fresh++));
      }
      CAPTURE(sequence);
      CAPTURE(step);
      try {
        const bool replan_all = sequence % 3 == 2;
        ReconfigureOptions how;
        how.replan_all = replan_all;
        const auto result = reconfigure(cost, templates, plan, lost, added, how);
        kept += check_reconfiguration(cost, templates, plan, lost, added, result, replan_all);
        with_copies += !result.transfers.empty();
        plan = result.plan;
        ++steps;
      } catch (const NoPlanError& e) {
        // Only when some layer lost every replica or the survivors fit no template.
        CAPTURE(std::string(e.what()));
        auto held = holdings(plan);
        for (const auto& n : lost) held.erase(n);
        std::set<int> alive;
        for (const auto& [node, layers] : held) alive.insert(layers.begin(), layers.end());
        const int survivors = static_cast<int>(held.size() + added.size());
        bool possible = false;
        for (int m = 1; m <= survivors; ++m) {
          possible |= test::brute_force_instantiation(cost, templates, m, 1, B).has_value();
        }
        CHECK((static_cast<int>(alive.size()) < cost.layers() || !possible));
        ++no_plan;
        break;
      }
    }
  }
  MESSAGE(steps << " reconfigurations checked (" << with_copies << " with state copies, " << kept
                << " keeping intact pipelines next to the best composition of the rest), " << no_plan
                << " sequences ended with no plan");
  CHECK(kept > 300);
  CHECK(steps > 1000);
  CHECK(with_copies > 100);
}

TEST_CASE("gaps in template sizes: fault tolerance comes before using every node") {
  // Templates for 2 and 5 nodes only. Two 5-node pipelines, f = 1; one whole
  // pipeline fails. All 5 survivors make one pipeline; 4 of them make two.
  const Profile profile = test::uniform_profile(10, 1, 1.0, 2.0, 4000, 10, Bytes{1} << 40);
  const CostModel cost(profile, 4);
  const TemplateSet all = build_templates(cost, 10);
  TemplateSet gapped;
  gapped.microbatches = all.microbatches;
  gapped.max_nodes = all.max_nodes;
  gapped.templates = {*all.find(2), *all.find(5)};
  Plan plan;
  plan.fault_tolerance = 1;
  plan.global_microbatches = 8;
  plan.template_microbatches = 4;
  for (int k = 0; k < 2; ++k) {
    Pipeline p;
    p.template_nodes = 5;
    p.microbatches = 4;
    p.stages = gapped.find(5)->stages;
    for (int i = 0; i < 5; ++i) p.nodes.push_back("node" + std::to_string(5 * k + i));
    plan.pipelines.push_back(p);
  }
  const std::vector<std::string> lost = plan.pipelines[1].nodes;
  const auto result = reconfigure(cost, gapped, plan, lost, {});
  CHECK(result.plan.pipelines.size() == 2);
  CHECK(result.plan.spare_nodes.size() == 1);
  for (const auto& p : result.plan.pipelines) CHECK(p.template_nodes == 2);
}

// ------------------------------------------------------------ node speeds

TEST_CASE("reconfiguration at node speeds: never slower than the speed-blind plan split or placed at them") {
  // Random losses and arrivals with random survivors slowed (or sped up):
  // the plan at the speeds keeps every survivor, the batch and the
  // pipeline count, moves state correctly, is priced at the speeds, and is
  // no slower than the speed-blind reconfiguration re-split or re-placed at
  // them (both among its choices); with replan_all, no slower than
  // instantiate_at_speeds on the survivors (exact against brute force on
  // such clusters: test_node_speeds.cpp).
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0, 1);
  int checked = 0, faster = 0, idled = 0;
  for (int sequence = 0; sequence < 200; ++sequence) {
    const SequenceStart start(rng, sequence);
    if (!start.planned) continue;
    const CostModel& cost = start.cost;
    const TemplateSet& templates = start.templates;
    const int f = start.f, B = start.B;
    const Plan& plan = start.plan;
    const auto nodes = all_nodes(plan);
    std::vector<std::string> present(nodes.begin(), nodes.end());
    std::shuffle(present.begin(), present.end(), rng);
    std::vector<std::string> lost{present[0]}, added;
    if (unit(rng) < 0.4) added.push_back("fresh");
    NodeSpeeds speeds;
    for (const auto& n : present) {
      if (unit(rng) < 0.35) speeds[n] = unit(rng) < 0.8 ? 0.2 + 0.7 * unit(rng) : 1.2;
    }
    if (!added.empty() && unit(rng) < 0.5) speeds["fresh"] = 0.5;
    ReconfigureOptions at_speeds;
    at_speeds.replan_all = sequence % 3 == 2;
    at_speeds.node_speeds = speeds;
    ReconfigureOptions blind_options;
    blind_options.replan_all = at_speeds.replan_all;
    CAPTURE(sequence);
    Reconfiguration blind, result;
    try {
      blind = reconfigure(cost, templates, plan, lost, added, blind_options);
    } catch (const NoPlanError&) {
      CHECK_THROWS_AS((void)reconfigure(cost, templates, plan, lost, added, at_speeds), NoPlanError);
      continue;
    }
    result = reconfigure(cost, templates, plan, lost, added, at_speeds);
    std::set<std::string> survivors = nodes;
    survivors.erase(lost[0]);
    survivors.insert(added.begin(), added.end());
    CHECK(all_nodes(result.plan) == survivors);
    int total = 0;
    for (const auto& p : result.plan.pipelines) {
      CHECK(p.microbatches >= 1);
      total += p.microbatches;
      CHECK(p.stages == templates.find(p.template_nodes)->stages);
    }
    CHECK(total == B);
    CHECK(result.plan.pipelines.size() >= std::min<std::size_t>(f + 1, blind.plan.pipelines.size()));
    check_transfers(cost, holdings_before(plan, lost, added), survivors, result);
    NodeSpeeds of_survivors;
    for (const auto& [n, factor] : speeds) {
      if (survivors.count(n)) of_survivors[n] = factor;
    }
    const Milliseconds ms = result.plan.iteration_ms;
    CHECK(ms == doctest::Approx(iteration_ms_at_speeds(cost, result.plan, of_survivors)).epsilon(1e-9));
    const Milliseconds split = split_at_speeds(cost, blind.plan, of_survivors).iteration_ms;
    const Milliseconds placed = apply_node_speeds(cost, blind.plan, of_survivors).iteration_ms;
    CHECK(ms <= split * (1 + 1e-9));
    CHECK(ms <= placed * (1 + 1e-9));
    if (at_speeds.replan_all) {
      std::optional<Milliseconds> remade;
      try {
        const std::vector<std::string> names_left(survivors.begin(), survivors.end());
        remade = instantiate_at_speeds(cost, templates, names_left, f, B, of_survivors).iteration_ms;
      } catch (const NoPlanError&) {  // fewer than f+1 pipelines: reconfigure steps down, instantiate does not
      }
      if (remade) CHECK(ms <= *remade * (1 + 1e-9));
    }
    faster += ms < std::min(split, placed) * (1 - 1e-6);
    for (const auto& n : result.plan.spare_nodes) idled += of_survivors.count(n) && of_survivors.at(n) < 1;
    ++checked;
  }
  MESSAGE(checked << " reconfigurations at node speeds checked, " << faster
                  << " faster than the speed-blind plan re-split or re-placed, " << idled << " slow nodes left idle");
  CHECK(checked > 120);
  CHECK(faster > 10);
}

TEST_CASE("reconfiguration at node speeds: the slow survivor is the one left idle") {
  // Templates of two nodes only; 6 nodes, f = 2: three pipelines. node0 is
  // lost, so two pipelines and a spare remain. Speed-blind, the intact
  // pipelines stay and node0's partner idles; with node4 at 0.3, node4
  // idles and node0's partner takes its place, so that no pipeline is slow.
  const Profile profile = test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 1000);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 2);
  REQUIRE(templates.min_nodes() == 2);
  const Plan plan = instantiate(cost, templates, names(6), 2, 6);
  REQUIRE(plan.pipelines.size() == 3);
  const std::string victim = plan.pipelines[0].nodes[0], partner = plan.pipelines[0].nodes[1];
  const std::string slow = plan.pipelines[2].nodes[0];
  const auto blind = reconfigure(cost, templates, plan, {victim}, {});
  REQUIRE(blind.plan.spare_nodes == std::vector<std::string>{partner});
  ReconfigureOptions options;
  options.node_speeds = {{slow, 0.3}, {victim, 0.5}};  // a lost node's speed is ignored
  const auto result = reconfigure(cost, templates, plan, {victim}, {}, options);
  CHECK(result.plan.spare_nodes == std::vector<std::string>{slow});
  CHECK(result.plan.iteration_ms == doctest::Approx(blind.plan.iteration_ms).epsilon(1e-12));
  CHECK(result.plan.iteration_ms < split_at_speeds(cost, blind.plan, {{slow, 0.3}}).iteration_ms);
  CHECK(result.copy_bytes > 0);  // partner fetches what slow held and it did not
  // Unknown names are bad input, as everywhere speeds are given.
  options.node_speeds = {{"node9", 0.5}};
  CHECK_THROWS_WITH_AS((void)reconfigure(cost, templates, plan, {victim}, {}, options),
                       doctest::Contains("--node-speed: node \"node9\" is not in the cluster"), InputError);
}
