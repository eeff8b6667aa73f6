// The recovery rule, written once for the live run and the simulator. A
// controller is told what happened (events.h) and answers what to do; it
// does no I/O and reads no clock (every event carries its time), so the
// master drives it from sockets, the simulator's oobleck policy in
// simulated time, and tests from tables.
//
// The rule:
// - The *base* is the plan of the last generation whose members all had
//   their layers' state, after the last committed step: a generation
//   becomes the base once every member has rebuilt its communicators and
//   received its copies (it is ready), or once a step of it commits.
// - Every recovery plans from the base, with every node lost and added
//   since it (`reconfigure`): also when a loss arrives while an earlier
//   recovery is still under way, whose copies may not all have happened;
//   planning from that newer plan would count layers on nodes that never
//   received them.
// - Until the first generation after a (re)start is ready, no node holds
//   state: it is where the start takes it from (the seed or a checkpoint),
//   and a loss plans afresh for the nodes left (`instantiate`, with f+1
//   pipelines or as many as the nodes can form, as a recovery keeps).
// - A step is committed once every trainer of the generation reported it,
//   no loss came first and no awaited join is missing.
// - Nodes that join wait for the next commit and enter a generation there;
//   a recovery that happens first takes them in.
// - A spare node (in no pipeline) lost while the generation trains is
//   dropped without interrupting it; while it is still recovering, every
//   member takes part in the state copies, and any loss starts it over.
// - When the replicas no longer cover a layer, or too few nodes are left
//   for any plan, the job gives up, or (when configured) restarts from the
//   last checkpoint on the nodes present and waits while there are none
//   that can form a pipeline. Where saves are reported, the restart rolls
//   the committed step back to the newest save the nodes left can restore:
//   a snapshot in their agents' memory (read from the nodes that took it,
//   else from mirrors) or the checkpoint, in that order at equal steps.
// - A process restarted in place on a live node, once the generation has
//   committed a step: the generation goes on (RestartInPlace), the step in
//   flight is trained again; nothing is re-planned.
// - A master restarted from its kept state (ControllerState) starts a
//   generation as a recovery would (MasterRestarted): planned from the base
//   with the nodes lost and added since, which the nodes left still hold,
//   so no state is read from disk; past f or before any base, as a loss
//   there would.
// - Nodes' speeds (NodeSpeedsMeasured) are weighed at the next commit of an
//   established generation with nothing lost or added since its base: keep
//   the plan, re-split the batch, or re-plan with the slowest nodes on each
//   pipeline's lightest places, whichever gives the shortest iteration at
//   those speeds, a change only when it gains at least
//   speeds_min_gain. A change is a generation of cause speeds, entered at
//   that commit as joins are; speeds back to 1 are weighed the same way, so
//   a node that recovers gets its share back. Every generation of another
//   cause is weighed again at its first commit, as long as speeds are off 1.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/recovery/events.h"

