// Reconfiguration after nodes leave or join.
//
// 1. The survivors (old nodes not lost, then the added ones) must still hold
//    every layer somewhere; otherwise the state is gone and no plan exists.
// 2. Target: the most survivors any composition can use (all, when possible)
//    and the pipeline count to keep, min(f+1, most pipelines they can form).
// 3. The composition. By default the intact pipelines (no node lost, layout
//    unchanged) stay; the pool of the affected pipelines' survivors, spare
//    and added nodes is composed optimally next to them. When the pool alone
//    cannot reach the target, intact pipelines join the pool, fewest first
//    (a merge or a borrow, in Oobleck's terms). With replan_all, everything
//    is composed afresh.
// 4. The placement: survivors are assigned to the new pipelines' node slots
//    to minimise the bytes of layer state they must fetch: intact pipelines
//    stay as they are; the rest is a minimum-cost assignment, solved exactly
//    as a transportation problem between groups of interchangeable survivors
//    (same layers held) and slots (same layers needed). Each missing layer
//    comes from the surviving holder that has sent least so far.
//    (Steps 1 and 4 are the Survivors of survivors.h.)
// 5. At node speeds (options.node_speeds), each composition is placed twice:
//    for the fewest bytes as above, and with the slowest survivors taken
//    out first as the spares (their pipelines then count as affected). Each
//    placement is split at the speeds, and also placed anew within its
//    pipelines, slowest nodes at the lightest positions (apply_node_speeds,
//    whose derivation is in node_speeds.cpp). With replan_all the plan
//    instantiate_at_speeds makes on the survivors is a choice as well. The
//    speeds change which plan is fastest, never which compositions are
//    weighed, so the cost over speed-blind planning is a few placements and
//    splits per composition.
#include <algorithm>
#include <climits>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <sstream>

#include "composition.h"
#include "plan_building.h"
#include "survivors.h"

namespace oobleck {
namespace {

using detail::Placement;

class Replanner {
 public:
  Replanner(const CostModel& cost, const TemplateSet& templates, const Plan& current,
            const std::vector<std::string>& lost, const std::vector<std::string>& added,
            const ReconfigureOptions& options)
      : cost_(cost),
        templates_(templates),
        current_(current),
        lost_(lost),
        added_(added),
        options_(options),
        survivors_(cost, templates, current, lost, added) {}

  Reconfiguration run() {
    survivors_.check_state_survives();
    if (current_.pipelines_per_node > 1) return run_shared();
    collect_speeds();
    const int count = survivors_.count();
    const int B = current_.global_microbatches;
    const int smallest = templates_.min_nodes();
    if (templates_.templates.empty() || count < smallest) {
      std::ostringstream why;
      why << count << " node" << (count == 1 ? "" : "s") << " survive but the smallest pipeline template needs "
          << (smallest > 0 ? smallest : templates_.max_nodes + 1)
          << " nodes: no plan exists; restart from a checkpoint on more nodes";
      throw NoPlanError(why.str());
    }
    // Keep f+1 pipelines, or as many as any subset of the survivors can form
    // (with gaps in the template sizes, using every node can mean fewer
    // pipelines); then use as many nodes as a plan with that many pipelines
    // can. Memory limits on microbatches may rule out every composition of a
    // node count, and then the requirement steps down.
    int required = std::min(current_.fault_tolerance + 1, detail::most_pipelines(templates_, count, B));
    if (!options_.replan_all) {
      // The global composition is only a fallback here: when keeping intact
      // pipelines works on the most usable nodes, the global search (the
      // costly part on large clusters) would have stopped at that node count
      // too, so it is skipped.
      const int target = detail::usable_nodes(templates_, count, required, B);
      if (target > 0 && detail::may_take(templates_, target, B)) {
        auto options = keep_intact(target, required, std::nullopt);
        if (!options.empty()) return choose_and_finish(options, count - target);
      }
    }
    std::optional<detail::Composition> global;
    while (required >= 1 &&
           !(global = detail::best_composition_on_most_nodes(cost_, templates_, count, required, B))) {
      --required;
    }
    if (!global) {
      throw NoPlanError("no combination of templates (node counts " + detail::describe_sizes(templates_) +
                        ") on up to " + std::to_string(count) + " surviving nodes can take " + std::to_string(B) +
                        " microbatches within memory; restart from a checkpoint");
    }
    int target = 0;
    for (int size : global->template_nodes) target += size;
    std::vector<detail::Composition> options =
        options_.replan_all ? std::vector<detail::Composition>{*global} : keep_intact(target, required, global);
    return choose_and_finish(options, count - target);
  }

