#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "policy_model.h"

namespace oobleck::sim::detail {
namespace {

// Redundant computation (Bamboo): homogeneous pipelines in which every node
// also holds its successor's layers and recomputes their forward pass, so a
// lost node's predecessor takes over its layers within seconds, at reduced
// speed. Two neighbouring losses in one pipeline leave layers without a
// copy: restart from the checkpoint. Arrivals replace lost nodes, or form a
// new pipeline by a restart.
//
// Rebalancing, as Bamboo's own simulator decides it after every step
// (simulate_should_reconfigure in uclasystem/bamboo, project_pactum/
// simulation/simulator.py): a node running a lost neighbour's layers is
// overloaded, and it and that neighbour are without redundancy; when such
// nodes exceed 5 % of the active ones (2 * overloaded / (positions -
// overloaded) > 0.05) and no idle node can take the lost positions, the
// job re-forms its pipelines over the nodes present: the workers restart
// with the new layout and take their state from the replicas' memory, no
// checkpoint (`bamboo_rebalance_ms`, by default restart + communicators).
// The other rules of that function are the replacements by idle nodes and
// the growth to more pipelines below.
class BambooPolicy final : public PolicyModel {
 public:
  BambooPolicy(const Job& job) : PolicyModel(job, Policy::bamboo) {
    if (!job.plain_plan_problem.empty()) {
      result_.runnable = false;
      result_.reason = "no plan of pipelines on whole nodes without interleaving: " + job.plain_plan_problem;
      return;
    }
    cost_ = &job.plain_cost_model();
    const auto& templates = job.plain_cluster().templates.templates;
    std::string why;
    for (const auto& t : templates) {
      std::string reason;
      if (redundancy_fits(t, reason)) {
        depths_.push_back(&t);
      } else if (why.empty()) {
        why = reason;
      }
    }
    if (depths_.empty()) {
      result_.runnable = false;
      result_.reason = "redundant computation does not fit in memory with any pipeline template: " + why;
      return;
    }
    const Layout* peak = best_layout(std::max(1, job.trace.peak_nodes()));
    // Two neighbours lost together need the checkpoint.
    choose_checkpoint_interval(peak ? peak->iteration_ms : 0, 2);
  }

 private:
  struct Layout {
    const PipelineTemplate* pipeline = nullptr;
    int pipelines = 0;
    std::vector<int> microbatches;
    Milliseconds iteration_ms = 0;
  };

  // A node keeps its own stages (with their in-flight activations) and its
  // successor's weights, optimizer state and one microbatch of activations.
  bool redundancy_fits(const PipelineTemplate& t, std::string& reason) const {
    const CostModel& cost = this->cost();
    if (t.nodes < 2) {
      reason = "a 1-node pipeline has no neighbour to hold its layers";
      return false;
    }
    const int S = static_cast<int>(t.stages.size());
    std::vector<double> own(t.nodes, 0), successor_need(t.nodes, 0);
    const int M = std::max(1, t.microbatches);
    for (int s = 0; s < S; ++s) {
      const Stage& st = t.stages[s];
      const int in_flight = std::min(M, S - s);
      own[st.node] +=
          static_cast<double>(cost.stage_memory_bytes(st.layer_begin, st.layer_end, st.gpus, in_flight)) * st.gpus;
      successor_need[st.node] += static_cast<double>(cost.stage_memory_bytes(st.layer_begin, st.layer_end, 1, 1));
    }
    const double capacity =
        static_cast<double>(job_.profile.hardware.gpu_memory_bytes) * job_.profile.hardware.gpus_per_node;
    for (int r = 0; r < t.nodes; ++r) {
      const double need = own[r] + successor_need[(r + 1) % t.nodes];
      if (need > capacity) {
        std::ostringstream why;
        why << "with " << t.nodes << "-node pipelines, node " << r << " needs " << need / (1 << 30)
            << " GiB for its stages and its successor's layers but has " << capacity / (1 << 30) << " GiB";
        reason = why.str();
        return false;
      }
    }
    return true;
  }

