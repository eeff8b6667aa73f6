// Instantiation with node speeds in view: which templates the pipelines get,
// which pipeline each slow node joins, and which nodes stay spares.
//
// Spares. instantiate uses as many nodes as any composition can (n of N);
// the other N - n stay spares. A plan's iteration never gets slower when one
// of its nodes is swapped for a faster one (every term is a node's work over
// its speed, and the split may stay as it was), so the spares are the N - n
// slowest nodes.
//
// Slow nodes. Nodes at speed 1 are interchangeable, so a plan is fixed, up to
// renaming them, by its composition (the multiset of template sizes) and by
// how the K other nodes ("slow", though a factor above 1 is allowed) are
// grouped into pipelines: a partition of them into groups, each group in a
// pipeline of its own. Pipelines of one size are interchangeable while they
// hold no slow node, so each group only chooses a size, and takes the first
// pipeline of that size still without one. Within a pipeline the
// placement, and across pipelines the split, are apply_node_speeds' (exact
// with one stage per node position, node_speeds.cpp). Enumerating every
// composition on n nodes and every partition and choice of sizes is then
// exact. It is done for n <= kMaxExactNodes and K <= kMaxSlowNodes (Bell(K)
// partitions, 4,140 for K = 8) while the compositions number at most
// kMaxCompositions. Beyond, instantiate's composition is kept and the slow
// nodes are placed one at a time, slowest first, each in the pipeline where
// the plan is fastest so far: a simulated cluster of thousands of nodes is
// weighed this way at every slowdown.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>

#include "composition.h"
#include "plan_building.h"

namespace oobleck {
namespace {

constexpr std::size_t kMaxCompositions = 2000;
constexpr int kMaxExactNodes = 64;
constexpr int kMaxSlowNodes = 8;
constexpr std::int64_t kMaxCompositionSteps = 200000;

double speed_of(const NodeSpeeds& speeds, const std::string& node) {
  const auto it = speeds.find(node);
  return it == speeds.end() ? 1.0 : it->second;
}

// Every multiset of template sizes (by decreasing size) with `nodes` nodes
// in all and between `least` and `most` parts; empty when there are more
// than kMaxCompositions (or finding them takes over kMaxCompositionSteps).
std::vector<std::vector<int>> compositions(const TemplateSet& templates, int nodes, int least, int most) {
  std::vector<int> sizes;
  for (const auto& t : templates.templates) sizes.push_back(t.nodes);
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  std::vector<std::vector<int>> out;
  std::vector<int> parts;
  bool too_many = false;
  std::int64_t steps = 0;
  std::function<void(std::size_t, int)> go = [&](std::size_t from, int left) {
    too_many = too_many || ++steps > kMaxCompositionSteps;
    if (too_many) return;
    if (left == 0) {
      if (static_cast<int>(parts.size()) >= least) out.push_back(parts);
      too_many = out.size() > kMaxCompositions;
      return;
    }
    if (static_cast<int>(parts.size()) == most) return;
    for (std::size_t i = from; i < sizes.size(); ++i) {
      if (sizes[i] > left) continue;
      parts.push_back(sizes[i]);
      go(i, left - sizes[i]);
      parts.pop_back();
    }
  };
  go(0, nodes);
  if (too_many) out.clear();
  return out;
}

struct Search {
  const CostModel& cost;
  const TemplateSet& templates;
  const NodeSpeeds& speeds;
  int fault_tolerance;
  std::vector<std::string> spare;
  std::optional<Plan> best;

  // The plan with these pipelines' nodes (slow ones placed, the rest filled
  // from `fast` in order), placed and split at the speeds.
  std::optional<Plan> priced(const detail::Composition& composition, std::vector<std::vector<std::string>> groups,
                             const std::vector<std::string>& fast) const {
    std::size_t next = 0;
    for (std::size_t p = 0; p < groups.size(); ++p) {
      while (static_cast<int>(groups[p].size()) < composition.template_nodes[p]) groups[p].push_back(fast.at(next++));
    }
    try {
      return apply_node_speeds(cost,
                               detail::plan_from(cost, templates, composition, groups, spare, fault_tolerance), speeds);
    } catch (const NoPlanError&) {
      return std::nullopt;
    }
  }

  void offer(std::optional<Plan> plan) {
    if (plan && (!best || plan->iteration_ms < best->iteration_ms * (1 - 1e-12))) best = std::move(plan);
  }

  // The pipelines a slow node may join: those holding slow nodes, with
  // room, and the first empty one of each size (the others are the same).
  static std::vector<std::size_t> joinable(const detail::Composition& composition,
                                           const std::vector<std::vector<std::string>>& groups) {
    std::vector<std::size_t> out;
    int last_size = -1;
    for (std::size_t p = 0; p < groups.size(); ++p) {
      const int size = composition.template_nodes[p];
      if (static_cast<int>(groups[p].size()) >= size) continue;
      if (groups[p].empty()) {
        if (size == last_size) continue;
        last_size = size;
      }
      out.push_back(p);
    }
    return out;
  }

