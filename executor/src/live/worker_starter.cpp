#include "worker_starter.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace oobleck::executor {

WorkerStarter::WorkerStarter(Command command, std::string token, bool zygote)
    : command_(std::move(command)), token_(std::move(token)) {
  if (!zygote) return;
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::fprintf(stderr, "oobleck-run agent: cannot adopt forked workers (no subreaper); starting each anew\n");
    return;
  }
  try {
    zygote_ = spawn_process_keeping_input(command_({"--standby"}), token_ + "\n", /*with_reply=*/true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oobleck-run agent: no worker zygote (%s); starting each worker anew\n", e.what());
  }
}

WorkerStarter::~WorkerStarter() { end(); }

WorkerStarter::Started WorkerStarter::start(int gpu) {
  if (zygote_.pid > 0) {
    if (const pid_t pid = fork_from_zygote(gpu); pid > 0) return {pid, true};
  }
  return {spawn_process(command_({"--gpu", std::to_string(gpu)}), token_ + "\n"), false};
}

pid_t WorkerStarter::fork_from_zygote(int gpu) {
  const std::string request = std::to_string(gpu) + "\n";
  if (::write(zygote_.input_fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    forget_zygote("it does not take requests");
    return 0;
  }
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerTimeoutMs);
  while (answer.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd reply{zygote_.reply_fd, POLLIN, 0};
    if (left <= 0 || ::poll(&reply, 1, static_cast<int>(left)) <= 0) {
      forget_zygote("it did not answer");
      return 0;
    }
    char bytes[64];
    const ssize_t got = ::read(zygote_.reply_fd, bytes, sizeof bytes);
    if (got <= 0) {
      forget_zygote("it ended");
      return 0;
    }
    answer.append(bytes, static_cast<std::size_t>(got));
  }
  const pid_t pid = static_cast<pid_t>(std::atol(answer.c_str()));
  if (pid <= 0) std::fprintf(stderr, "oobleck-run agent: the worker zygote could not fork; starting anew\n");
  return pid;
}

void WorkerStarter::forget_zygote(const char* why) {
  std::fprintf(stderr, "oobleck-run agent: no more workers from the zygote (%s); starting them anew\n", why);
  kill();
  end();
}

bool WorkerStarter::reaped(pid_t pid) {
  if (zygote_.pid <= 0 || pid != zygote_.pid) return false;
  ::close(zygote_.input_fd);
  ::close(zygote_.reply_fd);
  zygote_ = {};
  return true;
}

void WorkerStarter::kill() {
  if (zygote_.pid > 0) ::kill(zygote_.pid, SIGKILL);
}

void WorkerStarter::end() {
  if (zygote_.pid <= 0) return;
  ::close(zygote_.input_fd);
  ::close(zygote_.reply_fd);
  ::waitpid(zygote_.pid, nullptr, 0);
  zygote_ = {};
}

}  // namespace oobleck::executor
