// The helper processes of a measurement: this program started again with
// other arguments (a link's second end, a node's other workers). They die
// with the measuring process (the helper sets PR_SET_PDEATHSIG), and are
// killed and reaped if the measurement fails first.
#pragma once

#include <sys/types.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace oobleck::executor {

// Where a measurement and its helpers meet, on loopback: the server (this
// process, at a free port) or a helper's client of it (`port`).
[[nodiscard]] c10::intrusive_ptr<c10d::TCPStore> local_store_server(std::chrono::milliseconds timeout);
[[nodiscard]] c10::intrusive_ptr<c10d::TCPStore> local_store_client(int port, std::chrono::milliseconds timeout);

class HelperProcesses {
 public:
  explicit HelperProcesses(std::string program) : program_(std::move(program)) {}
  ~HelperProcesses();  // SIGKILLs and reaps those not yet waited for
  HelperProcesses(const HelperProcesses&) = delete;
  HelperProcesses& operator=(const HelperProcesses&) = delete;

  // Throws std::runtime_error naming `what` when the program cannot start.
  void start(const std::vector<std::string>& args, const std::string& what);
  // Waits for every one; throws naming `what` unless all exited with 0.
  void wait(const std::string& what);

 private:
  std::string program_;
  std::vector<pid_t> running_;
};

}  // namespace oobleck::executor