  // Every partition of `slow` into groups, each group in its own pipeline
  // (a size chosen, its first pipeline without a group).
  void every_grouping(const detail::Composition& composition, const std::vector<std::string>& slow,
                      const std::vector<std::string>& fast) {
    const std::size_t count = composition.template_nodes.size();
    std::vector<std::vector<std::string>> groups(count);
    std::function<void(std::size_t)> place = [&](std::size_t k) {
      if (k == slow.size()) {
        offer(priced(composition, groups, fast));
        return;
      }
      for (std::size_t p : joinable(composition, groups)) {
        groups[p].push_back(slow[k]);
        place(k + 1);
        groups[p].pop_back();
      }
    };
    place(0);
  }

  // Slowest first, each slow node where the plan so far is fastest.
  void one_at_a_time(const detail::Composition& composition, const std::vector<std::string>& slow,
                     const std::vector<std::string>& fast) {
    const std::size_t count = composition.template_nodes.size();
    std::vector<std::vector<std::string>> groups(count);
    for (std::size_t k = 0; k < slow.size(); ++k) {
      std::optional<Plan> chosen;
      std::size_t where = count;
      // The slow nodes not yet placed fill what is left, after the fast ones.
      std::vector<std::string> others = fast;
      others.insert(others.end(), slow.begin() + static_cast<std::ptrdiff_t>(k) + 1, slow.end());
      for (std::size_t p : joinable(composition, groups)) {
        groups[p].push_back(slow[k]);
        auto plan = priced(composition, groups, others);
        groups[p].pop_back();
        if (plan && (!chosen || plan->iteration_ms < chosen->iteration_ms * (1 - 1e-12))) {
          chosen = std::move(plan);
          where = p;
        }
      }
      if (where == count) return;
      groups[where].push_back(slow[k]);
      if (k + 1 == slow.size()) offer(std::move(chosen));
    }
  }
};

}  // namespace

Plan instantiate_at_speeds(const CostModel& cost, const TemplateSet& templates, const std::vector<std::string>& nodes,
                           int fault_tolerance, int global_microbatches, const NodeSpeeds& speeds) {
  Plan blind = instantiate(cost, templates, nodes, fault_tolerance, global_microbatches);
  check_plain_pipelines(blind);
  check_node_speeds(speeds, nodes, "--node-speed");
  // The slowest nodes are the spares (stable: ties keep the given order).
  std::vector<std::string> ranked = nodes;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const auto& a, const auto& b) { return speed_of(speeds, a) > speed_of(speeds, b); });
  const std::size_t used = nodes.size() - blind.spare_nodes.size();
  Search search{cost, templates, speeds, fault_tolerance,
                std::vector<std::string>(ranked.begin() + static_cast<std::ptrdiff_t>(used), ranked.end()), {}};
  std::vector<std::string> slow, fast;
  for (const auto& n : nodes) {
    if (std::find(search.spare.begin(), search.spare.end(), n) != search.spare.end()) continue;
    (speed_of(speeds, n) == 1.0 ? fast : slow).push_back(n);
  }
  if (slow.empty()) {
    blind.spare_nodes = search.spare;
    std::size_t next = 0;
    for (auto& p : blind.pipelines) {
      for (auto& n : p.nodes) n = fast.at(next++);
    }
    return blind;
  }
  std::stable_sort(slow.begin(), slow.end(),
                   [&](const auto& a, const auto& b) { return speed_of(speeds, a) < speed_of(speeds, b); });
  // Never worse than instantiate's own plan placed and split at the speeds.
  try {
    search.offer(apply_node_speeds(cost, blind, speeds));
  } catch (const NoPlanError&) {
  }
  const bool exact = static_cast<int>(used) <= kMaxExactNodes && static_cast<int>(slow.size()) <= kMaxSlowNodes;
  std::vector<std::vector<int>> candidates;
  if (exact) candidates = compositions(templates, static_cast<int>(used), fault_tolerance + 1, global_microbatches);
  if (candidates.empty()) {
    std::vector<int> own;
    for (const auto& p : blind.pipelines) own.push_back(p.template_nodes);
    candidates.push_back(std::move(own));
  }
  for (auto& sizes : candidates) {
    const detail::Composition composition =
        detail::evaluate_composition(cost, templates, std::move(sizes), global_microbatches);
    if (composition.microbatches.empty()) continue;
    if (exact) {
      search.every_grouping(composition, slow, fast);
    } else {
      search.one_at_a_time(composition, slow, fast);
    }
  }
  if (!search.best) throw NoPlanError("no plan fits the pipelines' memory at these node speeds");
  return std::move(*search.best);
}

}  // namespace oobleck
