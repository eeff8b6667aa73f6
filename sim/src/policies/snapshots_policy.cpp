// Oobleck with in-memory snapshots, as the live executor runs it
// (oobleck-run --snapshot-every K --mirror-every M): the same recovery
// controller as the oobleck policy decides, told what a live master tells
// it — every step once the job goes on past it, every complete disk
// checkpoint (StateSaved), and before each loss the complete snapshots the
// nodes' memory holds with who holds each piece (SnapshotsHeld, kept by
// snapshot_ledger.h). Within f it reconfigures from replicas exactly as
// oobleck does. Past f the controller rolls back to the newest state the
// survivors can restore completely: a snapshot read from the nodes that took
// it (memory), else with pieces from mirrors (mirror), else the disk
// checkpoint, which is taken at oobleck's interval and is now the last
// resort. The iterations after that state are lost work.
//
// Costs, each overridable by a scenario:
// - stall per iteration: the copy to host memory overlaps the next step, and
//   the next optimizer step waits for it only when it takes longer:
//   max(0, copy - iteration) / K, copy = the most loaded node's state /
//   (host_copy_bytes_per_s x GPUs per node); 0 for any model whose copy fits
//   under one step;
// - restore from memory: the new plan's most loaded node's state copied host
//   to device at the same rate; from a mirror: also sent between nodes at
//   network_bytes_per_s first; from disk: the checkpoint's load (all layers
//   at storage_bytes_per_s), as oobleck;
// - a restart past f otherwise costs what oobleck's does: detection, a
//   restart of every process, the communicators.
//
// Step numbers: the controller counts iterations done, so its step 0 is the
// seed, which a restart can always read (reported as saved at the start);
// the decision records are translated back to the live run's numbering.
#include <algorithm>
#include <cmath>
#include <limits>

#include "oobleck/recovery/seats.h"
#include "oobleck_policy.h"
#include "snapshot_ledger.h"

namespace oobleck::sim::detail {
namespace {

using recovery::StateSource;

int snapshot_every(const Job& job) {
  return job.scenario.overrides_for(Policy::oobleck_snapshots)
      .snapshot_every_iterations.value_or(kDefaultSnapshotEveryIterations);
}
int mirror_every(const Job& job) {
  return job.scenario.overrides_for(Policy::oobleck_snapshots)
      .mirror_every_iterations.value_or(kDefaultMirrorEveryIterations);
}

class SnapshotsPolicy final : public OobleckPolicy {
 public:
  explicit SnapshotsPolicy(const Job& job)
      : OobleckPolicy(job, Policy::oobleck_snapshots, options(job)), ledger_(snapshot_every(job), mirror_every(job)) {
    const int k = snapshot_every(job), m = mirror_every(job);
    if (k < 0) throw InputError("snapshot_every_iterations: expected a non-negative integer");
    if (m < 0 || (k > 0 && m > 0 && m % k != 0)) {
      throw InputError("mirror_every_iterations: expected 0 or a multiple of snapshot_every_iterations (" +
                       std::to_string(k) + "), got " + std::to_string(m));
    }
    result_.snapshot_every_iterations = k;
    result_.mirror_every_iterations = k > 0 ? m : 0;
    if (controller_) (void)controller_->handle(recovery::StateSaved{0, 0});
  }

 private:
  static recovery::ControllerOptions options(const Job& job) {
    recovery::ControllerOptions o = controller_options(job);
    o.saves_reported = true;
    o.first_step = 1;  // step n: the state after n iterations
    return o;
  }

  // ---------------------------------------------------------------- the driver's reports

  [[nodiscard]] int step_of(std::int64_t iterations) const override {
    if (iterations > std::numeric_limits<int>::max()) {
      throw InputError("oobleck-snapshots: more than 2^31 iterations; the recovery controller counts steps in int");
    }
    return static_cast<int>(iterations);
  }

  // Iterations finished now: those counted, and whole ones since.
  [[nodiscard]] std::int64_t completed_now() const {
    if (activity_ != Activity::training) return iterations_done_;
    const Milliseconds cycle = current_iteration_ms_ + per_iteration_save_ms_;
    return iterations_done_ + whole_cycles(since_, engine_.now(), cycle);  // as leave_activity counts
  }

  void materialize() {
    const std::int64_t now = completed_now();
    if (now > materialized_) ledger_.trained(materialized_, now);
    materialized_ = now;
  }

  void before_change(const std::vector<std::string>& lost) override {
    materialize();
    // A live master has had every step reported: tell the controller the
    // ones played since. (With joins waiting, their commit is the next
    // boundary's, as for oobleck.)
    const auto* g = controller_->current();
    if (g && !controller_->commit_wanted() && (activity_ == Activity::training || activity_ == Activity::checkpoint)) {
      const int step = step_of(completed_now());
      if (step > controller_->committed_step()) {
        carry_out(controller_->handle(recovery::StepCompleted{g->number, step, engine_.now()}));
        rollback_open_ = false;
      }
    }
    for (const auto& node : lost) {
      ledger_.forget_holder(node);
      gone_.push_back(node);
    }
    // A rollback follows a loss only (a join's recovery adds nodes).
    if (!lost.empty()) {
      (void)controller_->handle(recovery::SnapshotsHeld{ledger_.complete(job_.cost->layers()), engine_.now()});
    }
  }

