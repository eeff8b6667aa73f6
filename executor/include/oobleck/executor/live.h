// Live runs (oobleck-run): the master, one agent per node and one worker per
// GPU train a plan, survive node failures and take in nodes that join.
//
// The master holds the rendezvous store and the control channel, watches the
// agents' heartbeats and drives the recovery controller (recovery/), which
// commits each step once every worker has finished it and on a loss asks the
// planner for a new plan (`reconfigure`, exactly as `oobleck-plan
// reconfigure` does, and as the simulator's oobleck policy does); the master
// broadcasts it as a new generation.
// Workers abandon the communication in flight, discard the interrupted step,
// rebuild their communicators, copy the layer states the planner assigns
// them from surviving replicas, and redo the step on the same global batch.
// Plain C++ interface.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::executor {

// One scripted event of --inject, in the trace format `when,action,node`.
// `when` is milliseconds since training started, `step:N` (during step N,
// once its first forward pass has run), `recovery:R` (during the R-th
// reconfiguration, once the workers have started rebuilding) or
// `rollback:R` (during the R-th generation that rolls back past f, once its
// workers have started restoring) or `commit:N` (as the master commits step
// N: once it kept the commit in its state, before any worker hears of it).
// `remove`
// kills the node's agent and worker (SIGKILL: connections close at once),
// `hang` stops them (SIGSTOP: connections stay open, only the heartbeat
// tells), `add` starts a new node of that name, `crash` kills the node's
// worker of GPU 0 alone (SIGKILL; its agent restarts it). With snapshots
// or checkpoints, a crash, removal or hang during step N strikes once the
// snapshots before N are in the agents' memory and mirrors and the
// checkpoints before N on disk, and step N is not committed before it
// struck, whatever the timing. `kill-master` (its node field `master`)
// SIGKILLs the master itself, at once: the job waits for --resume-master.
struct Injection {
  enum class When { AtTime, DuringStep, DuringRecovery, DuringRollback, AtCommit };
  // Slow: the node's workers computing at `factor` of their speed (its
  // agent throttles their CPU) until a slow line with factor 1.
  enum class Action { Remove, Add, Hang, Crash, KillMaster, Slow };
  When when = When::AtTime;
  Milliseconds time_ms = 0;  // AtTime
  int index = 0;             // the step N, the recovery R or the rollback R
  Action action = Action::Remove;
  std::string node;
  double factor = 1;  // Slow
  int line = 0;  // in the file, for messages
};

// CRLF accepted, '#' starts a comment. Errors name origin:line.
[[nodiscard]] std::vector<Injection> parse_injections(std::string_view text, const std::string& origin);

// --chaos: random removals and joins. Removals only of nodes whose loss the
// planner can still recover from (the replicas cover it), some of them timed
// to land during a recovery, unless a share of them crash a worker alone or
// kill several nodes past f; joins bring new nodes named chaos-1, chaos-2, ...
struct ChaosOptions {
  bool enabled = false;
  std::uint64_t seed = 0;
  int events = 20;                   // removals and joins in all
  Milliseconds mean_interval_ms = 1500;  // exponential gaps between events
  // Of the failures: the share that crash a node's worker alone (its agent
  // lives), and the share that kill several nodes at once, enough to leave
  // some layer without a replica (past f; a rollback follows). The rest
  // kill one node a recovery survives.
  double crash_share = 0;
  double past_f_share = 0;
  // Of all events, the share that slow a node down (its CPU throttled to a
  // factor drawn from [0.3, 0.7], as --inject's slow) or, while one is
  // slow, end that slowdown.
  double slow_share = 0;
};