 private:
  // Pipelines sharing nodes (shared_nodes.cpp): the same template on every
  // surviving node, each keeping its pipelines, the batch split anew; a
  // joining node copies every layer for its pipelines.
  Reconfiguration run_shared() {
    const int r = current_.pipelines_per_node;
    if (cost_.pipelines_per_node() != r) {
      throw std::invalid_argument("reconfigure: the cost model must have the plan's pipelines per node");
    }
    if (!options_.node_speeds.empty()) {
      throw InputError("--node-speed: plans whose pipelines share nodes are made at the profile's speed");
    }
    const int gpus = cost_.gpus_per_node() / r;
    std::optional<PipelineTemplate> shared;
    for (const auto& t : templates_.templates) {
      if (t.nodes == 1 && t.gpus == gpus) shared = t;
    }
    if (!shared) shared = build_shared_node_template(cost_, gpus);
    if (!shared) throw NoPlanError("no pipeline template fits on " + std::to_string(gpus) + " GPUs");
    // (Survivors lists a node once per pipeline on it.)
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (auto& name : survivors_.names()) {
      if (seen.insert(name).second) names.push_back(std::move(name));
    }
    const int required = std::min(current_.fault_tolerance + 1, static_cast<int>(names.size()));
    return survivors_.with_copies(detail::shared_node_plan(cost_, *shared, names, std::max(1, required),
                                                           current_.fault_tolerance,
                                                           current_.global_microbatches));
  }

  // Best iteration time, then fewest bytes copied.
  Reconfiguration choose_and_finish(const std::vector<detail::Composition>& options, int spare_count) {
    if (!speeds_.empty()) return choose_at_speeds(options, spare_count);
    std::optional<std::pair<detail::Composition, Placement>> chosen;
    for (const auto& option : options) {
      Placement placement = survivors_.place(option, spare_count);
      if (!chosen || option.iteration_ms < chosen->first.iteration_ms * (1 - 1e-9) ||
          (option.iteration_ms <= chosen->first.iteration_ms * (1 + 1e-9) && placement.bytes < chosen->second.bytes)) {
        chosen.emplace(option, std::move(placement));
      }
    }
    return survivors_.with_copies(detail::plan_from(cost_, templates_, chosen->first, chosen->second.pipeline_nodes,
                                                    chosen->second.spare, current_.fault_tolerance));
  }

  // The same at node speeds (step 5 above).
  Reconfiguration choose_at_speeds(const std::vector<detail::Composition>& options, int spare_count) const {
    std::optional<Reconfiguration> best;
    const auto offer = [&](auto make) {
      try {
        Reconfiguration r = survivors_.with_copies(make());
        const Milliseconds ms = r.plan.iteration_ms, least = best ? best->plan.iteration_ms : 0;
        if (!best || ms < least * (1 - 1e-9) || (ms <= least * (1 + 1e-9) && r.copy_bytes < best->copy_bytes)) {
          best = std::move(r);
        }
      } catch (const NoPlanError&) {  // no split fits memory: not a choice
      }
    };
    for (const auto& option : options) {
      for (const bool slowest_idle : {false, true}) {
        if (slowest_idle && spare_count == 0) continue;
        const Placement placement = survivors_.place(option, spare_count, slowest_idle ? &speeds_ : nullptr);
        const Plan plan = detail::plan_from(cost_, templates_, option, placement.pipeline_nodes, placement.spare,
                                            current_.fault_tolerance);
        offer([&] { return split_at_speeds(cost_, plan, speeds_); });
        offer([&] { return apply_node_speeds(cost_, plan, speeds_); });
      }
    }
    if (options_.replan_all) {
      offer([&] {
        return instantiate_at_speeds(cost_, templates_, survivors_.names(), current_.fault_tolerance,
                                     current_.global_microbatches, speeds_);
      });
    }
    if (!best) throw NoPlanError("no split of the batch fits the surviving pipelines' memory at these node speeds");
    return std::move(*best);
  }

