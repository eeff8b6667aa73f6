// The four recovery policies. Each reacts to the trace's changes the way its
// system does; the base class keeps the books.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "replay_model.h"

namespace oobleck::sim::detail {
namespace {

std::vector<std::string> placeholder_names(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(std::to_string(i));
  return names;
}

bool contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// State bytes of the most loaded node of a plan: what one node saves,
// restores or receives.
Bytes largest_node_state(const CostModel& cost, const Plan& plan) {
  Bytes most = 0;
  for (const auto& p : plan.pipelines) {
    std::map<int, Bytes> per_node;
    for (const auto& s : p.stages) per_node[s.node] += cost.state_bytes(s.layer_begin, s.layer_end);
    for (const auto& [node, bytes] : per_node) most = std::max(most, bytes);
  }
  return most;
}

// ---------------------------------------------------------------- oobleck

// Templates and the planner: a loss re-instantiates pipelines around the
// survivors and copies missing layers from replicas; arrivals join at the
// next iteration; when the planner finds no plan, the last checkpoint.
class OobleckPolicy final : public PolicyModel {
 public:
  OobleckPolicy(const Job& job) : PolicyModel(job, Policy::oobleck) {
    if (!job.peak_plan_problem.empty()) {
      result_.runnable = false;
      result_.reason = job.peak_plan_problem;
      return;
    }
    // A fall-back to the checkpoint takes f+1 losses at once.
    choose_checkpoint_interval(iteration_ms(job.cluster.plan), job.options.fault_tolerance + 1);
  }

 private:
  void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) override {
    // Losses first: a node that left and came back within the millisecond
    // is lost from the plan and joins anew.
    std::vector<std::string> lost_in_plan;
    for (const auto& n : lost) {
      if (auto it = std::find(joining_.begin(), joining_.end(), n); it != joining_.end()) {
        joining_.erase(it);
      } else if (plan_) {
        auto& spares = plan_->spare_nodes;
        if (auto sp = std::find(spares.begin(), spares.end(), n); sp != spares.end()) {
          spares.erase(sp);
        } else {
          lost_in_plan.push_back(n);
        }
      }
    }
    for (const auto& n : added) joining_.push_back(n);
    if (!plan_) {
      if (activity_ == Activity::waiting) start(false);
      return;
    }
    if (!lost_in_plan.empty()) {
      result_.failures += static_cast<int>(lost_in_plan.size());
      const bool restarting = activity_ == Activity::restart;
      interrupt();
      if (restarting) {
        // The job had not started on this plan yet: start over on what is left.
        plan_.reset();
        start(true);
      } else {
        recover(lost_in_plan, true);
      }
      return;
    }
    if (!joining_.empty()) grow_at_next_iteration();
  }

  void start(bool after_failure) {
    joining_.clear();
    if (present_.empty()) {
      plan_.reset();
      enter(Activity::waiting);
      return;
    }
    try {
      plan_ = instantiate(*job_.cost, job_.cluster.templates, present_, job_.options.fault_tolerance,
                          job_.options.global_microbatches);
    } catch (const NoPlanError&) {
      plan_.reset();
      enter(Activity::waiting);
      return;
    }
    ++result_.restarts;
    const Cluster& c = job_.scenario.cluster;
    const Milliseconds down = (after_failure ? c.detection_ms : 0) + c.restart_ms + c.communicator_ms +
                              (iterations_done_ > 0 ? checkpoint_load_ms_ : 0);
    down_for(Activity::restart, down, [this] { train(); });
  }

  void recover(const std::vector<std::string>& lost, bool detect) {
    Reconfiguration next;
    try {
      if (present_.empty()) throw NoPlanError("no node left");
      next = reconfigure(*job_.cost, job_.cluster.templates, *plan_, lost, joining_);
    } catch (const NoPlanError&) {
      ++result_.unrecoverable;
      roll_back_to_checkpoint();
      plan_.reset();
      start(true);
      return;
    }
    joining_.clear();
    plan_ = std::move(next.plan);
    ++result_.reconfigurations;
    const Cluster& c = job_.scenario.cluster;
    const Milliseconds copy = job_.scenario.overrides.oobleck_copy_ms.value_or(next.copy_ms);
    down_for(Activity::reconfiguration, (detect ? c.detection_ms : 0) + copy + c.communicator_ms, [this] { train(); });
  }

  void train() {
    start_training(iteration_ms(*plan_), static_cast<int>(plan_->pipelines.size()));
    if (!joining_.empty()) grow_at_next_iteration();
  }

  void grow_at_next_iteration() {
    at_next_iteration([this] {
      if (joining_.empty()) {
        activity_ = Activity::training;
        schedule_checkpoint();
        return;
      }
      engine_.cancel(checkpoint_event_);
      recover({}, false);
    });
  }

