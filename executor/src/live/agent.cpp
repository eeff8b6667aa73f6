// A node's agent: starts the node's worker (on CPU one per node), sends the
// master a heartbeat, and reports the worker's end. It dies with the master:
// locally through the parent-death signal, remotely when the control
// channel closes; the worker dies with it in both cases.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "launch.h"
#include "oobleck/executor/live.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

int run_agent(const NodeProcessOptions& options) {
  const auto channel = channel::connect_to(options.master_addr, options.control_port, std::chrono::seconds(60));
  const pid_t worker = spawn_process({options.program, "worker", "--node", options.node, "--master-addr",
                                      options.master_addr, "--control-port", std::to_string(options.control_port),
                                      "--token", options.token, "--parent-pid", std::to_string(::getpid())});
  protocol::send(*channel, protocol::Hello{protocol::Role::agent, options.node, options.token, ::getpid(), worker});
  const auto interval = std::chrono::milliseconds(static_cast<int>(options.heartbeat_interval_ms));
  auto next_beat = std::chrono::steady_clock::now();
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
      // Failure injection on another host: the worker and this agent stop.
      const int signal = std::holds_alternative<protocol::Kill>(m)   ? SIGKILL
                         : std::holds_alternative<protocol::Hang>(m) ? SIGSTOP
                                                                     : 0;
      if (signal != 0) {
        ::kill(worker, signal);
        ::raise(signal);
      }
    }
    int status = 0;
    if (::waitpid(worker, &status, WNOHANG) == worker) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      protocol::send(*channel, protocol::WorkerExit{code});
      return code == 0 ? kExitSuccess : kExitFailure;
    }
    if (!open) {
      ::kill(worker, SIGKILL);
      ::waitpid(worker, &status, 0);
      return kExitFailure;
    }
  }
}

}  // namespace oobleck::executor
