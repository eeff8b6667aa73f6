#include "launch.h"

#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

extern char** environ;

namespace oobleck::executor {

pid_t spawn_process(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const bool path_search = args.front().find('/') == std::string::npos;
  const int error = path_search ? posix_spawnp(&pid, args.front().c_str(), nullptr, nullptr, argv.data(), environ)
                                : posix_spawn(&pid, args.front().c_str(), nullptr, nullptr, argv.data(), environ);
  if (error != 0) throw std::runtime_error("cannot start " + args.front() + ": " + std::strerror(error));
  return pid;
}

std::vector<std::string> over_ssh(const std::string& host, const std::vector<std::string>& args) {
  std::string remote;
  for (const auto& a : args) {
    remote += remote.empty() ? "'" : " '";
    for (char c : a) remote += c == '\'' ? std::string("'\\''") : std::string(1, c);
    remote += "'";
  }
  return {"ssh", "-o", "BatchMode=yes", "--", host, remote};  // "--": a host is never an option
}

bool is_local_host(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == "localhost" || host == "127.0.0.1" || host == name;
}

}  // namespace oobleck::executor
