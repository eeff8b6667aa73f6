// The helper processes of a measurement: this program started again with
// other arguments (a link's second end, a node's other workers). They die
// with the measuring process (the helper sets PR_SET_PDEATHSIG), and are
// killed and reaped if the measurement fails first.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace oobleck::executor {

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
