// The master of a live run (master.cpp): one thread, one event loop,
// carrying out the recovery controller's decisions. Its injections and
// chaos are in master_injections.cpp; snapshots, mirrors and in-place
// restarts in master_snapshots.cpp; the state it keeps for a master
// restarted after it, and that one's resumption, in master_resume.cpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoints.h"
#include "comm/store_server.h"
#include "control_server.h"
#include "injector.h"
#include "job_inputs.h"
#include "master_state.h"
#include "oobleck/executor/live.h"
#include "oobleck/recovery/controller.h"
#include "oobleck/recovery/straggler_detector.h"
#include "process_table.h"
#include "reporter.h"
#include "snapshot_ledger.h"
#include "step_ledger.h"
#include "oobleck/recovery/step_shares.h"

namespace oobleck::executor {

using recovery::CarriedStep;
using recovery::HeldSums;
using recovery::StepShares;
using recovery::WorkerId;

class Master {
 public:
  // `kept`: go on with the job of a master that died (its kept state).
  explicit Master(const MasterOptions& options, std::optional<MasterState> kept = std::nullopt);
  // A run that did not end by itself (an error, an exception) takes its
  // processes with it; the state folder says the job is over (or goes,
  // when it was the default one).
  ~Master();
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;
  int run();

 private:
  // resuming: a restarted master waits for the job's nodes to reconnect.
  enum class Phase { starting, resuming, training, finishing };

  // What comes in.
  void handle(const ControlServer::Inbound& in);
  void from_agent(const std::string& node, const protocol::Message& m);
  void from_worker(const std::string& node, int gpu, const protocol::Message& m);
  void on_ready(const std::string& node, int gpu, const protocol::Ready& m);
  void on_recovering();
  void on_recovered(const std::string& node, int gpu, const protocol::Recovered& m);
  void lose(const std::string& node, const std::string& reason);
  [[nodiscard]] int rank_of(const std::string& node) const;
  [[nodiscard]] int worker_rank(const std::string& node, int gpu) const { return rank_of(node) * gpus_ + gpu; }
  // The samples steps 0 .. step - 1 trained, a global batch each.
  [[nodiscard]] std::int64_t samples_before(int step) const {
    return static_cast<std::int64_t>(step) * in_.initial_plan.global_microbatches * in_.profile.microbatch_size;
  }
  [[nodiscard]] static std::string worker_name(const std::string& node, int gpu) {
    return node + " GPU " + std::to_string(gpu);
  }
  void send_generation(const recovery::Generation& g, const Plan* base, const CarriedStep& carried);
  // A generation's messages (`send`), sent once the pipelines that keep the
  // resumed step's sums (step_shares.h) are past their passes, or at once.
  // `may_keep`: the workers' state is the running generation's (no rollback).
  void dispatch(std::function<void(const CarriedStep&)> send, const Plan& next, int resume_step, bool may_keep);
  void send_held(bool waited_out);
  void on_passed(const std::string& node, int gpu, const protocol::Passed& m);
  // Whether holding a generation for `next` back until the keepable
  // pipelines still in their passes pass saves time (worth_waiting), with
  // their passes expected to take what they took in the last whole step.
  [[nodiscard]] bool waiting_saves_time(const Plan& next, Milliseconds now) const;