  void before_commit() override {
    materialize();
    rollback_open_ = false;
  }

  // Mirrors move past the nodes lost (a generation that began assigned them).
  void after_change() override {
    const auto* g = controller_->current();
    if (!g || gone_.empty()) return;
    std::vector<std::string> alive;
    for (const auto& node : recovery::ranked_nodes(g->plan)) {
      if (std::find(gone_.begin(), gone_.end(), node) == gone_.end()) alive.push_back(node);
    }
    ledger_.assign_mirrors(alive);
  }

  void on_checkpoint_saved() override {
    (void)controller_->handle(recovery::StateSaved{step_of(checkpoint_iterations_), engine_.now()});
  }

  // ---------------------------------------------------------------- decisions

  void generation_begins(const recovery::Generation& g) override {
    materialize();  // the steps the previous layout trained
    gone_.clear();
    ledger_.lay_out(recovery::node_layers(g.plan));
    ledger_.assign_mirrors(recovery::ranked_nodes(g.plan));
  }

  void fall_back(const recovery::Generation* g) override {
    // (A generation from replicas carries the flag only because no step
    // has committed since the rollback: nothing more is lost.)
    if (g && g->source == StateSource::replicas) return;
    materialize();
    const std::int64_t target = controller_->committed_step();
    // Step 0 is the seed: a start after waiting for the first nodes rolls
    // back from nothing trained.
    const bool real = !g || g->rolled_back_from > 0 || g->cause == recovery::Cause::loss;
    if (real && (!rollback_open_ || target < rolled_back_to_)) {
      ++result_.unrecoverable;
      source_pending_ = true;  // a wait for nodes says where from only when they come
    }
    if (source_pending_ && g) {
      source_pending_ = false;
      if (g->source == StateSource::memory) {
        ++result_.rollbacks_from_memory;
      } else if (g->source == StateSource::mirror) {
        ++result_.rollbacks_from_mirror;
      } else {
        ++result_.rollbacks_from_checkpoint;
      }
    }
    if (real) {
      rollback_open_ = true;
      rolled_back_to_ = target;
    }
    roll_back_to(target);
    ledger_.forget_after(target);
    materialized_ = iterations_done_;
  }

  [[nodiscard]] recovery::Generation as_played(const recovery::Generation& g) const override {
    recovery::Generation played = OobleckPolicy::as_played(g);
    if (g.rolled_back_from > 0) {
      played.rolled_back_from = g.rolled_back_from - 1;  // the last step trained, counted from 0
    } else if (g.rolled_back_from == 0) {
      played.rolled_back_from = -1;
      if (!rollback_open_) {  // nothing was trained: the seed, as oobleck records it
        played.rolled_back = false;
        if (played.source == StateSource::checkpoint) played.source = StateSource::initial;
      }
    }
    return played;
  }

  // ---------------------------------------------------------------- costs

  // The state of the most loaded node of `plan`, and how long its GPUs take
  // to copy it between device and host.
  [[nodiscard]] Bytes node_state_bytes(const Plan& plan) const { return largest_node_state(*job_.cost, plan); }
  [[nodiscard]] Milliseconds host_copy_ms(const Plan& plan) const {
    const Cluster& c = job_.scenario.cluster;
    return static_cast<double>(node_state_bytes(plan)) /
           (c.host_copy_bytes_per_s * job_.profile.hardware.gpus_per_node) * 1000.0;
  }

  Milliseconds stall_ms(const Plan& plan) override {
    const Overrides& o = overrides_;
    if (o.snapshot_stall_ms) return *o.snapshot_stall_ms;
    const int k = result_.snapshot_every_iterations;
    return k > 0 ? std::max(0.0, host_copy_ms(plan) - iteration_ms(plan)) / k : 0;
  }

  Milliseconds restore_ms(const recovery::Generation& g) override {
    const Overrides& o = overrides_;
    switch (g.source) {
      case StateSource::memory:
        return o.snapshot_restore_memory_ms.value_or(host_copy_ms(g.plan));
      case StateSource::mirror:
        return o.snapshot_restore_mirror_ms.value_or(static_cast<double>(node_state_bytes(g.plan)) /
                                                         job_.scenario.cluster.network_bytes_per_s * 1000.0 +
                                                     host_copy_ms(g.plan));
      case StateSource::checkpoint:
        return iterations_done_ > 0 ? o.snapshot_restore_disk_ms.value_or(checkpoint_load_ms_) : 0;
      default:
        return 0;
    }
  }

  SnapshotLedger ledger_;
  std::int64_t materialized_ = 0;  // iterations whose snapshots the ledger has
  std::vector<std::string> gone_;  // lost since the current generation began
  bool rollback_open_ = false;     // a rollback with no step committed since
  std::int64_t rolled_back_to_ = 0;
  bool source_pending_ = false;  // counted, its source not yet known
};

}  // namespace

PolicyResult run_oobleck_snapshots(const Job& job, StragglerHandling stragglers) { return SnapshotsPolicy(job).run(stragglers); }

}  // namespace oobleck::sim::detail