  std::optional<Plan> plan_;
  std::vector<std::string> joining_;  // arrived, not yet in the plan
};

// ---------------------------------------------------------------- restarts

// Policies that restart every process on a change and run the best plan for
// the nodes present (job morphing). Plans depend only on the node count:
// the first `used` nodes present, in order of arrival, run it.
class RestartingPolicy : public PolicyModel {
 protected:
  struct CountPlan {
    bool exists = false;
    Plan plan;
    Milliseconds iteration_ms = 0;
    Bytes node_state_bytes = 0;
    int used = 0;
  };

  RestartingPolicy(const Job& job, Policy policy) : PolicyModel(job, policy) {}

  const CountPlan& plan_for(int count) {
    auto [it, fresh] = plans_.try_emplace(count);
    if (fresh && count > 0) {
      CountPlan& cp = it->second;
      try {
        cp.plan = instantiate(*job_.cost, job_.cluster.templates, placeholder_names(count), 0,
                              job_.options.global_microbatches);
        cp.exists = true;
        cp.iteration_ms = iteration_ms(cp.plan);
        cp.node_state_bytes = largest_node_state(*job_.cost, cp.plan);
        for (const auto& p : cp.plan.pipelines) cp.used += static_cast<int>(p.nodes.size());
      } catch (const NoPlanError&) {
        cp.exists = false;
      }
    }
    return it->second;
  }

  // Restarts on the nodes present; waits when they cannot form a plan.
  void restart(Milliseconds extra_downtime) {
    const CountPlan& cp = plan_for(static_cast<int>(present_.size()));
    members_.clear();
    if (!cp.exists) {
      enter(Activity::waiting);
      return;
    }
    members_.assign(present_.begin(), present_.begin() + cp.used);
    ++result_.restarts;
    const Cluster& c = job_.scenario.cluster;
    const CountPlan* chosen = &cp;  // map entries never move
    down_for(Activity::restart, extra_downtime + c.restart_ms + c.communicator_ms + load_ms(cp), [this, chosen] {
      running_ = chosen;
      start_training(chosen->iteration_ms, static_cast<int>(chosen->plan.pipelines.size()),
                     save_per_iteration_ms(*chosen));
      trained_since_restart();
    });
  }

  virtual Milliseconds load_ms(const CountPlan& cp) = 0;
  virtual Milliseconds save_per_iteration_ms(const CountPlan&) { return 0; }
  virtual void trained_since_restart() {}

  // Whether the nodes present would train faster than the running plan.
  bool growth_helps() {
    if (!running_) return true;
    const CountPlan& cp = plan_for(static_cast<int>(present_.size()));
    return cp.exists && cp.used > static_cast<int>(members_.size()) &&
           cp.iteration_ms + save_per_iteration_ms(cp) <
               (running_->iteration_ms + save_per_iteration_ms(*running_)) * (1 - 1e-9);
  }

  std::vector<std::string> members_;  // nodes running the plan, ring order for in-memory peers
  const CountPlan* running_ = nullptr;

 private:
  std::map<int, CountPlan> plans_;
};

// Checkpoint-restart (Varuna, torchelastic): blocking checkpoints every K
// iterations; a loss restarts everything from the last one; arrivals are
// taken in at the next checkpoint, by a restart.
class CheckpointPolicy final : public RestartingPolicy {
 public:
  CheckpointPolicy(const Job& job) : RestartingPolicy(job, Policy::checkpoint) {
    const CountPlan& peak = plan_for(std::max(1, job.trace.peak_nodes()));
    choose_checkpoint_interval(peak.exists ? peak.iteration_ms : 0, 1);
  }

 private:
  Milliseconds load_ms(const CountPlan&) override { return iterations_done_ > 0 ? checkpoint_load_ms_ : 0; }

  void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) override {
    bool member_lost = false;
    for (const auto& n : lost) member_lost = member_lost || contains(members_, n);
    if (member_lost) {
      result_.failures += static_cast<int>(std::count_if(lost.begin(), lost.end(), [&](auto& n) { return contains(members_, n); }));
      interrupt();
      roll_back_to_checkpoint();
      running_ = nullptr;
      restart(job_.scenario.cluster.detection_ms);
      return;
    }
    if (added.empty()) return;
    if (activity_ == Activity::waiting) {
      restart(0);
    } else if (result_.checkpoint_interval_iterations == 0) {
      // No checkpoints to wait for (the trace loses no node): restart to
      // grow at the next iteration, saving the state on the way.
      at_next_iteration([this] {
        if (!growth_helps()) {
          activity_ = Activity::training;
          return;
        }
        running_ = nullptr;
        leave_activity();
        checkpoint_iterations_ = iterations_done_;  // saved on the way down
        training_ms_since_checkpoint_ = 0;
        iterations_since_checkpoint_ = 0;
        restart(checkpoint_save_ms_);
      });
    }
  }

