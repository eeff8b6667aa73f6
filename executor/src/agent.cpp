// A node's agent: starts the node's worker (on CPU one per node), sends the
// master a heartbeat, and reports the worker's end. It dies with the master:
// locally through the parent-death signal, remotely when the control
// channel closes; the worker dies with it in both cases.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "control.h"
#include "oobleck/executor/live.h"
#include "launch.h"

namespace oobleck::executor {

int run_agent(const NodeProcessOptions& options) {
  const auto channel = control::connect_to(options.master_addr, options.control_port, std::chrono::seconds(60));
  const pid_t worker =
      spawn_process({options.program, "worker", "--node", options.node, "--master-addr", options.master_addr,
                     "--control-port", std::to_string(options.control_port), "--token", options.token,
                     "--parent-pid", std::to_string(::getpid())});
  channel->send({{"type", "hello"}, {"role", "agent"}, {"node", options.node}, {"token", options.token},
                 {"pid", ::getpid()}, {"worker_pid", worker}});
  const auto interval = std::chrono::milliseconds(static_cast<int>(options.heartbeat_interval_ms));
  auto next_beat = std::chrono::steady_clock::now();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      channel->send({{"type", "heartbeat"}});
      next_beat = now + interval;
    }
    std::vector<control::Json> messages;
    const bool open = channel->receive(
        messages, std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now) + std::chrono::milliseconds(1));
    for (const auto& m : messages) {
      const std::string type = m.value("type", "");
      if (type == "kill" || type == "hang") {  // failure injection on another host
        const int signal = type == "kill" ? SIGKILL : SIGSTOP;
        ::kill(worker, signal);
        ::raise(signal);
      }
    }
    int status = 0;
    if (::waitpid(worker, &status, WNOHANG) == worker) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      channel->send({{"type", "worker_exit"}, {"status", code}});
      return code == 0 ? 0 : kExitFailure;
    }
    if (!open) {
      ::kill(worker, SIGKILL);
      ::waitpid(worker, &status, 0);
      return kExitFailure;
    }
  }
}

}  // namespace oobleck::executor
