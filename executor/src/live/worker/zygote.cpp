// A node's worker zygote: the worker program with its libraries loaded
// (about 0.8 s of CPU for Debian's libtorch and the 289 libraries it
// brings), which forks a worker for each GPU its agent asks for. Every
// worker of the node, at the start and after a crash, then costs a fork
// instead of a load: the node loads once, not once per worker and again
// for each restart, and no load competes with training or a recovery.
//
// A request is a GPU index on standard input; the answer, on kReplyFd, the
// new worker's process id. Forking is safe only from a process of one
// thread that has not started libtorch's (no pools, no CUDA): the zygote
// does nothing else. Each worker is forked twice, through a middle process
// that ends at once, so that it becomes its agent's child (the agent is a
// subreaper): the agent reaps it, and it dies with the agent.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "live/launch.h"
#include "oobleck/common.h"
#include "oobleck/executor/live.h"

namespace oobleck::executor {
namespace {

[[nodiscard]] int thread_count() {
  std::error_code error;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error)) {
    (void)entry;
    ++count;
  }
  return error ? -1 : count;
}

// The forked worker: standard input and the reply pipe are the zygote's.
[[noreturn]] void become_worker(NodeProcessOptions node, int gpu) {
  ::close(kReplyFd);
  const int nothing = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nothing >= 0) ::dup2(nothing, STDIN_FILENO);
  // The agent is its parent once the middle process has ended; the
  // parent-death signal is set only then (it follows the parent at the time).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::getppid() != node.parent_pid) {
    if (std::chrono::steady_clock::now() > deadline) std::_Exit(kExitFailure);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != node.parent_pid) std::_Exit(kExitFailure);
  node.gpu = gpu;
  node.standby = false;
  const int status = run_worker(node);
  std::fflush(nullptr);
  std::_Exit(status);
}

void reply(pid_t worker) {
  const std::string line = std::to_string(worker) + "\n";
  (void)!::write(kReplyFd, line.data(), line.size());  // (a line far below a pipe's atomic size)
}

}  // namespace

int run_worker_zygote(const NodeProcessOptions& node, std::istream& requests) {
  if (node.parent_pid <= 0) {
    std::fprintf(stderr, "oobleck-run worker --standby: needs --parent-pid (its agent)\n");
    return kExitBadInput;
  }
  if (thread_count() != 1) {
    std::fprintf(stderr, "oobleck-run worker --standby: %d threads already; cannot fork workers\n", thread_count());
    return kExitFailure;
  }
  for (std::string line; std::getline(requests, line);) {
    int gpu = -1;
    try {
      gpu = std::stoi(line);
    } catch (const std::exception&) {
    }
    if (gpu < 0) {
      std::fprintf(stderr, "oobleck-run worker --standby: expected a GPU index, got '%s'\n", line.c_str());
      return kExitBadInput;
    }
    const pid_t middle = ::fork();
    if (middle < 0) {
      reply(0);
      continue;
    }
    if (middle == 0) {
      const pid_t worker = ::fork();
      if (worker == 0) become_worker(node, gpu);
      reply(worker > 0 ? worker : 0);
      std::_Exit(0);
    }
    ::waitpid(middle, nullptr, 0);
  }
  return kExitSuccess;  // its agent ended, or needs no more workers
}

}  // namespace oobleck::executor