  void on_checkpoint_saved() override {
    // Nothing is lost by restarting right after a checkpoint.
    if (growth_helps()) {
      interrupt();
      restart(0);
    }
  }
};

// In-memory checkpoints (DLRover flash checkpoint, Gemini): every iteration
// the state is copied to host memory and mirrored to a peer, and persisted
// in the background every K iterations. A loss restarts everything and
// restores from memory; only when a node and its peer are both lost does it
// fall back to the persisted copy. Arrivals join by a restart at the next
// iteration.
class InMemoryPolicy final : public RestartingPolicy {
 public:
  InMemoryPolicy(const Job& job) : RestartingPolicy(job, Policy::inmemory) {
    blocking_checkpoints_ = false;
    const CountPlan& peak = plan_for(std::max(1, job.trace.peak_nodes()));
    // The persisted copy is needed when a node and its peer are lost together.
    choose_checkpoint_interval(peak.exists ? peak.iteration_ms : 0, 2);
  }

 private:
  Milliseconds save_per_iteration_ms(const CountPlan& cp) override {
    return job_.scenario.overrides.inmemory_save_ms.value_or(static_cast<double>(cp.node_state_bytes) /
                                                             host_bytes_per_s() * 1000.0);
  }
  Milliseconds load_ms(const CountPlan& cp) override {
    if (iterations_done_ == 0) return 0;
    if (restoring_from_storage_) return checkpoint_load_ms_;
    // From the peer's host memory over the network, then host to device.
    const double bytes = static_cast<double>(cp.node_state_bytes);
    return job_.scenario.overrides.inmemory_restore_ms.value_or(
        bytes / (job_.profile.hardware.inter_node_bytes_per_s * job_.profile.hardware.gpus_per_node) * 1000.0 +
        bytes / host_bytes_per_s() * 1000.0);
  }
  // A node's GPUs copy their shares at once.
  double host_bytes_per_s() const {
    return job_.scenario.cluster.host_copy_bytes_per_s * job_.profile.hardware.gpus_per_node;
  }
  void trained_since_restart() override {
    lost_since_training_.clear();
    ring_ = members_;
    restoring_from_storage_ = false;
    if (growth_helps()) grow_at_next_iteration();
  }

  void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) override {
    std::vector<std::string> lost_members;
    for (const auto& n : lost) {
      if (contains(members_, n)) lost_members.push_back(n);
    }
    if (!lost_members.empty()) {
      result_.failures += static_cast<int>(lost_members.size());
      for (const auto& n : lost_members) lost_since_training_.insert(n);
      // The copies are where the last run that trained put them: node i's
      // on node i+1 of its ring. Both lost before training resumes: gone.
      bool copy_gone = ring_.size() == 1 && lost_since_training_.count(ring_.front());
      for (std::size_t i = 0; i < ring_.size() && ring_.size() > 1; ++i) {
        if (lost_since_training_.count(ring_[i]) && lost_since_training_.count(ring_[(i + 1) % ring_.size()])) {
          copy_gone = true;
        }
      }
      interrupt();
      if (copy_gone && !restoring_from_storage_) {
        ++result_.unrecoverable;
        restoring_from_storage_ = true;
        const int k = result_.checkpoint_interval_iterations;
        roll_back_to(k > 0 ? iterations_done_ / k * k : 0);
      }
      running_ = nullptr;
      restart(job_.scenario.cluster.detection_ms);
      return;
    }
    if (added.empty()) return;
    if (activity_ == Activity::waiting) {
      restart(0);
    } else if (growth_helps()) {
      grow_at_next_iteration();
    }
  }

  void grow_at_next_iteration() {
    at_next_iteration([this] {
      if (!growth_helps()) {
        activity_ = Activity::training;
        return;
      }
      running_ = nullptr;
      restart(0);
    });
  }

  std::set<std::string> lost_since_training_;
  std::vector<std::string> ring_;  // the members of the last run that trained
  bool restoring_from_storage_ = false;
};

// ---------------------------------------------------------------- bamboo

