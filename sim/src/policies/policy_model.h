// Internals of trace replay: the job every policy shares and the base class
// that keeps the books (what time went where) for a policy. Each policy is
// a model driven by its own event engine: the trace's adds and removes are
// events, and so are the ends of downtimes, checkpoints and step boundaries.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oobleck/sim/engine.h"
#include "oobleck/sim/iteration.h"
#include "oobleck/sim/replay.h"
#include "present_nodes.h"

namespace oobleck::sim::detail {

struct Job {
  Job(const Profile& profile, const Trace& trace, const ReplayOptions& options, const Scenario& scenario,
      const Progress& progress);
  // The profile as given, with the optimizer steps' rate the simulator
  // plays (device_memory_bytes_per_s), so that the planner prices them alike.
  Profile profile;
  const Trace& trace;
  const ReplayOptions& options;
  const Scenario& scenario;
  Progress progress;    // may be called from several policies' threads at once
  ClusterPlan cluster;  // templates (and the plan) for the trace's peak node count
  // Why no plan with f exists even at the peak (the templates then come from
  // a plan with f = 0, for the policies that need no replicas).
  std::string peak_plan_problem;
  std::optional<CostModel> cost;
  // Where `cluster`'s pipelines interleave or share nodes, the cluster
  // planned with neither, and its cost model (Bamboo's).
  std::optional<ClusterPlan> plain;
  std::optional<CostModel> plain_cost;
  std::string plain_plan_problem;  // why there is none, where planning it failed
  [[nodiscard]] const ClusterPlan& plain_cluster() const { return plain ? *plain : cluster; }
  [[nodiscard]] const CostModel& plain_cost_model() const { return plain_cost ? *plain_cost : *cost; }
  int samples_per_iteration = 0;
  Bytes model_state_bytes = 0;  // weights and optimizer state of all layers
  // Each trace event's node as a number, 0 .. node_count - 1 in order of
  // first appearance: policies keep per-node state in arrays, not by name.
  std::vector<std::uint32_t> node_of_event;
  std::size_t node_count = 0;
  // Mean time between bursts of `losses` node losses close enough together
  // to hit one recovery; 0 when the trace loses no node. With
  // `slowdowns_lose`, slowdowns count as losses (stragglers evicted).
  [[nodiscard]] Milliseconds mean_time_between_bursts(int losses, bool slowdowns_lose = false) const;
};

enum class Activity { waiting, training, reconfiguration, restart, checkpoint };

// Whole cycles of `cycle_ms` in the time from `since` to `now`. The clock
// carries the rounding error of absolute times (about 1e-16 of them, more
// after many additions), so an event scheduled at the end of the n-th cycle
// may land a hair before it, and late in a long trace that hair is larger
// than any slack relative to the cycle: the slack scales with the clock
// (1e-12 of it: 0.3 us at 90 hours, far below any iteration).
[[nodiscard]] std::int64_t whole_cycles(Milliseconds since, Milliseconds now, Milliseconds cycle_ms);

class PolicyModel {
 public:
  PolicyModel(const Job& job, Policy policy);
  virtual ~PolicyModel() = default;
  PolicyResult run(StragglerHandling stragglers = StragglerHandling::ignore);

 protected:
  // The trace's changes at one moment, all at once (traces often add or
  // remove several nodes at the same millisecond).
  virtual void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) = 0;
  virtual void on_checkpoint_saved() {}

  // Stragglers. The speed of a present node (1 unless the trace slowed it).
  [[nodiscard]] double speed_of(const std::string& node) const;
  // How much longer the training in progress takes an iteration for the
  // nodes' speeds (1: none slow): by default the slowest present node's
  // 1/speed (every node waits for it); policies that know their plan's
  // places price it exactly (plan_slowdown).
  [[nodiscard]] virtual double straggler_slowdown() const;
  [[nodiscard]] double plan_slowdown(const Plan& plan, const NodeSpeeds& speeds) const;
  // mitigate: the slow nodes were detected (straggler_detection_ms after
  // the last change of speeds). (evict: they leave, as losses, then.)
  virtual void on_stragglers_detected() {}
  [[nodiscard]] NodeSpeeds slow_nodes() const;

  // Simulated iteration time of a plan, cached by the plan's shape.
  Milliseconds iteration_ms(const Plan& plan, const IterationOptions& extra = {});
  // The iteration of `plan` played with the job's options (no overrides, not cached).
  [[nodiscard]] IterationResult played_iteration(const Plan& plan, const IterationOptions& extra = {}) const;
  // Its time (no overrides), cached by the plan's shape.
  Milliseconds played_iteration_ms(const Plan& plan, const IterationOptions& extra = {});
  // When each pipeline's passes end in an iteration of `plan`, played.
  std::vector<Milliseconds> passes_end_ms(const Plan& plan);
  // Young/Daly, for a policy that needs its checkpoint when `fatal_losses`
  // nodes are lost within one recovery.
  void choose_checkpoint_interval(Milliseconds iteration, int fatal_losses);