  // The speeds of survivors not at 1. Every name must be a node of the plan
  // or one that joined; those of lost nodes are ignored.
  void collect_speeds() {
    std::vector<std::string> known(added_);
    for (const auto& p : current_.pipelines) known.insert(known.end(), p.nodes.begin(), p.nodes.end());
    known.insert(known.end(), current_.spare_nodes.begin(), current_.spare_nodes.end());
    check_node_speeds(options_.node_speeds, known, "--node-speed");
    for (const auto& [node, speed] : options_.node_speeds) {
      if (survivors_.contains(node) && speed != 1) speeds_.emplace(node, speed);
    }
  }

  // Intact pipelines: no node lost, layout still their template's.
  [[nodiscard]] std::vector<int> intact_sizes() const {
    std::set<std::string> lost(lost_.begin(), lost_.end());
    std::vector<int> sizes;
    for (const auto& p : current_.pipelines) {
      bool intact = true;
      for (const auto& name : p.nodes) intact = intact && !lost.count(name);
      const PipelineTemplate* t = templates_.find(p.template_nodes);
      if (intact && t && t->stages == p.stages) sizes.push_back(p.template_nodes);
    }
    std::sort(sizes.begin(), sizes.end());
    return sizes;
  }

  // The compositions that keep the most intact pipelines: for k = 0, 1, ...
  // intact pipelines joining the pool, every choice of their sizes, until
  // some choice reaches the target. Past a few thousand choices, the global
  // composition stands in (none when it is not given).
  [[nodiscard]] std::vector<detail::Composition> keep_intact(int target, int required,
                                                             const std::optional<detail::Composition>& global) const {
    const std::vector<int> intact = intact_sizes();
    std::map<int, int> available;
    for (int size : intact) available[size] += 1;
    std::vector<std::pair<int, int>> kinds(available.begin(), available.end());  // size, count
    int intact_nodes = 0;
    for (int size : intact) intact_nodes += size;
    std::vector<detail::Composition> options;
    int tried = 0;
    for (int k = 0; k <= static_cast<int>(intact.size()) && options.empty(); ++k) {
      // Every multiset of k sizes to dissolve.
      std::vector<int> take(kinds.size(), 0);
      std::function<void(std::size_t, int, int)> choose = [&](std::size_t i, int left, int freed) {
        if (tried > 4000) return;
        if (i == kinds.size()) {
          if (left != 0) return;
          ++tried;
          std::vector<int> fixed;
          for (std::size_t j = 0; j < kinds.size(); ++j) fixed.insert(fixed.end(), kinds[j].second - take[j], kinds[j].first);
          const int pool = target - (intact_nodes - freed);
          if (pool < 0) return;
          if (auto c = detail::best_composition(cost_, templates_, pool, required, current_.global_microbatches, fixed)) {
            options.push_back(std::move(*c));
          }
          return;
        }
        for (int n = std::min(left, kinds[i].second); n >= 0; --n) {
          take[i] = n;
          choose(i + 1, left - n, freed + n * kinds[i].first);
        }
        take[i] = 0;
      };
      choose(0, k, 0);
      if (tried > 4000) break;
    }
    if (options.empty() && global) options.push_back(*global);
    return options;
  }

  const CostModel& cost_;
  const TemplateSet& templates_;
  const Plan& current_;
  const std::vector<std::string>& lost_;
  const std::vector<std::string>& added_;
  const ReconfigureOptions& options_;
  detail::Survivors survivors_;
  NodeSpeeds speeds_;  // of survivors, those not at 1
};

}  // namespace

TemplateSet replanning_templates(const CostModel& cost, const Plan& current, std::size_t lost, std::size_t added,
                                 const Progress& progress) {
  if (current.pipelines_per_node == 1) return build_templates(cost, nodes_after(current, lost, added), progress);
  TemplateSet templates;
  templates.microbatches = cost.microbatches();
  templates.max_nodes = 1;
  if (auto shared = build_shared_node_template(cost, cost.gpus_per_node() / current.pipelines_per_node)) {
    templates.templates.push_back(std::move(*shared));
  }
  return templates;
}

Reconfiguration reconfigure(const CostModel& cost, const TemplateSet& templates, const Plan& current,
                            const std::vector<std::string>& lost, const std::vector<std::string>& added,
                            const ReconfigureOptions& options) {
  return Replanner(cost, templates, current, lost, added, options).run();
}

}  // namespace oobleck
