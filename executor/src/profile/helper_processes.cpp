#include "profile/helper_processes.h"

#include "comm/store_server.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <stdexcept>

extern char** environ;

namespace oobleck::executor {

namespace {
constexpr char kLoopback[] = "127.0.0.1";
}  // namespace

c10::intrusive_ptr<c10d::TCPStore> local_store_server(std::chrono::milliseconds timeout) {
  return make_store_server(kLoopback, timeout);
}

c10::intrusive_ptr<c10d::TCPStore> local_store_client(int port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(kLoopback, options);
}

HelperProcesses::~HelperProcesses() {
  for (pid_t pid : running_) kill(pid, SIGKILL);
  for (pid_t pid : running_) waitpid(pid, nullptr, 0);
}

void HelperProcesses::start(const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> all = {program_};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  if (posix_spawn(&child, program_.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("cannot start " + program_ + " for " + what);
  }
  running_.push_back(child);
}

void HelperProcesses::wait(const std::string& what) {
  bool failed = false;
  for (pid_t pid : running_) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed = failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  running_.clear();
  if (failed) throw std::runtime_error(what + ": a helper process failed");
}

}  // namespace oobleck::executor
