// What the recovery controller is told (events) and what it answers
// (actions). Plain values, so that a sequence of them is a test's table row
// and a run's decision log.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/snapshots.h"

namespace oobleck::recovery {

// ---------------------------------------------------------------- events

// Nodes are gone (a process died, a heartbeat stopped, a trace removed them).
struct NodesLost {
  std::vector<std::string> nodes;
  Milliseconds at_ms = 0;
};
// Nodes are ready to take part (a worker connected, a trace added them).
struct NodesJoined {
  std::vector<std::string> nodes;
  Milliseconds at_ms = 0;
};
// Both at one moment (a trace's changes within one millisecond, the losses
// and connections a master saw in one look): the losses are taken first (a
// node lost and back joins anew), then the joins, then one decision, so that
// a recovery takes the joins in.
struct NodesChanged {
  std::vector<std::string> lost, joined;
  Milliseconds at_ms = 0;
};
// A node is on its way: the commit of the step now in progress waits for it,
// so that it joins at that step's boundary (scripted joins stay where the
// script put them).
struct JoinAwaited {
  std::string node;
};
// Every member of the generation has its state and communicators: it trains.
struct GenerationReady {
  int generation = 0;
  Milliseconds at_ms = 0;
};
// One trainer of the generation finished `step` (forward, backward and
// gradient synchronisation) and waits for its commit.
struct StepReported {
  int generation = 0;
  int step = 0;
  std::string node;
  Milliseconds at_ms = 0;
};
// Every trainer of the generation finished `step` at once: the simulator's
// view, which plays iterations, not trainers.
struct StepCompleted {
  int generation = 0;
  int step = 0;
  Milliseconds at_ms = 0;
};
// A collective of the generation failed, and no loss has been seen (yet).
struct CommunicationFailed {
  int generation = 0;
  Milliseconds at_ms = 0;
};
// The clock moved on; due deadlines fire.
struct Timer {
  Milliseconds at_ms = 0;
};
// The state after `step` is saved where no loss of nodes takes it (a
// checkpoint, complete for every layer): a fall-back past f resumes there.
struct StateSaved {
  int step = 0;
  Milliseconds at_ms = 0;
};

// The complete snapshots in the agents' memory now (each replaces what was
// said before): a fall-back past f restores the newest the nodes left hold.
struct SnapshotsHeld {
  std::vector<Snapshot> snapshots;
  Milliseconds at_ms = 0;
};
// A process of `node` died and was restarted in place (its node and agent
// live), and holds the state after the committed step again, from its
// agent's memory. (The driver tells this only when that holds; otherwise
// the node is lost.)
struct WorkerRestarted {
  std::string node;
  Milliseconds at_ms = 0;
};

// The master was restarted (--resume-master) and every node of the job
// either reconnected or is `lost`; the step in flight when it died is moot.
// (Only a controller built from a ControllerState hears it.)
struct MasterRestarted {
  std::vector<std::string> lost;
  Milliseconds at_ms = 0;
};

// The nodes that compute slower than the profile and their peers predict,
// as a detector flags them (straggler_detector.h) or a trace says: each
// with its speed factor (1: as profiled). It replaces what was said before;
// an empty map says that every node is back to full speed. The next commit
// weighs what to do about it (SpeedsWeighed).
struct NodeSpeedsMeasured {
  NodeSpeeds speeds;
  Milliseconds at_ms = 0;
};

using Event = std::variant<NodesLost, NodesJoined, NodesChanged, JoinAwaited, GenerationReady, StepReported,
                           StepCompleted, CommunicationFailed, Timer, StateSaved, SnapshotsHeld,
                           WorkerRestarted, MasterRestarted, NodeSpeedsMeasured>;

// ---------------------------------------------------------------- actions

// Where a generation's training state comes from.
enum class StateSource {
  replicas,    // the nodes hold it (the base plan's layers); missing layers are copied
  initial,     // nothing trained yet: every layer's state is (seed, layer)
  checkpoint,  // the last checkpoint, read by every trainer
  memory,      // a snapshot in the agents' memory, each piece from a node that took it
  mirror,      // a snapshot in the agents' memory, some pieces from mirrors
};

// Why a generation starts.
enum class Cause {
  start,          // the job's first
  loss,           // nodes were lost
  join,           // nodes joined at a step boundary
  communication,  // a collective failed with no node lost: the same members start over
  nodes_back,     // enough nodes came back to train again after waiting
  master_restart, // the master was restarted: the members start over where the state is
  speeds,         // nodes' speeds changed: the batch re-split, or slow nodes moved to lighter places
};

// What the controller weighed when nodes' speeds changed: each choice's
// iteration at the speeds measured. Keep: the plan as it is. Re-split: the
// same places, the batch split for the speeds (no state moves). Re-plan:
// each pipeline's slowest nodes on its lightest places and the batch
// re-split (their layers' state is copied; `replan_copy_ms` is spread over
// the steps it is weighed for). Drop: the slow nodes leave the pipelines
// for the spares, the plan made as a loss of them would make it (`dropped`;
// 0 ms when not weighed). Readmit: dropped nodes back at full speed return
// to the pipelines, as nodes that join would (`readmitted`). Their copies
// are spread as a re-plan's.
struct SpeedChoice {
  enum class Kind { keep, resplit, replan, drop, readmit };
  Kind chosen = Kind::keep;
  NodeSpeeds speeds;
  Milliseconds keep_ms = 0, resplit_ms = 0, replan_ms = 0;
  Bytes replan_copy_bytes = 0;
  Milliseconds replan_copy_ms = 0;
  std::vector<std::string> dropped, readmitted;
  Milliseconds drop_ms = 0, drop_copy_ms = 0, readmit_ms = 0, readmit_copy_ms = 0;
};
[[nodiscard]] std::string_view speed_choice_name(SpeedChoice::Kind kind);

struct Generation {
  int number = 0;
  Cause cause = Cause::start;
  Plan plan;
  int resume_step = 0;  // the first step it trains
  StateSource source = StateSource::initial;
  // True when the replicas no longer covered every layer and the state
  // comes from a save (source checkpoint, memory or mirror).
  bool rolled_back = false;
  // With rolled_back, where the driver reports saves (StateSaved): the last
  // step committed before; steps resume_step..rolled_back_from are trained
  // again.
  int rolled_back_from = -1;
  // With source replicas: the generation whose plan holds the state after
  // step resume_step - 1 (the base; StartGeneration carries its plan), and
  // the copies that complete it, with the planner's estimate of their
  // bytes and time.
  int base_generation = 0;  // 0: planned afresh
  std::vector<Transfer> transfers;
  Bytes copy_bytes = 0;
  Milliseconds copy_ms = 0;
  // Nodes lost and added since the base plan, in the order they were seen.
  std::vector<std::string> lost, added;
  // With cause speeds: what was weighed.
  std::optional<SpeedChoice> speed_choice;
};

// Shared, not copied: plans of thousands of nodes. A generation does not
// keep its base alive (a chain of every plan ever made would): the action
// does, for whoever carries it out.
struct StartGeneration {
  std::shared_ptr<const Generation> generation;
  std::shared_ptr<const Plan> base;  // with source replicas: node_layers() says who holds what
};
// Commit `step`: every trainer applies it. The first commit of a generation
// establishes it: its plan becomes the base that later recoveries plan from.
struct CommitStep {
  int generation = 0;
  int step = 0;
  bool establishes = false;
  bool finish = false;  // the last step: training is over
};
// No plan exists for the nodes left; training resumes when enough join,
// from the checkpoint. `rolled_back`: the replicas held state newer than
// the checkpoint, and it is lost.
struct WaitForNodes {
  std::string why;
  bool rolled_back = false;
};
struct GiveUp {
  enum class Reason { no_plan, no_progress };
  Reason reason = Reason::no_plan;
  std::string why;
  int committed_step = -1;  // the state a checkpoint would have to hold
  std::vector<std::string> lost, added;  // since the base
};

// The generation goes on with its plan, members and state where they are:
// its workers start its communicators over and train `resume_step` again,
// the restarted node's from its own memory. No re-plan, no state moves
// between nodes.
struct RestartInPlace {
  int generation = 0;
  int resume_step = 0;
  std::string node;
};

// Nodes' speeds were weighed at a commit (also when the plan is kept; a
// change follows as a StartGeneration of cause speeds).
struct SpeedsWeighed {
  int step = 0;  // the commit it was weighed at
  SpeedChoice choice;
};

using Action = std::variant<StartGeneration, CommitStep, WaitForNodes, GiveUp, RestartInPlace, SpeedsWeighed>;
using Actions = std::vector<Action>;

[[nodiscard]] std::string_view source_name(StateSource source);
[[nodiscard]] std::string_view cause_name(Cause cause);
// The names back (nullopt: not one of them).
[[nodiscard]] std::optional<StateSource> source_named(std::string_view name);
[[nodiscard]] std::optional<Cause> cause_named(std::string_view name);

// A generation as one JSON object, the record both a live run's metrics and
// the simulator's decision log carry: {kind: "generation", at_ms,
// generation, cause, source, base_generation, rolled_back, resume_step,
// lost, added, pipelines: [[node, ...]], microbatches: [per pipeline],
// spare_nodes, copy_bytes}, rolled_back_from where it is known, and
// speed_choice (speed_choice_record) for cause speeds. `at_ms`: when it was
// decided (since training started, or simulated time).
[[nodiscard]] std::string generation_record(const Generation& generation, Milliseconds at_ms);
// {kind: "speeds", at_ms, step, chosen, speeds: {node: factor}, keep_ms,
// resplit_ms, replan_ms, replan_copy_bytes, replan_copy_ms}.
[[nodiscard]] std::string speeds_record(const SpeedsWeighed& weighed, Milliseconds at_ms);

}  // namespace oobleck::recovery
