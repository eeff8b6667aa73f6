// How an agent starts its node's workers: forked from the node's worker
// zygote (worker/zygote.cpp: the worker program loaded once) while it
// lives, else each as a new process of the worker program.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "launch.h"

namespace oobleck::executor {

class WorkerStarter {
 public:
  // The worker program's command for a role ({"--gpu", "3"}, or
  // {"--standby"} for the zygote).
  using Command = std::function<std::vector<std::string>(std::vector<std::string>)>;

  // With `zygote`, starts it (this process becomes a subreaper, so that
  // the forked workers are its children). It loads while the first start()
  // waits for it.
  WorkerStarter(Command command, std::string token, bool zygote);
  ~WorkerStarter();
  WorkerStarter(const WorkerStarter&) = delete;
  WorkerStarter& operator=(const WorkerStarter&) = delete;

  struct Started {
    pid_t pid = 0;
    bool forked = false;  // from the zygote
  };
  // GPU `gpu`'s worker. Throws when it cannot start one at all.
  Started start(int gpu);

  // A child of this process ended: true when it was the zygote (whose
  // workers are started anew from then on).
  bool reaped(pid_t pid);
  // SIGKILL to the zygote, with the workers. (Never stopped: one stopped
  // before it set its parent-death signal would outlive its agent.)
  void kill();
  // The zygote's requests closed: it ends, and is waited for.
  void end();

  // The longest a request waits for its answer (the first one waits for
  // the zygote to load).
  static constexpr int kAnswerTimeoutMs = 120000;

 private:
  [[nodiscard]] pid_t fork_from_zygote(int gpu);
  void forget_zygote(const char* why);

  Command command_;
  std::string token_;
  SpawnedProcess zygote_;  // pid 0: none
};

}  // namespace oobleck::executor
