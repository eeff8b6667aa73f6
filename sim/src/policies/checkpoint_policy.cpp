#include "restarting_policy.h"

namespace oobleck::sim::detail {
namespace {

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
    const std::size_t members_lost = members_among(lost).size();
    if (members_lost > 0) {
      result_.failures += static_cast<int>(members_lost);
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

}  // namespace

PolicyResult run_checkpoint(const Job& job, StragglerHandling stragglers) { return CheckpointPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
