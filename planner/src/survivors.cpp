// The survivors of a reconfiguration, and their placement into a
// composition's node slots (reconfigure.cpp's steps 1 and 4).
#include "survivors.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "min_cost_flow.h"
#include "plan_building.h"

namespace oobleck::detail {

Survivors::Survivors(const CostModel& cost, const TemplateSet& templates, const Plan& current,
                     const std::vector<std::string>& lost_nodes, const std::vector<std::string>& added_nodes)
    : cost_(cost),
      templates_(templates),
      current_(current),
      lost_(lost_nodes),
      added_(added_nodes),
      parts_(current, cost.layers(), [lost = std::set<std::string>(lost_nodes.begin(), lost_nodes.end())](
                                           const std::string& node) { return !lost.count(node); }) {
  check_node_names(lost_, "lost");
  check_node_names(added_, "added");
  std::unordered_set<std::string_view> known;
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
        if (stage.node != position || stage.node_span > 1) continue;
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
  index_.reserve(survivors_.size());
  for (std::size_t i = 0; i < survivors_.size(); ++i) index_[survivors_[i].name] = static_cast<int>(i);
}

void Survivors::check_state_survives() const {
  const int layers = cost_.layers();
  std::vector<int> orphaned;
  for (int l = 0; l < layers; ++l) {
    bool held = parts_.has_group(l);
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
      if (stage.layer_begin > orphaned.front() || orphaned.front() >= stage.layer_end) continue;
      for (int n = stage.node; n < stage.node + stage.node_span; ++n) holders.insert(p.nodes[n]);
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

Bytes Survivors::fetch_bytes(const Survivor& s, const Slot& slot) const {
  Bytes total = 0;
  for (const auto& [b, e] : slot.ranges) {
    total += cost_.state_bytes(b, e) - (s.held_prefix[e] - s.held_prefix[b]);
  }
  return total;
}

Placement Survivors::place(const Composition& composition, int spare_count, const NodeSpeeds* idle_first) const {
  const std::vector<Slot> slots = slots_of(composition, spare_count);
  std::vector<int> slot_of(survivors_.size(), -1);
  std::vector<char> slot_taken(slots.size(), 0);
  if (idle_first) idle_slowest(*idle_first, slots, slot_of, slot_taken);
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

std::vector<Survivors::Slot> Survivors::slots_of(const Composition& composition, int spare_count) const {
  std::vector<Slot> slots;
  for (int j = 0; j < static_cast<int>(composition.template_nodes.size()); ++j) {
    const PipelineTemplate* t = templates_.find(composition.template_nodes[j]);
    for (int r = 0; r < t->nodes; ++r) {
      Slot slot{j, r, {}};
      for (const auto& stage : t->stages) {
        if (stage_on_node(stage, r)) slot.ranges.emplace_back(stage.layer_begin, stage.layer_end);
      }
      slots.push_back(std::move(slot));
    }
  }
  for (int i = 0; i < spare_count; ++i) slots.push_back(Slot{-1, 0, {}});
  return slots;
}

void Survivors::idle_slowest(const NodeSpeeds& speeds, const std::vector<Slot>& slots, std::vector<int>& slot_of,
                             std::vector<char>& slot_taken) const {
  std::vector<int> slow;
  for (int i = 0; i < static_cast<int>(survivors_.size()); ++i) {
    if (speeds.count(survivors_[i].name) && speeds.at(survivors_[i].name) < 1) slow.push_back(i);
  }
  std::stable_sort(slow.begin(), slow.end(),
                   [&](int a, int b) { return speeds.at(survivors_[a].name) < speeds.at(survivors_[b].name); });
  std::size_t next = 0;
  for (std::size_t s = 0; s < slots.size() && next < slow.size(); ++s) {
    if (slots[s].pipeline >= 0) continue;
    slot_of[slow[next++]] = static_cast<int>(s);
    slot_taken[s] = 1;
  }
}

// Intact pipelines whose template layout is unchanged keep their nodes, in
// the first new pipelines of their size that are still free.
void Survivors::keep_intact_nodes(const Composition& composition, const std::vector<Slot>& slots,
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
void Survivors::assign_the_rest(const std::vector<Slot>& slots, std::vector<int>& slot_of,
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
  MinCostFlow flow(groups + 2);
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

Reconfiguration Survivors::with_copies(Plan plan) const {
  Reconfiguration out;
  out.plan = std::move(plan);
  out.lost = lost_;
  out.added = added_;
  std::vector<Bytes> sent(survivors_.size(), 0), received(survivors_.size(), 0);
  for (const auto& pipeline : out.plan.pipelines) {
    for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
      const int to = index_.at(pipeline.nodes[r]);
      for (const auto& stage : pipeline.stages) {
        if (!stage_on_node(stage, static_cast<int>(r))) continue;
        for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
          if (survivors_[to].holds[l] || parts_.kept(pipeline, static_cast<int>(r), l)) continue;
          int from = -1;
          for (std::size_t i = 0; i < survivors_.size(); ++i) {
            if (survivors_[i].holds[l] && (from < 0 || sent[i] < sent[from])) from = static_cast<int>(i);
          }
          const auto copy = [&](int source, Bytes bytes) {
            sent[source] += bytes;
            received[to] += bytes;
            out.copy_bytes += bytes;
            out.transfers.push_back({l, survivors_[source].name, survivors_[to].name, bytes});
          };
          // From the survivor holding it whole that has sent least, else
          // gathered from a living group's parts.
          if (from >= 0) {
            copy(from, cost_.layer_state_bytes(l));
            continue;
          }
          const auto sources = parts_.sources(l, cost_.layer_state_bytes(l), survivors_[to].name,
                                              [&](std::string_view n) { return sent[index_.at(std::string(n))]; });
          if (sources.empty()) throw NoPlanError("layer " + std::to_string(l) + " has no surviving replica");
          for (const auto& [name, bytes] : sources) copy(index_.at(std::string(name)), bytes);
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

int Survivors::count() const { return static_cast<int>(survivors_.size()); }

std::vector<std::string> Survivors::names() const {
  std::vector<std::string> out;
  for (const auto& s : survivors_) out.push_back(s.name);
  return out;
}

bool Survivors::contains(const std::string& name) const { return index_.count(name) > 0; }

}  // namespace oobleck::detail