  // To a worker, or held back while it restarts (sent once it said hello).
  void send_to_worker(const std::string& node, int gpu, const protocol::NewGeneration& m);
  // The controller's decisions, carried out.
  void decide(const recovery::Event& event);
  void start_generation(const recovery::Generation& g, const Plan* base, Milliseconds plan_ms);
  void commit(const recovery::CommitStep& c, bool pause);
  [[noreturn]] void give_up(const recovery::GiveUp& g);
  void wait_for_nodes(const recovery::WaitForNodes& w);
  void advance();
  void finish();
  // Injections and chaos.
  Milliseconds inject(Milliseconds wait_ms);
  void join_spares();
  void fire(const Injection& event);
  void strike(const Injection& event, const std::string& why);
  void kill_node(const std::string& node, const std::string& why, bool hang);
  // Stragglers (master_speeds.cpp): a slowdown injected, each node's
  // compute time of a step measured, and the controller told of what the
  // detector flags.
  void slow_node(const std::string& node, double factor, const std::string& why);
  // A node's work in one step, as its slowest worker timed it: its passes,
  // and the optimizer step that ended the step before.
  struct NodeWork {
    Milliseconds compute_ms = 0, optimizer_ms = 0;
  };
  void measure_work(int step, const std::string& node, const NodeWork& work);
  void price_optimizer(const std::map<std::string, NodeWork>& measured, double scale);
  [[nodiscard]] std::map<std::string, Milliseconds> predicted_compute_ms() const;
  void speeds_weighed(const recovery::SpeedsWeighed& w);
  void retry_dropped_nodes(int committed_step);
  // Snapshots and in-place restarts (master_snapshots.cpp).
  void on_snapshot_stored(const std::string& holder, const protocol::SnapshotStored& s);
  void on_worker_restarted(const std::string& node, const protocol::WorkerRestarted& m);
  void restart_in_place(const recovery::RestartInPlace& r);
  void send_restart(const recovery::RestartInPlace& r, const CarriedStep& carried);
  void crash_during_next_step(const std::string& node, const std::string& why);
  [[nodiscard]] std::vector<std::string> unrestored_nodes() const;
  void forget_missing_snapshot(int step, int port);
  void assign_mirrors();
  void crash_worker(const std::string& node, const std::string& why);
  // Injections during a step wait for the snapshots and checkpoints before it.
  void fire_due_step_events();
  [[nodiscard]] bool snapshots_caught_up(int step) const;
  [[nodiscard]] bool state_caught_up(int step) const;
  // The pieces of the snapshot of `step`, from the holders `source` allows.
  void add_snapshot_sources(protocol::NewGeneration& m, int step, bool with_mirrors);
  [[nodiscard]] std::string snapshot_host(const std::string& node) const;
  [[nodiscard]] ChaosView chaos_view();
  // The kept state (master_resume.cpp): written before any worker hears
  // of what it records (keep_state), or at the end of a loop's turn when
  // something else changed (state_changed_).
  void keep_state(bool finished = false);
  void adopt_kept_nodes();
  void check_reconnected_worker(const std::string& node, const protocol::Hello& hello);
  void resume_when_reconnected();
  void end_kept_state();

  MasterOptions o_;
  std::optional<MasterState> kept_;  // a restarted master's start
  JobInputs in_;
  CostModel cost_;
  TemplateSet no_templates_;  // the controller builds them as nodes take part (pipelines sharing nodes: their one)
  int gpus_;  // per node: a worker each
  std::string token_;
  ControlServer server_;
  ServedStore store_;
  protocol::Welcome welcome_;
  ProcessTable processes_;
  recovery::Controller controller_;
  Reporter reporter_;
  CheckpointWriter checkpoints_;
  Injector injector_;