// Redundant computation (Bamboo): homogeneous pipelines in which every node
// also holds its successor's layers and recomputes their forward pass, so a
// lost node's predecessor takes over its layers within seconds, at reduced
// speed. Two neighbouring losses in one pipeline leave layers without a
// copy: restart from the checkpoint. Arrivals replace lost nodes, or form a
// new pipeline by a restart.
class BambooPolicy final : public PolicyModel {
 public:
  BambooPolicy(const Job& job) : PolicyModel(job, Policy::bamboo) {
    const auto& templates = job.cluster.templates.templates;
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
    const CostModel& cost = *job_.cost;
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
      own[st.node] += static_cast<double>(cost.stage_memory_bytes(st.layer_begin, st.layer_end, st.gpus, in_flight)) * st.gpus;
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
    const CostModel& cost = *job_.cost;
    // Who runs each position's layers: itself, or the live node before it
    // (the first position's layers go to the node after it).
    std::vector<int> runner(t.nodes);
    for (int r = 0; r < t.nodes; ++r) {
      int x = r;
      if (failed[r]) x = r > 0 ? r - 1 : r + 1;
      runner[r] = x;
    }
    Pipeline p;
    p.template_nodes = t.nodes;
    p.microbatches = microbatches;
    for (int r = 0; r < t.nodes; ++r) {
      if (!failed[r]) p.nodes.push_back("n" + std::to_string(r));
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
    if (const auto& slowdown = job_.scenario.overrides.bamboo_slowdown) return iteration_ms(plan) * *slowdown;
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
        candidates.emplace_back(t->iteration_ms_for(most) + job_.cost->gradient_sync_ms(pipelines), std::move(layout));
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      if (candidates.size() > kSimulatedDepths) candidates.resize(kSimulatedDepths);
      std::optional<Layout> best;
      for (auto& [estimate, layout] : candidates) {
        layout.iteration_ms = layout_iteration_ms(
            layout, std::vector<std::vector<bool>>(layout.pipelines, std::vector<bool>(layout.pipeline->nodes, false)));
        if (!best || layout.iteration_ms < best->iteration_ms * (1 - 1e-9)) best = layout;
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
               c.detection_ms + job_.scenario.overrides.bamboo_failover_ms.value_or(c.communicator_ms),
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

  std::vector<std::string> spares() const {
    std::set<std::string_view> used;
    for (const auto& row : members_) used.insert(row.begin(), row.end());
    std::vector<std::string> out;
    for (const auto& n : present_) {
      if (!used.count(n)) out.push_back(n);
    }
    return out;
  }

  bool degraded_now() const {
    for (const auto& row : failed_) {
      for (bool f : row) {
        if (f) return true;
      }
    }
    return false;
  }

  void use_arrivals_at_next_iteration() {
    at_next_iteration([this] {
      auto free_nodes = spares();
      if (degraded_now() && !free_nodes.empty()) {
        // Replace lost nodes: each newcomer receives its position's layers
        // (and the successor's, for redundancy) from the neighbours.
        Bytes copied = 0;
        for (std::size_t i = 0; i < members_.size() && !free_nodes.empty(); ++i) {
          for (std::size_t r = 0; r < members_[i].size() && !free_nodes.empty(); ++r) {
            if (!failed_[i][r]) continue;
            members_[i][r] = free_nodes.front();
            free_nodes.erase(free_nodes.begin());
            failed_[i][r] = false;
            Bytes node_bytes = 0;
            for (const auto& st : layout_->pipeline->stages) {
              if (st.node == static_cast<int>(r) || st.node == static_cast<int>((r + 1) % members_[i].size())) {
                node_bytes += job_.cost->state_bytes(st.layer_begin, st.layer_end);
              }
            }
            copied = std::max(copied, node_bytes);
          }
        }
        ++result_.reconfigurations;
        const Cluster& c = job_.scenario.cluster;
        down_for(Activity::reconfiguration,
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
    const int d = layout_->pipeline->nodes;
    for (int i = 0; i < layout_->pipelines; ++i) {
      members_.emplace_back(present_.begin() + i * d, present_.begin() + (i + 1) * d);
      failed_.emplace_back(d, false);
    }
    ++result_.restarts;
    const Cluster& c = job_.scenario.cluster;
    const Milliseconds load = iterations_done_ > 0 ? checkpoint_load_ms_ : 0;
    down_for(Activity::restart, extra_downtime + c.restart_ms + c.communicator_ms + load, [this] { train(); });
  }

  void train() {
    start_training(layout_iteration_ms(*layout_, failed_), layout_->pipelines);
    if (!spares().empty()) use_arrivals_at_next_iteration();
  }

  static constexpr std::size_t kSimulatedDepths = 4;
  std::vector<const PipelineTemplate*> depths_;  // templates whose redundancy fits
  std::map<int, std::optional<Layout>> layouts_;
  const Layout* layout_ = nullptr;
  std::vector<std::vector<std::string>> members_;  // per pipeline, per position
  std::vector<std::vector<bool>> failed_;
};

}  // namespace

PolicyResult run_policy(const Job& job, Policy policy) {
  switch (policy) {
    case Policy::oobleck: return OobleckPolicy(job).run();
    case Policy::checkpoint: return CheckpointPolicy(job).run();
    case Policy::inmemory: return InMemoryPolicy(job).run();
    case Policy::bamboo: return BambooPolicy(job).run();
  }
  return {};
}

}  // namespace oobleck::sim::detail
