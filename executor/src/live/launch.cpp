#include "launch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "oobleck/common.h"
#include <stdexcept>

extern char** environ;

namespace oobleck::executor {

pid_t spawn_process(const std::vector<std::string>& args, const std::string& input) {
  const SpawnedProcess spawned = spawn_process_keeping_input(args, input);
  ::close(spawned.input_fd);
  return spawned.pid;
}

SpawnedProcess spawn_process_keeping_input(const std::vector<std::string>& args, const std::string& input,
                                           bool with_reply) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_ends[2] = {-1, -1};
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0) throw std::runtime_error("cannot start " + args.front() + ": no pipe");
  int reply_ends[2] = {-1, -1};
  if (with_reply && ::pipe2(reply_ends, O_CLOEXEC) != 0) {
    ::close(pipe_ends[0]);
    ::close(pipe_ends[1]);
    throw std::runtime_error("cannot start " + args.front() + ": no pipe");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[0], STDIN_FILENO);  // dup2 clears close-on-exec
  if (with_reply) posix_spawn_file_actions_adddup2(&actions, reply_ends[1], kReplyFd);
  pid_t pid = 0;
  const bool path_search = args.front().find('/') == std::string::npos;
  const int error = path_search ? posix_spawnp(&pid, args.front().c_str(), &actions, nullptr, argv.data(), environ)
                                : posix_spawn(&pid, args.front().c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_ends[0]);
  if (with_reply) ::close(reply_ends[1]);
  if (error != 0 && with_reply) ::close(reply_ends[0]);
  // Far below a pipe's capacity: written at once, whatever the child does.
  const bool written = error == 0 && ::write(pipe_ends[1], input.data(), input.size()) ==
                                         static_cast<ssize_t>(input.size());
  if (error != 0 || !written) ::close(pipe_ends[1]);
  if (error != 0) throw std::runtime_error("cannot start " + args.front() + ": " + std::strerror(error));
  if (!written) {  // it ended at once: nothing of it is left behind
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    if (with_reply) ::close(reply_ends[0]);
    throw std::runtime_error("cannot hand " + args.front() + " its input");
  }
  return {pid, pipe_ends[1], reply_ends[0]};
}

std::vector<std::string> forwarded_environment() {
  static constexpr std::array<std::string_view, 11> kPrefixes = {"OMP_",  "GOMP_", "KMP_",  "OPENBLAS_", "GOTO_",  "MKL_",
                                                                 "GLOO_", "NCCL_", "CUDA_", "TORCH_",    "OOBLECK_"};
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.size() == entry.size()) continue;
    // (Not what names this host's own devices and interfaces.)
    const bool own = name == "CUDA_VISIBLE_DEVICES" || name.ends_with("_SOCKET_IFNAME");
    const bool steers = name == "LD_LIBRARY_PATH" || std::any_of(kPrefixes.begin(), kPrefixes.end(), [&](auto p) {
                          return name.size() > p.size() && name.starts_with(p);
                        });
    if (own) continue;
    if (steers) out.emplace_back(entry);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> over_ssh(const std::string& host, const std::vector<std::string>& args) {
  std::vector<std::string> command = {"env"};
  for (auto& variable : forwarded_environment()) command.push_back(std::move(variable));
  command.insert(command.end(), args.begin(), args.end());
  std::string remote;
  for (const auto& a : command) {
    remote += remote.empty() ? "'" : " '";
    for (char c : a) remote += c == '\'' ? std::string("'\\''") : std::string(1, c);
    remote += "'";
  }
  return {"ssh", "-o", "BatchMode=yes", "--", host, remote};  // "--": a host is never an option
}

std::vector<std::string> over_srun(const std::string& node, const std::vector<std::string>& args) {
  // --overlap: the batch script's own step may hold this node's CPUs.
  std::vector<std::string> command = {"srun",      "--nodes=1",           "--ntasks=1", "--nodelist=" + node,
                                      "--overlap", "--kill-on-bad-exit=1", "--quiet",    "--job-name=oobleck-agent"};
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

std::string this_host_address() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string address;
  if (getaddrinfo(name, nullptr, &hints, &found) == 0) {
    for (const addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
      const auto* ip = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      char text[INET_ADDRSTRLEN] = {};
      if ((ntohl(ip->sin_addr.s_addr) >> 24) != 127 && inet_ntop(AF_INET, &ip->sin_addr, text, sizeof text)) {
        address = text;
      }
    }
    freeaddrinfo(found);
  }
  if (address.empty()) {
    throw InputError("--master-addr: needed, since agents run on other hosts and this host's name (" +
                     std::string(name) + ") resolves to no address but loopback");
  }
  return address;
}

bool is_local_host(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == "localhost" || host == "127.0.0.1" || host == name;
}

}  // namespace oobleck::executor