  Phase phase_ = Phase::starting;
  bool done_ = false;
  Milliseconds started_ms_ = 0, training_start_ms_ = 0, finish_deadline_ms_ = 0;
  // Too few nodes for any plan: until when joins are awaited, and why.
  Milliseconds wait_deadline_ms_ = -1;
  std::string wait_why_;
  // The generation in hand, and the number its messages carry: one per
  // start of its communicators (a new generation, or a restart in place).
  std::shared_ptr<const recovery::Generation> generation_;
  int wire_ = 0;
  std::vector<std::string> ranks_;  // nodes; worker rank = node rank x gpus_ + GPU
  bool established_ = false;
  RecoveryTiming timing_;
  // Losses seen since the last recovery that trained, for its report.
  Milliseconds chain_failure_ms_ = -1, chain_detected_ms_ = -1;
  std::map<std::string, std::string> loss_reasons_;
  // What this look at the channel found: decided together.
  std::vector<std::string> lost_now_, joined_now_;
  // Steps.
  StepLedger ledger_;
  Milliseconds step_start_ms_ = 0, last_iteration_ms_ = 0;
  std::int64_t samples_ = 0;
  std::string last_comm_error_;
  std::map<std::pair<int, std::string>, int> ready_workers_;  // (step, node) -> workers ready
  std::set<int> done_ranks_;
  std::map<int, protocol::StepTimeline> timelines_;
  // Stragglers: each node's compute time of a step (its slowest worker's).
  std::map<int, std::map<std::string, NodeWork>> work_ms_;
  std::map<std::pair<int, std::string>, NodeWork> node_work_ms_;  // (step, node): its workers' so far
  recovery::StragglerDetector stragglers_;
  std::map<std::string, int> dropped_until_step_;    // spares dropped as slow: tried again after that step
  std::map<std::string, int> drop_probation_steps_;  // how long each was, last time
  struct MeasuredStep {
    NodeSpeeds speeds;
    Milliseconds predicted_ms = -1;
  };
  std::map<int, MeasuredStep> measured_steps_;  // for the step records
  // Snapshots and in-place restarts.
  SnapshotLedger snapshots_;
  bool snapshots_changed_ = false;  // since the controller was last told (SnapshotsHeld)
  std::map<std::string, std::string> mirror_of_;  // node -> its mirror's node
  // An injection during step N (crash, remove, hang) strikes once the
  // snapshots and checkpoints before N are where they go (state_caught_up), and step N
  // is not committed before its node was lost or restarted (Ready messages
  // wait in held_ready_), so that it strikes during step N whatever the
  // timing.
  // Once struck, it stays until its node was lost or restarted.
  struct PendingStepEvent {
    Injection event;
    std::string why;
    Milliseconds since_ms = 0;
    bool struck = false;
  };
  std::vector<PendingStepEvent> pending_step_events_;
  int rollbacks_ = 0;  // generations started that roll back
  // Generations started for lost or joined nodes, speeds or nodes back: what
  // recovery:R counts. A step restarted after a communication failure with no
  // node lost is not one, so a transient error does not move a script's aim.
  int recoveries_ = 0;
  std::vector<std::tuple<std::string, int, protocol::Ready>> held_ready_;  // (node, GPU, message)
  // The generation the workers run (the last one sent: running_wire_), the
  // step in flight in it and each pipeline's share of it, what the workers'
  // sums are known to hold of it (past their passes, or kept and not
  // trained on yet) and those restarted since it was sent or failed in it
  // (they will not get further); whether its
  // workers are training (all recovered). A generation held back until
  // pipelines it lets keep their sums are past their passes.
  Plan running_plan_;
  int running_wire_ = -1;
  bool running_trains_ = false;
  int listed_step_ = -1;  // the step the running generation trains on lists, not the plan's split
  StepShares shares_;
  std::map<WorkerId, int> running_pipeline_;  // each trainer's pipeline in running_plan_
  HeldSums held_sums_;                        // of shares_.step
  std::set<WorkerId> settled_;
  // By pipeline of running_plan_: when (since its step began) its last
  // worker passed, in the step in flight and in the last step trained on
  // the plan's split.
  std::map<int, Milliseconds> passing_ms_, last_pass_ms_;
  struct HeldGeneration {
    std::function<void(const CarriedStep&)> send;
    Plan next;
    int resume_step = 0;
    Milliseconds since_ms = 0, deadline_ms = 0;
    bool waits = false;  // for passes (else it goes at once, keeping what has passed)
  };
  std::optional<HeldGeneration> held_generation_;
  std::map<std::string, Milliseconds> worker_gone_;
  // (node, GPU): a worker's hello on a node whose workers were all there, the
  // agent's word of a restart not yet read (a standby worker says hello at
  // once, on a connection of its own), due by then.
  std::map<std::pair<std::string, int>, Milliseconds> unannounced_hellos_;
  std::map<std::pair<std::string, int>, int> closes_expected_;  // (node, GPU): restarted before its close was seen  // a worker's connection closed: the agent's word due by then
  struct Restarting {
    bool connected = false;                       // the new worker said hello
    std::optional<protocol::NewGeneration> held;  // what it is sent once it did
  };
  std::map<std::pair<std::string, int>, Restarting> restarting_;  // (node, GPU)
  // Restarted in place, their layers not read back before the next commit.
  std::set<std::pair<std::string, int>> unrestored_;
  std::vector<RestartTiming> restarts_;  // in place since the last commit
  // The kept state.
  std::string state_dir_;
  bool default_state_dir_ = false;
  bool state_changed_ = false;
  bool ended_by_itself_ = false;
  double training_start_unix_ms_ = 0;
  std::string last_step_record_;
  Milliseconds kept_ms_ = 0;  // writing it, in all
  int times_kept_ = 0;
};

}  // namespace oobleck::executor