  // The pipeline with failed positions merged into neighbours, plus each
  // stage's redundant forward work.
  std::pair<Pipeline, std::vector<Milliseconds>> degraded(const PipelineTemplate& t, int microbatches,
                                                          const std::vector<bool>& failed) const {
    const CostModel& cost = this->cost();
    // Who runs each position's layers: itself, or the live node before it
    // (the first position's layers go to the node after it).
    std::vector<int> runner(t.nodes);
    for (int r = 0; r < t.nodes; ++r) {
      runner[r] = failed[r] ? stand_in(r) : r;
    }
    Pipeline p;
    p.template_nodes = t.nodes;
    p.microbatches = microbatches;
    for (int r = 0; r < t.nodes; ++r) {
      if (!failed[r]) p.nodes.push_back(std::string("n").append(std::to_string(r)));
    }
    std::vector<int> position_of_runner(t.nodes, -1);
    int k = 0;
    for (int r = 0; r < t.nodes; ++r) {
      if (!failed[r]) position_of_runner[r] = k++;
    }
    for (const auto& st : t.stages) {
      Stage s = st;
      s.node = position_of_runner[runner[st.node]];
      // Consecutive stages on one node run as one stage: the node computes them in turn.
      if (!p.stages.empty() && p.stages.back().node == s.node) {
        p.stages.back().layer_end = s.layer_end;
        p.stages.back().gpus = std::min(p.stages.back().gpus, s.gpus);
      } else {
        p.stages.push_back(s);
      }
    }
    std::vector<Milliseconds> extra(p.stages.size(), 0);
    const int live = static_cast<int>(p.nodes.size());
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
      // The last stage of each node recomputes the forward of the next node's stages.
      if (i + 1 < p.stages.size() && p.stages[i + 1].node == p.stages[i].node) continue;
      const int next = (p.stages[i].node + 1) % live;
      if (next == p.stages[i].node) continue;
      for (const auto& other : p.stages) {
        if (other.node == next) extra[i] += cost.stage_forward_ms(other.layer_begin, other.layer_end, other.gpus);
      }
    }
    return {std::move(p), std::move(extra)};
  }

  // Who runs a lost position's layers: the node before it (the first
  // position's, the node after it).
  [[nodiscard]] static int stand_in(int position) { return position > 0 ? position - 1 : position + 1; }

  // The position whose loss loads its stand-in most: the two nodes' compute together.
  [[nodiscard]] int costliest_merge(const PipelineTemplate& t) const {
    std::vector<Milliseconds> on_node(t.nodes, 0);
    for (const auto& st : t.stages) {
      on_node[st.node] += cost().stage_compute_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
    }
    int worst = 0;
    Milliseconds most = -1;
    for (int r = 0; r < t.nodes; ++r) {
      const Milliseconds merged = on_node[r] + on_node[stand_in(r)];
      if (merged > most) {
        most = merged;
        worst = r;
      }
    }
    return worst;
  }

  Milliseconds layout_iteration_ms(const Layout& layout, const std::vector<std::vector<bool>>& failed) {
    Plan plan;
    IterationOptions extra;
    for (int i = 0; i < layout.pipelines; ++i) {
      auto [p, e] = degraded(*layout.pipeline, layout.microbatches[i], failed[i]);
      for (auto& n : p.nodes) n = std::to_string(i) + ":" + n;
      plan.pipelines.push_back(std::move(p));
      extra.extra_forward_ms.push_back(std::move(e));
    }
    plan.global_microbatches = job_.options.global_microbatches;
    if (const auto& slowdown = overrides_.bamboo_slowdown) return iteration_ms(plan) * *slowdown;
    return iteration_ms(plan, extra);
  }