  void leave_activity();
  void enter(Activity activity);
  // `iteration` at full speed: the stragglers' slowdown is applied here,
  // and again at the next iteration boundary whenever speeds change.
  void start_training(Milliseconds iteration, int pipelines, Milliseconds per_iteration_save = 0);
  void interrupt();
  void roll_back_to(std::int64_t iterations);
  void roll_back_to_checkpoint();
  void down_for(Activity activity, Milliseconds duration, std::function<void()> then);
  void at_next_iteration(std::function<void()> action);
  [[nodiscard]] Milliseconds next_iteration_boundary() const;
  // Training: when the iteration in progress began.
  [[nodiscard]] Milliseconds iteration_start_ms() const;
  // Right after start_training: its first iteration takes `iteration` at
  // full speed (a resumed step that trains part of the batch), the next
  // ones the full iteration again.
  void shorten_first_iteration(Milliseconds iteration);
  void schedule_checkpoint();
  void record_point();

  const Job& job_;
  // The cost model its plans are priced with (Bamboo's: the plain one).
  const CostModel* cost_;
  [[nodiscard]] const CostModel& cost() const { return *cost_; }
  const Overrides overrides_;  // the scenario's, for this policy
  Engine engine_;
  PolicyResult result_;
  PresentNodes present_;
  Activity activity_ = Activity::waiting;
  Milliseconds since_ = 0;
  Milliseconds current_iteration_ms_ = 0;
  Milliseconds full_speed_iteration_ms_ = 0;  // current_iteration_ms_ before the stragglers' slowdown
  StragglerHandling stragglers_ = StragglerHandling::ignore;
  int current_pipelines_ = 0;
  Milliseconds per_iteration_save_ms_ = 0;
  std::int64_t iterations_done_ = 0;
  std::int64_t checkpoint_iterations_ = 0;  // iterations in the last saved checkpoint
  std::int64_t memory_iterations_ = 0;      // iterations in host memory (in-memory checkpoints)
  std::int64_t iterations_since_checkpoint_ = 0;
  Milliseconds training_ms_since_checkpoint_ = 0;
  Milliseconds checkpoint_save_ms_ = 0;
  Milliseconds checkpoint_load_ms_ = 0;
  bool blocking_checkpoints_ = true;  // false: persisted in the background
  EventId checkpoint_event_, activity_end_, boundary_event_, reprice_event_;
  std::function<void()> deferred_;  // waits for the running checkpoint to end

 private:
  void apply_trace_event(std::uint32_t event);
  bool apply_slow(std::uint32_t event);
  void end_batch();
  void reprice_at_next_iteration();
  void detect_stragglers();

  std::map<std::vector<double>, Milliseconds> iteration_cache_;
  std::map<std::vector<double>, Milliseconds> passes_cache_;  // by pipeline shape
  // The last checkpoint interval's basis (iteration, fatal losses): chosen
  // again once run() knows that evicted stragglers are losses too.
  std::optional<std::pair<Milliseconds, int>> checkpoint_basis_;
  // The trace's changes since the last batch, as event indices: adds (kNoEvent
  // where the node left again within the batch) and removes.
  std::vector<std::uint32_t> batch_added_, batch_lost_;
  std::vector<std::uint32_t> batch_slot_;  // node -> its entry in batch_added_, or kNoEvent
  bool batch_pending_ = false;
  int reported_tenths_ = 0;
  // Stragglers: the present nodes slowed down (not evicted), and by node
  // number whether evicted (out of the job while the trace has it slow).
  struct Slow {
    double factor;
    std::uint32_t node;
  };
  std::map<std::string, Slow> slow_;
  std::vector<char> evicted_;
  EventId detection_event_;
};

// State bytes of the most loaded node of a plan: what one node saves,
// restores or receives (a node of a stage over k nodes holds 1/k of it).
[[nodiscard]] Bytes largest_node_state(const CostModel& cost, const Plan& plan);

// One runner per policy, each in its own file.
[[nodiscard]] PolicyResult run_oobleck(const Job& job, StragglerHandling stragglers);
[[nodiscard]] PolicyResult run_checkpoint(const Job& job, StragglerHandling stragglers);
[[nodiscard]] PolicyResult run_inmemory(const Job& job, StragglerHandling stragglers);
[[nodiscard]] PolicyResult run_bamboo(const Job& job, StragglerHandling stragglers);
[[nodiscard]] PolicyResult run_oobleck_snapshots(const Job& job, StragglerHandling stragglers);

}  // namespace oobleck::sim::detail
