// A node's agent: starts the node's workers (one per GPU; on CPU each a
// process standing for one), sends the master a heartbeat, and reports a
// worker's end. It dies with the master: locally through the parent-death
// signal, remotely when the control channel closes; the workers die with it
// in both cases. A worker that fails takes its node with it: the agent
// reports it, stops the others and ends.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "launch.h"
#include "oobleck/executor/live.h"
#include "protocol/protocol.h"

namespace oobleck::executor {
namespace {

void kill_all(std::vector<pid_t>& workers, int signal) {
  for (pid_t w : workers) {
    if (w > 0) ::kill(w, signal);
  }
}

}  // namespace

int run_agent(const NodeProcessOptions& options) {
  const auto channel = channel::connect_to(options.master_addr, options.control_port, std::chrono::seconds(60));
  std::vector<pid_t> workers;
  protocol::Hello hello{protocol::Role::agent, options.node, options.token, ::getpid(), 0, {}};
  for (int gpu = 0; gpu < options.gpus; ++gpu) {
    workers.push_back(spawn_process({options.program, "worker", "--node", options.node, "--gpu", std::to_string(gpu),
                                     "--master-addr", options.master_addr, "--control-port",
                                     std::to_string(options.control_port), "--token", options.token, "--parent-pid",
                                     std::to_string(::getpid())}));
    hello.worker_pids.push_back(workers.back());
  }
  protocol::send(*channel, hello);
  const auto interval = std::chrono::milliseconds(static_cast<int>(options.heartbeat_interval_ms));
  auto next_beat = std::chrono::steady_clock::now();
  int running = options.gpus;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      protocol::send(*channel, protocol::Heartbeat{});
      next_beat = now + interval;
    }
    std::vector<protocol::Message> messages;
    const bool open = protocol::receive(
        *channel, messages,
        std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now) + std::chrono::milliseconds(1));
    for (const auto& m : messages) {
      // Failure injection on another host: the workers and this agent stop.
      const int signal = std::holds_alternative<protocol::Kill>(m)   ? SIGKILL
                         : std::holds_alternative<protocol::Hang>(m) ? SIGSTOP
                                                                     : 0;
      if (signal != 0) {
        kill_all(workers, signal);
        ::raise(signal);
      }
    }
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      const auto it = std::find(workers.begin(), workers.end(), pid);
      if (it == workers.end()) continue;
      *it = 0;
      --running;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 || running == 0) {
        protocol::send(*channel, protocol::WorkerExit{static_cast<int>(it - workers.begin()), code});
      }
      if (code != 0) {
        kill_all(workers, SIGKILL);
        return kExitFailure;
      }
      if (running == 0) return kExitSuccess;
    }
    if (!open) {
      kill_all(workers, SIGKILL);
      while (::waitpid(-1, &status, 0) > 0) {
      }
      return kExitFailure;
    }
  }
}

}  // namespace oobleck::executor