  const Layout* best_layout(int count) {
    auto [it, fresh] = layouts_.try_emplace(count);
    if (fresh && count > 0) {
      const int B = job_.options.global_microbatches;
      // Rank depths by the planner's formula, then simulate the few best:
      // simulating every depth would cost more than the whole replay.
      std::vector<std::pair<double, Layout>> candidates;
      for (const PipelineTemplate* t : depths_) {
        // As many pipelines of this depth as the nodes allow, the batch
        // spread evenly (Bamboo's pipelines are alike).
        const int pipelines = std::min(count / t->nodes, B);
        if (pipelines == 0) continue;
        const int most = (B + pipelines - 1) / pipelines;
        if (t->max_microbatches > 0 && most > t->max_microbatches) continue;
        Layout layout{t, pipelines, {}, 0};
        for (int i = 0; i < pipelines; ++i) layout.microbatches.push_back(B / pipelines + (i < B % pipelines ? 1 : 0));
        candidates.emplace_back(t->iteration_ms_for(most) + cost().gradient_sync_ms(pipelines), std::move(layout));
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      if (candidates.size() > kSimulatedDepths) candidates.resize(kSimulatedDepths);
      // Bamboo trains with stages merged into predecessors until the
      // overloaded nodes pass 5 % of the active ones. Where that share
      // tolerates one, a pipeline with a lost node is the state it trains in
      // much of the time, so the depth is the one fastest with such a loss
      // (where merging costs most), the healthy time breaking ties; with
      // fewer nodes, the one fastest healthy.
      std::optional<Layout> best;
      double best_score = 0;
      for (auto& [estimate, layout] : candidates) {
        std::vector<std::vector<bool>> failed(layout.pipelines, std::vector<bool>(layout.pipeline->nodes, false));
        layout.iteration_ms = layout_iteration_ms(layout, failed);
        const int positions = layout.pipelines * layout.pipeline->nodes;
        double score = layout.iteration_ms;
        if (layout.pipeline->nodes > 1 && !rebalances(1, positions)) {
          failed[0][costliest_merge(*layout.pipeline)] = true;
          score = layout_iteration_ms(layout, failed);
        }
        const bool faster = !best || score < best_score * (1 - 1e-9) ||
                            (score <= best_score * (1 + 1e-9) && layout.iteration_ms < best->iteration_ms * (1 - 1e-9));
        if (faster) {
          best = layout;
          best_score = score;
        }
      }
      it->second = best;
    }
    return it->second ? &*it->second : nullptr;
  }

  void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) override {
    bool fatal = false;
    int members_lost = 0;
    std::map<std::string_view, std::pair<int, int>> position;  // pipeline, position
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
      for (int r = 0; r < static_cast<int>(members_[i].size()); ++r) {
        if (!members_[i][r].empty()) position.emplace(members_[i][r], std::pair{i, r});
      }
    }
    std::vector<std::pair<int, int>> hit;
    for (const auto& n : lost) {
      if (auto at = position.find(n); at != position.end()) hit.push_back(at->second);
    }
    for (const auto& [i, r] : hit) {
      ++members_lost;
      const int d = static_cast<int>(members_[i].size());
      members_[i][r].clear();
      failed_[i][r] = true;
      // Its layers' only other copy is on its predecessor (cyclically).
      if (failed_[i][(r + d - 1) % d] || failed_[i][(r + 1) % d]) fatal = true;
    }
    if (members_lost > 0) {
      result_.failures += members_lost;
      const bool restarting = activity_ == Activity::restart;
      interrupt();
      if (fatal || restarting) {
        if (fatal) {
          ++result_.unrecoverable;
          roll_back_to_checkpoint();
        }
        restart(job_.scenario.cluster.detection_ms);
        return;
      }
      ++result_.reconfigurations;
      const Cluster& c = job_.scenario.cluster;
      down_for(Activity::reconfiguration,
               c.detection_ms + overrides_.bamboo_failover_ms.value_or(c.communicator_ms),
               [this] { train(); });
      return;
    }
    if (added.empty()) return;
    if (activity_ == Activity::waiting) {
      restart(0);
    } else {
      use_arrivals_at_next_iteration();  // during a save or a failover: when training resumes
    }
  }

  // The first `count` nodes present that hold no position, in order of
  // arrival: O(members + count), however many nodes are present (the
  // members are among the nodes present, or just lost).
  [[nodiscard]] std::vector<std::string> spares(std::size_t count) const {
    std::unordered_set<std::string_view> used;
    for (const auto& row : members_) used.insert(row.begin(), row.end());
    std::vector<std::string> out;
    present_.for_each([&](const std::string& n) {
      if (out.size() == count) return false;
      if (!used.count(n)) out.push_back(n);
      return true;
    });
    return out;
  }

  [[nodiscard]] std::size_t failed_positions() const {
    std::size_t count = 0;
    for (const auto& row : failed_) count += static_cast<std::size_t>(std::count(row.begin(), row.end(), true));
    return count;
  }
  [[nodiscard]] bool degraded_now() const { return failed_positions() > 0; }

  // Bamboo's 5 % rule.
  [[nodiscard]] bool overloaded_beyond_share() const {
    const std::size_t overloaded = failed_positions();
    if (overloaded == 0) return false;
    std::size_t positions = 0;
    for (const auto& row : failed_) positions += row.size();
    return rebalances(static_cast<double>(overloaded), static_cast<double>(positions));
  }
  // Bamboo's rule: re-form once the overloaded nodes and the neighbours they
  // stand in for pass 5 % of the active ones.
  [[nodiscard]] static bool rebalances(double overloaded, double positions) {
    return 2.0 * overloaded > kRebalanceShare * (positions - overloaded);
  }