namespace oobleck::recovery {

// What a controller knows, as plain values: a master keeps it (--state-dir)
// so that a master restarted after it goes on with the same decisions
// (ControllerOptions::resumed). What is moot once the master is gone is not
// kept: the reports of the step in flight (it is trained again), awaited
// joins, deadlines, and the snapshots held (the agents tell them again).
struct ControllerState {
  int generations = 0;                // started so far
  std::optional<Generation> current;  // its transfers left out (they happened, or a recovery plans anew)
  std::vector<std::string> gone;      // of the current generation's nodes, those lost since it started
  bool ready = false, established = false;
  int committed = -1;
  std::optional<Plan> base;  // where the state after `committed` is (none: where the start takes it from)
  int base_generation = 0;
  StateSource start_source = StateSource::initial;
  std::vector<std::string> lost_since_base, added_since_base, pending_joins;
  std::optional<int> saved_step;
  int rolled_back_from = -1;
  std::vector<std::string> dropped_for_speed;  // spares of the current plan dropped as slow
};

struct ControllerOptions {
  int fault_tolerance = 0;
  int global_microbatches = 1;
  // The first generation's plan, started once all of its nodes joined.
  // Without one, the first generation is planned for the nodes that join.
  std::optional<Plan> initial_plan;
  StateSource first_source = StateSource::initial;  // checkpoint: the job resumes from one
  int first_step = 0;                               // the step the first generation trains
  int last_step = -1;                               // its commit ends training; -1: never
  enum class WhenNoPlan { give_up, restart_from_checkpoint };
  WhenNoPlan when_no_plan = WhenNoPlan::give_up;
  // The driver reports every complete save (StateSaved), as a live run
  // does: a restart from the checkpoint then resumes after the newest save,
  // the training since is trained again, and without any save (once a step
  // was committed) the job gives up. Otherwise (the simulator, which plays
  // its checkpoints itself) the controller's step count goes on.
  bool saves_reported = false;
  // After a communication error, how long a loss may take to be detected
  // before the same members start over; and how often that may happen in a
  // row without a commit before the job gives up.
  Milliseconds communication_grace_ms = 1000;
  int restarts_without_progress = 3;
  // Go on from a kept state (first_source and first_step are then moot):
  // the controller waits for MasterRestarted.
  std::optional<ControllerState> resumed;
  // Node speeds: the least gain (a share of keeping's iteration) that makes
  // a change worth a new generation, and over how many steps a re-plan's
  // copies are spread when it is weighed (fewer when training ends sooner).
  double speeds_min_gain = 0.05;
  int speeds_horizon_steps = 20;
  bool speeds_may_resplit = true, speeds_may_replan = true;  // the choices besides keeping
  bool speeds_may_drop = true;  // and dropping slow nodes as spares, readmitting them once recovered
};

class Controller {
 public:
  // `templates`: for node counts up to its max_nodes; larger sets are built
  // from `cost` when more nodes take part. Both must outlive the controller.
  Controller(const CostModel& cost, const TemplateSet& templates, ControllerOptions options);

  Actions handle(const Event& event);

  // ---------------------------------------------------------------- state
  [[nodiscard]] const Generation* current() const { return current_.get(); }
  [[nodiscard]] int committed_step() const { return committed_; }
  // The template set plans are made from now (grown as more nodes took part).
  [[nodiscard]] const TemplateSet& templates() const { return *templates_; }
  // Whether a node trains in the current generation.
  [[nodiscard]] bool trains(std::string_view node) const;
  // Joins wait for the next commit. (The simulator plays step boundaries
  // only while this holds.)
  [[nodiscard]] bool commit_wanted() const;
  // Whether a recovery would still find a plan if `nodes` were lost too.
  [[nodiscard]] bool survives_losing(const std::vector<std::string>& nodes);
  // Whether, past f, a rollback would find a complete state if `nodes`
  // were lost too.
  [[nodiscard]] bool can_roll_back_losing(const std::vector<std::string>& nodes) const;
  // Whether the base counts `node` as holding layers of the state after
  // the committed step (a trainer of the base plan, not lost since).
  [[nodiscard]] bool counts_state_on(std::string_view node) const;
  // All of the above that a restarted master needs to go on.
  [[nodiscard]] ControllerState state() const;

 private:
  Actions on(const NodesLost& e);
  Actions on(const NodesJoined& e);
  Actions on(const NodesChanged& e);
  Actions on(const JoinAwaited& e);
  Actions on(const GenerationReady& e);
  Actions on(const StepReported& e);
  Actions on(const StepCompleted& e);
  Actions on(const CommunicationFailed& e);
  Actions on(const Timer& e);
  Actions on(const StateSaved& e);
  Actions on(const SnapshotsHeld& e);
  Actions on(const WorkerRestarted& e);
  Actions on(const MasterRestarted& e);
  Actions on(const NodeSpeedsMeasured& e);
  // At a commit: what nodes' speeds call for (SpeedsWeighed, and a
  // generation of cause speeds when the plan changes).
  Actions weigh_speeds(int step);
  // The measured speeds of `nodes`, in the planner's range.
  [[nodiscard]] NodeSpeeds speeds_of(const std::vector<std::string>& nodes) const;
  // Those of the base's nodes and of `added`, for a reconfiguration from the base.
  [[nodiscard]] ReconfigureOptions at_speeds(const std::vector<std::string>& added) const;
  // Whether plans are made at node speeds: only of plain pipelines on whole
  // nodes (node_speeds.h); pipelines sharing nodes or interleaving are
  // planned at the profile's speed, and a slow node kept or dropped.
  [[nodiscard]] bool plans_at_speeds() const;