struct MasterOptions {
  std::string plan_path, profile_path, data_path;
  int steps = 1;
  std::uint64_t seed = 1;
  double learning_rate = 3e-3;       // AdamW's (TrainOptions::learning_rate)
  int threads = 1;                   // intra-op threads per worker
  std::string device = "cpu";        // cpu, or cuda (TrainOptions::device)
  bool deterministic = false;        // on cuda: use_deterministic_kernels in every worker
  std::string metrics_path;          // JSON lines: one per step, one per reconfiguration
  std::string chrome_trace_path;     // the last step's schedule
  std::string hostfile;              // node names are hosts; others are reached over SSH
  // Where agents start: "local", "ssh" (the hostfile's hosts), "slurm" (the
  // nodes of the Slurm allocation this runs in, with srun), or "auto": ssh
  // with a hostfile, else slurm inside an allocation that has the plan's
  // nodes, else local.
  std::string launcher = "auto";
  // Where agents reach the master; empty: 127.0.0.1 when every node is this
  // host, else the address this host's name resolves to.
  std::string master_addr;
  Milliseconds heartbeat_timeout_ms = 1000;
  // > 0: each node started on this machine runs within this many of its
  // cores (a cgroup CPU quota), as a machine of its own would: nodes
  // emulated on one machine then take no CPU from each other.
  double node_cpus = 0;
  double comm_timeout_s = 120;       // last resort for a communication nothing else interrupts
  std::vector<Injection> injections;
  ChaosOptions chaos;
  std::string checkpoint_dir;        // with checkpoint_every > 0: save there every K steps
  int checkpoint_every = 0;
  std::string resume_dir;            // start from the checkpoint saved there
  double wait_for_nodes_s = 600;     // too few nodes for any plan: wait this long for joins, then exit 3
  // Hosts of the hostfile or the allocation that the plan leaves out are
  // spares: started, one per node lost, whenever fewer nodes run than the
  // plan began with. A host that failed is never started again.
  bool join_spares = false;
  // Each agent keeps a worker process started ahead, which replaces a
  // crashed worker without waiting for a new process to load libtorch.
  bool standby_workers = true;
  // A loss during a step: pipelines that the new plan leaves as they were
  // keep their passes of it (recovery/step_shares.h). Those still in their
  // passes are waited for: automatic, where that saves more of the resumed
  // step than the wait costs (worth_waiting, with each pipeline's passes
  // expected to take what they took in the last step); always (up to a
  // deadline of the heartbeat timeout or three steps); never.
  enum class WaitForPasses { automatic, always, never };
  WaitForPasses wait_for_passes = WaitForPasses::automatic;
  int snapshot_every = 1;            // steps between snapshots in the agents' memory (0: none)
  int mirror_every = 4;              // steps between snapshots mirrored to another node (a multiple of snapshot_every)
  // Nodes the straggler detector flags (each node's compute time a step
  // against the profile's and its peers'): mitigate re-splits the batch or
  // re-plans when the cost model prices that best; resplit and replan
  // allow only that choice (besides keeping); keep (the default) only
  // reports them: a profile that prices some stages worse than others
  // (tensor-parallel stages on CPU nodes sharing cores, whose all-reduces
  // wait on peers) reads as slow nodes.
  enum class Stragglers { mitigate, resplit, replan, drop, keep };
  Stragglers stragglers = Stragglers::keep;
  // A node is flagged once its speed (against its peers) stays below the
  // first for several steps, and unflagged once it stays above the second.
  double straggler_slow_below = 0.75, straggler_recovered_above = 0.85;
  // A node dropped as slow is a spare that nothing measures: after this
  // many steps (doubled at each new drop of it, up to 16 times) it is
  // taken to be at full speed again, and the controller weighs taking it
  // back.
  int straggler_probation_steps = 20;
  // Where the master keeps what a master restarted after it needs
  // (master_state.h); empty: oobleck-state-<pid> in the working folder,
  // removed when the run ends by itself.
  std::string state_dir;
  // How long agents and workers wait for a restarted master when theirs is
  // gone, training state in hand, before they end.
  double master_wait_s = 300;
  // Go on with the job whose master kept its state here (every other
  // option comes from there).
  std::string resume_master_dir;
  std::string program;               // this executable: started again as agents and workers
};

// A node of the run could not be started (an agent that ended before it
// connected, an ssh that failed): the run cannot begin as planned.
class NodeStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Trains to the end, or (resume_master_dir) goes on with the job of a
// master that died: reconnects its agents and workers, which kept their
// training state, and resumes after its last committed step, appending to
// its metrics. Throws InputError for bad input (before anything
// starts) and NoPlanError when a loss leaves no plan and no checkpoint to
// roll back to, or too few nodes for wait_for_nodes_s (exit kExitNoPlan, as
// oobleck-plan); returns kExitSuccess or kExitFailure.
[[nodiscard]] int run_master(const MasterOptions& options);

// The processes the master starts: `node` is the plan's node name, the
// master is reached at master_addr:control_port.
struct NodeProcessOptions {
  std::string node;
  std::string master_addr = "127.0.0.1";
  int control_port = 0;
  int parent_pid = 0;        // when set, exit if the parent is already gone
  std::string token;         // the job's: said in every hello
  std::string program;       // agents start workers with it
  Milliseconds heartbeat_interval_ms = 200;
  int gpus = 1;              // an agent starts a worker for each
  int gpu = 0;               // a worker's: on CUDA, its device
  int snapshot_port = 0;     // a worker's: its agent's snapshot server, on this host
  double cpus = 0;           // an agent's: > 0, it and its workers run within this many cores (cpu_quota.h)
  // An agent's: fork its workers, at the start and after a crash, from a
  // loaded worker zygote (run_worker_zygote) instead of starting each anew.
  // A worker's: it is that zygote.
  bool standby = false;
  // The master gone, how long to wait for a restarted one (reconnecting
  // to the same address and port) before ending.
  Milliseconds master_wait_ms = 300000;
};
[[nodiscard]] int run_agent(const NodeProcessOptions& options);
[[nodiscard]] int run_worker(const NodeProcessOptions& options);
// The zygote: for each GPU index read from `requests` (its agent's pipe,
// after the token), forks a worker that runs run_worker, and writes that
// worker's process id on descriptor 3. Returns at the end of `requests`.
// Call it before anything starts a thread.
[[nodiscard]] int run_worker_zygote(const NodeProcessOptions& options, std::istream& requests);

}  // namespace oobleck::executor
