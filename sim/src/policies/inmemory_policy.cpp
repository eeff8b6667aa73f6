#include <set>

#include "restarting_policy.h"

namespace oobleck::sim::detail {
namespace {

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
    return overrides_.inmemory_save_ms.value_or(static_cast<double>(cp.node_state_bytes) /
                                                             host_bytes_per_s() * 1000.0);
  }
  Milliseconds load_ms(const CountPlan& cp) override {
    if (iterations_done_ == 0) return 0;
    if (restoring_from_storage_) return checkpoint_load_ms_;
    // From the peer's host memory over the network, then host to device.
    const double bytes = static_cast<double>(cp.node_state_bytes);
    return overrides_.inmemory_restore_ms.value_or(
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
    const std::vector<std::string> lost_members = members_among(lost);
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

}  // namespace

PolicyResult run_inmemory(const Job& job, StragglerHandling stragglers) { return InMemoryPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