  // The members of the job now: the current generation's nodes not lost,
  // then the nodes that joined since, in that order.
  [[nodiscard]] std::vector<std::string> members() const;
  [[nodiscard]] int rank_of(std::string_view node) const;  // -1: not a member (or lost)
  bool note_loss(const std::string& node);                 // true when it interrupts the generation
  void note_join(const std::string& node);
  Actions try_start();  // no generation yet, or waiting for nodes
  Actions try_commit(int step);
  Actions commit(int step);
  Actions recover(Cause cause);
  Actions start_afresh(Cause cause, StateSource source, bool rolled_back);
  // Past f: back to the newest save (false: there is none to go back to).
  bool roll_back();
  struct Restorable {
    int step;
    StateSource source;
  };
  [[nodiscard]] std::optional<Restorable> newest_restorable(const std::vector<std::string>& alive) const;
  void rebase();
  Actions begin(Generation generation);
  // The generation in hand, its nodes ranked (trainers first), none lost yet.
  void set_current(std::shared_ptr<const Generation> generation);
  void restore(const ControllerState& state);
  Actions no_plan(const std::string& why, bool replicas_gone);
  Actions give_up(const std::string& why);
  Plan plan_for(const std::vector<std::string>& nodes);
  const TemplateSet& templates_for(int nodes);

  // Names in order, with how often each occurs: asking for a name is O(1),
  // and erasing one O(n) only when it is there (most nodes lost were not
  // waiting to join).
  struct NameList {
    std::vector<std::string> names;
    std::unordered_map<std::string, int> occurrences;
    [[nodiscard]] bool contains(const std::string& name) const { return occurrences.count(name) > 0; }
    [[nodiscard]] bool empty() const { return names.empty(); }
    void push_back(const std::string& name);
    bool erase(const std::string& name);  // its first occurrence; false when absent
    void assign(std::vector<std::string> list);
    void clear();
  };

  const CostModel& cost_;
  const TemplateSet* templates_;
  TemplateSet grown_;  // when more nodes take part than `templates_` covers
  ControllerOptions options_;

  int generations_ = 0;
  std::shared_ptr<const Generation> current_;
  // The current generation's nodes in rank order (views into its plan,
  // which current_ keeps alive), its trainers first, and which are lost.
  std::vector<std::string_view> ranked_;
  std::unordered_map<std::string_view, int> rank_index_;  // ranked_[r] -> r
  std::vector<char> gone_;
  int trainers_ = 0;
  bool established_ = false, ready_ = false, finished_ = false;
  int committed_ = -1;

  // The base: the plan of the last generation that committed a step, and
  // what happened since. Without one (nothing committed since the job
  // started or restarted), the state is where the start took it from.
  std::shared_ptr<const Plan> base_;
  int base_generation_ = 0;
  StateSource start_source_;
  std::vector<std::string> lost_since_base_;
  NameList added_since_base_;

  NameList pending_joins_;  // joined, in no generation yet
  std::set<std::string> awaited_joins_;
  std::optional<int> deferred_commit_;            // reported by all, waiting for awaited joins
  std::map<int, std::set<std::string>> reports_;  // step -> trainers that reported it

  std::optional<int> saved_step_;  // the newest StateSaved
  std::vector<Snapshot> snapshots_;  // the newest SnapshotsHeld
  StateSource rollback_source_ = StateSource::checkpoint;
  int rolled_back_from_ = -1;      // for the next generation's record

  std::optional<Milliseconds> communication_deadline_ms_;
  int restarts_without_progress_ = 0;

  NodeSpeeds speeds_;           // the newest NodeSpeedsMeasured
  bool speeds_unweighed_ = false;  // since they changed, or the plan did
  std::vector<std::string> dropped_;  // spares of the current plan that a drop put there
};

}  // namespace oobleck::recovery