  // New pipelines over the nodes present, state from memory.
  void rebalance() {
    layout_ = best_layout(static_cast<int>(present_.size()));
    if (!layout_) {  // (a loss during the step before brought the count below any depth)
      restart(0);
      return;
    }
    form_pipelines();
    ++result_.reconfigurations;
    const Cluster& c = job_.scenario.cluster;
    down_for(Activity::reconfiguration, overrides_.bamboo_rebalance_ms.value_or(c.restart_ms + c.communicator_ms),
             [this] { train(); });
  }

  void use_arrivals_at_next_iteration() {
    at_next_iteration([this] {
      if (!layout_) return;  // (a rebalance found no layout: waiting for nodes)
      const auto free_nodes = spares(failed_positions());
      if (!free_nodes.empty()) {
        // Replace lost nodes: each newcomer receives its position's layers
        // (and the successor's, for redundancy) from the neighbours.
        Bytes copied = 0;
        std::size_t next = 0;
        for (std::size_t i = 0; i < members_.size() && next < free_nodes.size(); ++i) {
          for (std::size_t r = 0; r < members_[i].size() && next < free_nodes.size(); ++r) {
            if (!failed_[i][r]) continue;
            members_[i][r] = free_nodes[next++];
            failed_[i][r] = false;
            Bytes node_bytes = 0;
            for (const auto& st : layout_->pipeline->stages) {
              if (st.node == static_cast<int>(r) || st.node == static_cast<int>((r + 1) % members_[i].size())) {
                node_bytes += cost().state_bytes(st.layer_begin, st.layer_end);
              }
            }
            copied = std::max(copied, node_bytes);
          }
        }
        ++result_.reconfigurations;
        const Cluster& c = job_.scenario.cluster;
        down_for(
            Activity::reconfiguration,
            c.communicator_ms + static_cast<double>(copied) / job_.profile.hardware.inter_node_bytes_per_s * 1000.0,
            [this] { train(); });
        return;
      }
      const Layout* grown = best_layout(static_cast<int>(present_.size()));
      if (!degraded_now() && grown && grown->iteration_ms < layout_->iteration_ms * (1 - 1e-9)) {
        // A new shape of pipelines: a restart, state from the replicas' memory.
        restart(0);
        return;
      }
      activity_ = Activity::training;
      schedule_checkpoint();
    });
  }

  void restart(Milliseconds extra_downtime) {
    layout_ = best_layout(static_cast<int>(present_.size()));
    members_.clear();
    failed_.clear();
    if (!layout_) {
      enter(Activity::waiting);
      return;
    }
    form_pipelines();
    ++result_.restarts;
    const Cluster& c = job_.scenario.cluster;
    const Milliseconds load = iterations_done_ > 0 ? checkpoint_load_ms_ : 0;
    down_for(Activity::restart, extra_downtime + c.restart_ms + c.communicator_ms + load, [this] { train(); });
  }

  void form_pipelines() {
    members_.clear();
    failed_.clear();
    const int d = layout_->pipeline->nodes;
    const std::vector<std::string> nodes = present_.first(static_cast<std::size_t>(layout_->pipelines * d));
    for (int i = 0; i < layout_->pipelines; ++i) {
      members_.emplace_back(nodes.begin() + i * d, nodes.begin() + (i + 1) * d);
      failed_.emplace_back(d, false);
    }
  }

  void train() {
    start_training(layout_iteration_ms(*layout_, failed_), layout_->pipelines);
    if (!spares(1).empty()) {
      use_arrivals_at_next_iteration();
    } else if (overloaded_beyond_share()) {
      at_next_iteration([this] { rebalance(); });  // (Bamboo checks after each step)
    }
  }

  // The formula ranks templates without Bamboo's redundant computation, so
  // the fastest played can rank fifth or lower (GPT-3 1.3B on 8 nodes).
  static constexpr std::size_t kSimulatedDepths = 8;
  static constexpr double kRebalanceShare = 0.05;
  std::vector<const PipelineTemplate*> depths_;  // templates whose redundancy fits
  std::map<int, std::optional<Layout>> layouts_;
  const Layout* layout_ = nullptr;
  std::vector<std::vector<std::string>> members_;  // per pipeline, per position
  std::vector<std::vector<bool>> failed_;
};

}  // namespace

PolicyResult run_bamboo(const Job& job, StragglerHandling stragglers) { return BambooPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
