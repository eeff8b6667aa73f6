// The processes of a live run, one agent per node (and its workers, one per GPU): started
// locally or over SSH, watched by their heartbeats, fenced when lost, and
// reaped. No sockets here: what must be said to a remote agent, the master
// says over the control server.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/common.h"

namespace oobleck::executor {

struct NodeProcess {
  std::string name;
  bool local = true;
  pid_t agent_pid = 0;
  std::vector<pid_t> worker_pids;  // by GPU, as the agent reported them
  Milliseconds spawned_ms = 0, last_heartbeat_ms = 0;
  Milliseconds connect_by_ms = 0;  // its agent and workers said hello by then, or it is lost
  Milliseconds killed_ms = -1;  // when an injection killed or stopped it
  bool alive = true;            // not yet declared lost
  bool agent_connected = false;
  int gpus = 1, workers_connected = 0;
  int snapshot_port = 0;           // the agent's snapshot server
  Milliseconds crashed_ms = -1;    // when an injection crashed a worker of it
  [[nodiscard]] bool all_workers_connected() const { return workers_connected == gpus; }
};

struct LaunchSettings {
  std::string program;  // this executable, which the workers run (the agents: oobleck-agent beside it)
  std::string master_addr, token;
  int control_port = 0;
  Milliseconds heartbeat_timeout_ms = 1000;
  Milliseconds connect_timeout_ms = 120000;  // from start to the workers' hellos
  int gpus_per_node = 1;                     // workers per node
  std::vector<std::string> hosts;            // a hostfile's or a Slurm allocation's; empty: every node is local
  bool slurm = false;                        // other hosts' agents start with srun, not ssh
  Milliseconds master_wait_ms = 300000;      // agents and workers wait this long for a restarted master
  double node_cpus = 0;                      // > 0: local agents run within this many cores (cpu_quota.h)
  bool standby_workers = true;               // agents keep a standby worker (agent.cpp)
};

class ProcessTable {
 public:
  explicit ProcessTable(LaunchSettings settings) : settings_(std::move(settings)) {}
  // Agents not yet reaped are killed (their workers die with them); a pid
  // that was reaped may belong to someone else by now, so it is left alone.
  ~ProcessTable();
  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  void start(const std::string& node, Milliseconds now_ms);
  // A restarted master's: a node its predecessor started, whose agent is
  // to reconnect by `connect_by_ms` (`agent_pid`: a local agent's, killed
  // when the node is fenced once the agent confirmed it in its hello).
  void adopt(const std::string& node, bool local, pid_t agent_pid, Milliseconds now_ms, Milliseconds connect_by_ms);
  // A node its predecessor lost: never started again.
  void remember_lost(const std::string& node, bool local);
  // The agent of an adopted node said hello with its pid.
  void confirm_agent(const std::string& node, pid_t pid);
  [[nodiscard]] NodeProcess* find(const std::string& node);
  [[nodiscard]] const std::map<std::string, NodeProcess>& nodes() const { return nodes_; }
  // Alive and not killed by an injection (which is not yet detected).
  [[nodiscard]] bool healthy(const std::string& node) const;

  // An injected failure of a local node: SIGKILL (or SIGSTOP, `hang`) to
  // its worker and agent. False for a remote node: its agent must be told.
  bool inject_failure(const std::string& node, bool hang, Milliseconds now_ms);
  // A node declared lost must not act again: its local agent is killed
  // (SIGKILL also ends a stopped process; the worker dies with the agent).
  // False for a remote node: its agent must be told.
  bool fence(const std::string& node);

  // Collects ended agent processes (an agent itself, or the ssh that
  // started it on its host).
  void reap();
  // Nodes still alive whose agent process ended since the last call, with
  // the reason: an ssh that failed says so here, long before any timeout.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> ended_agents();
  // Agents end once their worker has; waits for them until `deadline_ms`.
  void wait_for_agents(Milliseconds deadline_ms);

  // Nodes whose heartbeat stopped, or whose workers never all connected, with
  // the reason, as of `now_ms`.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> overdue(Milliseconds now_ms) const;

 private:
  LaunchSettings settings_;
  std::map<std::string, NodeProcess> nodes_;
  std::set<pid_t> children_;  // not yet reaped
  std::set<pid_t> adopted_;   // local agents of a predecessor, confirmed by their hellos
  std::vector<std::pair<pid_t, int>> ended_;  // reaped agent processes and their wait statuses
};

// Monotonic milliseconds, the time base of every process on this machine.
[[nodiscard]] Milliseconds now_ms();
// Milliseconds since 1970 (wall clock): what outlives a process.
[[nodiscard]] double unix_now_ms();

}  // namespace oobleck::executor
