#include "process_table.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "live/cpu_quota.h"
#include "live/launch.h"

namespace oobleck::executor {

Milliseconds now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

// Alive, and not a zombie its (adoptive) parent has yet to reap.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

}  // namespace

double unix_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ProcessTable::~ProcessTable() {
  for (pid_t child : children_) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  for (pid_t agent : adopted_) ::kill(agent, SIGKILL);
  if (settings_.node_cpus > 0) CpuQuota::remove_groups(cpu_group_prefix(::getpid()));
}

void ProcessTable::start(const std::string& node, Milliseconds now) {
  NodeProcess p;
  p.name = node;
  p.local = settings_.hosts.empty() || is_local_host(node);
  p.spawned_ms = now;
  p.connect_by_ms = now + settings_.connect_timeout_ms;
  p.gpus = settings_.gpus_per_node;
  // The agent is oobleck-agent, beside this program (on every host alike);
  // its workers run this program.
  const std::string agent_program =
      (std::filesystem::path(settings_.program).parent_path() / "oobleck-agent").string();
  std::vector<std::string> args = {
      agent_program,     "--worker-program", settings_.program,
      "--node",          node,
      "--master-addr",   settings_.master_addr,
      "--control-port",  std::to_string(settings_.control_port),
      "--heartbeat-ms",  std::to_string(std::max(10.0, settings_.heartbeat_timeout_ms / 5)),
      "--gpus",          std::to_string(settings_.gpus_per_node),
      "--master-wait-ms", std::to_string(static_cast<std::int64_t>(settings_.master_wait_ms))};
  if (settings_.standby_workers) args.push_back("--standby-worker");
  if (p.local) {
    args.push_back("--parent-pid");
    args.push_back(std::to_string(::getpid()));
    if (settings_.node_cpus > 0) {
      args.push_back("--cpus");
      args.push_back(std::to_string(settings_.node_cpus));
    }
  } else {
    args = settings_.slurm ? over_srun(node, args) : over_ssh(node, args);
  }
  p.agent_pid = spawn_process(args, settings_.token + "\n");
  children_.insert(p.agent_pid);
  nodes_[node] = p;
}

void ProcessTable::adopt(const std::string& node, bool local, pid_t agent_pid, Milliseconds now,
                         Milliseconds connect_by) {
  NodeProcess p;
  p.name = node;
  p.local = local;
  p.agent_pid = agent_pid;
  p.spawned_ms = p.last_heartbeat_ms = now;
  p.connect_by_ms = connect_by;
  p.gpus = settings_.gpus_per_node;
  nodes_[node] = p;
}

void ProcessTable::remember_lost(const std::string& node, bool local) {
  NodeProcess p;
  p.name = node;
  p.local = local;
  p.alive = false;
  p.gpus = settings_.gpus_per_node;
  nodes_[node] = p;
}

void ProcessTable::confirm_agent(const std::string& node, pid_t pid) {
  NodeProcess& p = nodes_.at(node);
  if (!p.local || children_.count(p.agent_pid) || pid != p.agent_pid || pid <= 0) return;
  adopted_.insert(pid);
}

NodeProcess* ProcessTable::find(const std::string& node) {
  const auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool ProcessTable::healthy(const std::string& node) const {
  const auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.alive && it->second.killed_ms < 0;
}

bool ProcessTable::inject_failure(const std::string& node, bool hang, Milliseconds now) {
  NodeProcess& p = nodes_.at(node);
  p.killed_ms = now;
  if (!p.local) return false;
  const int signal = hang ? SIGSTOP : SIGKILL;
  // The agent first: its connection closing is how the master learns of a
  // node's loss, and a process takes tens of milliseconds to die here.
  if (children_.count(p.agent_pid) || adopted_.count(p.agent_pid)) ::kill(p.agent_pid, signal);
  if (p.workers_connected > 0) {  // connected: alive, the pids are theirs
    for (pid_t w : p.worker_pids) ::kill(w, signal);
  }
  return true;
}

bool ProcessTable::fence(const std::string& node) {
  NodeProcess& p = nodes_.at(node);
  p.alive = false;
  if (!p.local) return false;
  if (children_.count(p.agent_pid)) ::kill(p.agent_pid, SIGKILL);
  // A predecessor's agent: not a child, so not reaped here (init does).
  if (adopted_.erase(p.agent_pid)) {
    ::kill(p.agent_pid, SIGKILL);
  } else if (!children_.count(p.agent_pid)) {
    return false;  // unconfirmed: its agent must be told, if it ever connects
  }
  return true;
}

void ProcessTable::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    children_.erase(pid);
    ended_.emplace_back(pid, status);
  }
}

std::vector<std::pair<std::string, std::string>> ProcessTable::ended_agents() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [pid, status] : ended_) {
    for (const auto& [name, p] : nodes_) {
      if (p.agent_pid != pid || !p.alive) continue;
      std::string how = WIFEXITED(status)     ? "exited with status " + std::to_string(WEXITSTATUS(status))
                        : WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                              : "ended";
      std::string what = p.local ? "its agent process "
                         : settings_.slurm ? "the srun starting its agent "
                                           : "the ssh starting its agent ";
      out.emplace_back(name, what + how + (p.agent_connected ? "" : " before the agent connected"));
    }
  }
  ended_.clear();
  return out;
}

void ProcessTable::wait_for_agents(Milliseconds deadline) {
  const auto agents_left = [&] {
    std::erase_if(adopted_, [](pid_t pid) { return !running(pid); });
    return !children_.empty() || !adopted_.empty();
  };
  while (agents_left() && now_ms() < deadline) {
    reap();
    ::usleep(10000);
  }
}

std::vector<std::pair<std::string, std::string>> ProcessTable::overdue(Milliseconds now) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, p] : nodes_) {
    if (!p.alive) continue;
    if (p.agent_connected && now - p.last_heartbeat_ms > settings_.heartbeat_timeout_ms) {
      out.emplace_back(name, "no heartbeat for " + std::to_string(static_cast<int>(now - p.last_heartbeat_ms)) + " ms");
    } else if (!p.agent_connected && !children_.count(p.agent_pid) && p.local && p.agent_pid > 0 &&
               !running(p.agent_pid)) {
      // A predecessor's local agent that is gone will not reconnect.
      out.emplace_back(name, "its agent process ended while the master was away");
    } else if ((!p.agent_connected || !p.all_workers_connected()) && now > p.connect_by_ms) {
      out.emplace_back(name, std::string(p.agent_connected ? "its workers" : "its agent") +
                                 " did not connect within " +
                                 std::to_string(static_cast<int>((p.connect_by_ms - p.spawned_ms) / 1000)) + " s");
    }
  }
  return out;
}

}  // namespace oobleck::executor
