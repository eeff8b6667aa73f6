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
#include <set>
#include <sstream>

#include "composition.h"
#include "min_cost_flow.h"
#include "plan_building.h"

namespace oobleck {
namespace {

struct Survivor {
  std::string name;
  std::vector<char> holds;         // per layer
  std::vector<Bytes> held_prefix;  // state bytes held in layers [0, l)
};

struct Slot {
  int pipeline = -1;  // -1: a spare slot (node left idle)
  int position = 0;
  std::vector<std::pair<int, int>> ranges;  // layer ranges the node must hold
};

struct Placement {
  std::vector<std::vector<std::string>> pipeline_nodes;
  std::vector<std::string> spare;
  Bytes bytes = 0;
};

class Replanner {
 public:
  Replanner(const CostModel& cost, const TemplateSet& templates, const Plan& current,
            const std::vector<std::string>& lost, const std::vector<std::string>& added,
            const ReconfigureOptions& options)
      : cost_(cost), templates_(templates), current_(current), lost_(lost), added_(added), options_(options) {}

  Reconfiguration run() {
    collect_survivors();
    check_state_survives();
    collect_speeds();
    const int count = static_cast<int>(survivors_.size());
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
  // Best iteration time, then fewest bytes copied.
  Reconfiguration choose_and_finish(const std::vector<detail::Composition>& options, int spare_count) {
    if (!speeds_.empty()) return choose_at_speeds(options, spare_count);
    std::optional<std::pair<detail::Composition, Placement>> chosen;
    for (const auto& option : options) {
      Placement placement = place(option, spare_count);
      if (!chosen || option.iteration_ms < chosen->first.iteration_ms * (1 - 1e-9) ||
          (option.iteration_ms <= chosen->first.iteration_ms * (1 + 1e-9) && placement.bytes < chosen->second.bytes)) {
        chosen.emplace(option, std::move(placement));
      }
    }
    return finish(detail::plan_from(cost_, templates_, chosen->first, chosen->second.pipeline_nodes,
                                    chosen->second.spare, current_.fault_tolerance));
  }

  // The same at node speeds (step 5 above).
  Reconfiguration choose_at_speeds(const std::vector<detail::Composition>& options, int spare_count) const {
    std::optional<Reconfiguration> best;
    const auto offer = [&](auto make) {
      try {
        Reconfiguration r = finish(make());
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
        const Placement placement = place(option, spare_count, slowest_idle);
        const Plan plan = detail::plan_from(cost_, templates_, option, placement.pipeline_nodes, placement.spare,
                                            current_.fault_tolerance);
        offer([&] { return split_at_speeds(cost_, plan, speeds_); });
        offer([&] { return apply_node_speeds(cost_, plan, speeds_); });
      }
    }
    if (options_.replan_all) {
      offer([&] {
        std::vector<std::string> names;
        for (const auto& s : survivors_) names.push_back(s.name);
        return instantiate_at_speeds(cost_, templates_, names, current_.fault_tolerance, current_.global_microbatches,
                                     speeds_);
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
      if (index_.count(node) && speed != 1) speeds_.emplace(node, speed);
    }
  }

  void collect_survivors() {
    detail::check_node_names(lost_, "lost");
    detail::check_node_names(added_, "added");
    std::set<std::string> known;
    for (const auto& p : current_.pipelines) known.insert(p.nodes.begin(), p.nodes.end());
    known.insert(current_.spare_nodes.begin(), current_.spare_nodes.end());
    std::set<std::string> lost(lost_.begin(), lost_.end());
    for (const auto& name : lost_) {
      if (!known.count(name)) throw InputError("lost: node \"" + name + "\" is not in the plan");
    }
    for (const auto& name : added_) {
      if (known.count(name) && !lost.count(name)) {
        throw InputError("added: node \"" + name + "\" is already in the plan (list it as lost too to replace it)");
      }
    }
    const int layers = cost_.layers();
    auto add_survivor = [&](const std::string& name, const std::vector<Stage>* stages, int position) {
      Survivor s{name, std::vector<char>(layers, 0), std::vector<Bytes>(layers + 1, 0)};
      if (stages) {
        for (const auto& stage : *stages) {
          if (stage.node != position) continue;
          for (int l = stage.layer_begin; l < stage.layer_end; ++l) s.holds[l] = 1;
        }
      }
      for (int l = 0; l < layers; ++l) s.held_prefix[l + 1] = s.held_prefix[l] + (s.holds[l] ? cost_.layer_state_bytes(l) : 0);
      survivors_.push_back(std::move(s));
    };
    for (std::size_t p = 0; p < current_.pipelines.size(); ++p) {
      const auto& pipeline = current_.pipelines[p];
      for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
        if (!lost.count(pipeline.nodes[r])) add_survivor(pipeline.nodes[r], &pipeline.stages, static_cast<int>(r));
      }
    }
    for (const auto& name : current_.spare_nodes) {
      if (!lost.count(name)) add_survivor(name, nullptr, 0);
    }
    for (const auto& name : added_) add_survivor(name, nullptr, 0);
    for (std::size_t i = 0; i < survivors_.size(); ++i) index_[survivors_[i].name] = static_cast<int>(i);
  }

  void check_state_survives() const {
    const int layers = cost_.layers();
    std::vector<int> orphaned;
    for (int l = 0; l < layers; ++l) {
      bool held = false;
      for (const auto& s : survivors_) held = held || s.holds[l];
      if (!held) orphaned.push_back(l);
    }
    if (orphaned.empty()) return;
    std::ostringstream why;
    why << "layer";
    if (orphaned.size() > 1) why << "s";
    // Print as ranges.
    for (std::size_t i = 0; i < orphaned.size();) {
      std::size_t j = i;
      while (j + 1 < orphaned.size() && orphaned[j + 1] == orphaned[j] + 1) ++j;
      why << (i == 0 ? " " : ", ") << orphaned[i];
      if (j > i) why << "-" << orphaned[j];
      i = j + 1;
    }
    std::set<std::string> holders;
    for (const auto& p : current_.pipelines) {
      for (const auto& stage : p.stages) {
        if (stage.layer_begin <= orphaned.front() && orphaned.front() < stage.layer_end) holders.insert(p.nodes[stage.node]);
      }
    }
    why << " (" << cost_.profile().layers[orphaned.front()].name << (orphaned.size() > 1 ? ", ..." : "")
        << ") have no surviving replica: every node that held them is lost (";
    bool first = true;
    for (const auto& h : holders) {
      why << (first ? "" : ", ") << h;
      first = false;
    }
    why << "). Their weights and optimizer state are gone: no plan exists; restart from a checkpoint";
    throw NoPlanError(why.str());
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

  Bytes fetch_bytes(const Survivor& s, const Slot& slot) const {
    Bytes total = 0;
    for (const auto& [b, e] : slot.ranges) {
      total += cost_.state_bytes(b, e) - (s.held_prefix[e] - s.held_prefix[b]);
    }
    return total;
  }

  // With slowest_idle, the slowest survivors (below speed 1) fill the spare
  // slots first, and a pipeline that had one of them is no longer intact.
  Placement place(const detail::Composition& composition, int spare_count, bool slowest_idle = false) const {
    const std::vector<Slot> slots = slots_of(composition, spare_count);
    std::vector<int> slot_of(survivors_.size(), -1);
    std::vector<char> slot_taken(slots.size(), 0);
    if (slowest_idle) idle_slowest(slots, slot_of, slot_taken);
    keep_intact_nodes(composition, slots, slot_of, slot_taken);
    assign_the_rest(slots, slot_of, slot_taken);

    const int pipelines = static_cast<int>(composition.template_nodes.size());
    Placement placement;
    placement.pipeline_nodes.assign(pipelines, {});
    for (int j = 0; j < pipelines; ++j) placement.pipeline_nodes[j].resize(composition.template_nodes[j]);
    for (std::size_t i = 0; i < survivors_.size(); ++i) {
      const Slot& slot = slots[slot_of[i]];
      if (slot.pipeline < 0) {
        placement.spare.push_back(survivors_[i].name);
      } else {
        placement.pipeline_nodes[slot.pipeline][slot.position] = survivors_[i].name;
        placement.bytes += fetch_bytes(survivors_[i], slot);
      }
    }
    return placement;
  }

  // The node slots of the composition's pipelines in order, then the spare ones.
  std::vector<Slot> slots_of(const detail::Composition& composition, int spare_count) const {
    std::vector<Slot> slots;
    for (int j = 0; j < static_cast<int>(composition.template_nodes.size()); ++j) {
      const PipelineTemplate* t = templates_.find(composition.template_nodes[j]);
      for (int r = 0; r < t->nodes; ++r) {
        Slot slot{j, r, {}};
        for (const auto& stage : t->stages) {
          if (stage.node == r) slot.ranges.emplace_back(stage.layer_begin, stage.layer_end);
        }
        slots.push_back(std::move(slot));
      }
    }
    for (int i = 0; i < spare_count; ++i) slots.push_back(Slot{-1, 0, {}});
    return slots;
  }

  void idle_slowest(const std::vector<Slot>& slots, std::vector<int>& slot_of, std::vector<char>& slot_taken) const {
    std::vector<int> slow;
    for (int i = 0; i < static_cast<int>(survivors_.size()); ++i) {
      if (speeds_.count(survivors_[i].name) && speeds_.at(survivors_[i].name) < 1) slow.push_back(i);
    }
    std::stable_sort(slow.begin(), slow.end(),
                     [&](int a, int b) { return speeds_.at(survivors_[a].name) < speeds_.at(survivors_[b].name); });
    std::size_t next = 0;
    for (std::size_t s = 0; s < slots.size() && next < slow.size(); ++s) {
      if (slots[s].pipeline >= 0) continue;
      slot_of[slow[next++]] = static_cast<int>(s);
      slot_taken[s] = 1;
    }
  }

  // Intact pipelines whose template layout is unchanged keep their nodes, in
  // the first new pipelines of their size that are still free.
  void keep_intact_nodes(const detail::Composition& composition, const std::vector<Slot>& slots,
                         std::vector<int>& slot_of, std::vector<char>& slot_taken) const {
    const int pipelines = static_cast<int>(composition.template_nodes.size());
    std::set<std::string> lost(lost_.begin(), lost_.end());
    // New pipelines of each size, in order, and where their slots start.
    std::map<int, std::vector<int>> free_pipelines;
    std::vector<int> first_slot(pipelines, 0);
    for (int j = pipelines - 1; j >= 0; --j) free_pipelines[composition.template_nodes[j]].push_back(j);
    for (std::size_t s = slots.size(); s-- > 0;) {
      if (slots[s].pipeline >= 0) first_slot[slots[s].pipeline] = static_cast<int>(s);
    }
    for (const auto& old : current_.pipelines) {
      bool intact = true;
      for (const auto& name : old.nodes) intact = intact && !lost.count(name) && slot_of[index_.at(name)] < 0;
      if (!intact) continue;
      auto it = free_pipelines.find(old.template_nodes);
      if (it == free_pipelines.end() || it->second.empty()) continue;
      if (templates_.find(old.template_nodes)->stages != old.stages) continue;
      const int j = it->second.back();  // the first free one
      it->second.pop_back();
      for (int r = 0; r < old.template_nodes; ++r) {
        const int s = first_slot[j] + r;
        slot_of[index_.at(old.nodes[slots[s].position])] = s;
        slot_taken[s] = 1;
      }
    }
  }

  // The rest: survivors that held the same layers are interchangeable, and
  // so are slots that need the same layers, so the minimum-cost assignment
  // is a transportation problem between those groups.
  void assign_the_rest(const std::vector<Slot>& slots, std::vector<int>& slot_of,
                       const std::vector<char>& slot_taken) const {
    std::vector<std::vector<int>> node_groups, slot_groups;
    std::map<std::vector<char>, std::size_t> by_holdings;
    for (int i = 0; i < static_cast<int>(survivors_.size()); ++i) {
      if (slot_of[i] >= 0) continue;
      auto [it, fresh] = by_holdings.emplace(survivors_[i].holds, node_groups.size());
      if (fresh) node_groups.emplace_back();
      node_groups[it->second].push_back(i);
    }
    std::map<std::pair<bool, std::vector<std::pair<int, int>>>, std::size_t> by_ranges;
    for (std::size_t j = 0; j < slots.size(); ++j) {
      if (slot_taken[j]) continue;
      auto [it, fresh] = by_ranges.emplace(std::make_pair(slots[j].pipeline < 0, slots[j].ranges), slot_groups.size());
      if (fresh) slot_groups.emplace_back();
      slot_groups[it->second].push_back(static_cast<int>(j));
    }
    const int groups = static_cast<int>(node_groups.size() + slot_groups.size());
    const int source = groups, sink = groups + 1;
    detail::MinCostFlow flow(groups + 2);
    std::vector<std::vector<int>> edge(node_groups.size(), std::vector<int>(slot_groups.size()));
    for (std::size_t a = 0; a < node_groups.size(); ++a) {
      flow.add_edge(source, static_cast<int>(a), static_cast<Bytes>(node_groups[a].size()), 0);
      for (std::size_t b = 0; b < slot_groups.size(); ++b) {
        const Bytes cost = fetch_bytes(survivors_[node_groups[a].front()], slots[slot_groups[b].front()]);
        edge[a][b] = flow.add_edge(static_cast<int>(a), static_cast<int>(node_groups.size() + b),
                                   static_cast<Bytes>(survivors_.size()), cost);
      }
    }
    for (std::size_t b = 0; b < slot_groups.size(); ++b) {
      flow.add_edge(static_cast<int>(node_groups.size() + b), sink, static_cast<Bytes>(slot_groups[b].size()), 0);
    }
    flow.run(source, sink);
    std::vector<std::size_t> next_slot(slot_groups.size(), 0);
    for (std::size_t a = 0; a < node_groups.size(); ++a) {
      std::size_t next_node = 0;
      for (std::size_t b = 0; b < slot_groups.size(); ++b) {
        for (Bytes k = flow.flow(edge[a][b]); k > 0; --k) {
          slot_of[node_groups[a][next_node++]] = slot_groups[b][next_slot[b]++];
        }
      }
    }
  }

  // `plan` on the survivors, with the copies it needs.
  Reconfiguration finish(Plan plan) const {
    Reconfiguration out;
    out.plan = std::move(plan);
    out.lost = lost_;
    out.added = added_;
    std::vector<Bytes> sent(survivors_.size(), 0), received(survivors_.size(), 0);
    for (const auto& pipeline : out.plan.pipelines) {
      for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
        const int to = index_.at(pipeline.nodes[r]);
        for (const auto& stage : pipeline.stages) {
          if (stage.node != static_cast<int>(r)) continue;
          for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
            if (survivors_[to].holds[l]) continue;
            int from = -1;
            for (std::size_t i = 0; i < survivors_.size(); ++i) {
              if (survivors_[i].holds[l] && (from < 0 || sent[i] < sent[from])) from = static_cast<int>(i);
            }
            const Bytes bytes = cost_.layer_state_bytes(l);
            sent[from] += bytes;
            received[to] += bytes;
            out.copy_bytes += bytes;
            out.transfers.push_back({l, survivors_[from].name, survivors_[to].name, bytes});
          }
        }
      }
    }
    Bytes busiest = 0;
    for (std::size_t i = 0; i < survivors_.size(); ++i) busiest = std::max({busiest, sent[i], received[i]});
    const auto& hw = cost_.profile().hardware;
    out.copy_ms = out.transfers.empty()
                      ? 0.0
                      : static_cast<double>(busiest) / hw.inter_node_bytes_per_s * 1000.0 + hw.latency_ms;
    return out;
  }

  const CostModel& cost_;
  const TemplateSet& templates_;
  const Plan& current_;
  const std::vector<std::string>& lost_;
  const std::vector<std::string>& added_;
  const ReconfigureOptions& options_;
  std::vector<Survivor> survivors_;
  std::map<std::string, int> index_;
  NodeSpeeds speeds_;  // of survivors, those not at 1
};

}  // namespace

Reconfiguration reconfigure(const CostModel& cost, const TemplateSet& templates, const Plan& current,
                            const std::vector<std::string>& lost, const std::vector<std::string>& added,
                            const ReconfigureOptions& options) {
  return Replanner(cost, templates, current, lost, added, options).run();
}

}  // namespace oobleck
