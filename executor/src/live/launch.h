// Starting the processes of a live run: this program again, as an agent or a
// worker, locally or on another host over SSH.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace oobleck::executor {

// posix_spawn of args[0] (searched in PATH when it has no '/'), reading
// `input` on its standard input (a pipe, closed after it): how the job's
// token reaches the processes of a job without showing on a command line.
// Throws with the reason when it cannot start.
[[nodiscard]] pid_t spawn_process(const std::vector<std::string>& args, const std::string& input);

// The same, but the pipe to its standard input stays open after `input`:
// the caller writes the rest later and closes `input_fd` (close-on-exec, so
// processes started after it never hold it open).
struct SpawnedProcess {
  pid_t pid = 0;
  int input_fd = -1;
  int reply_fd = -1;  // with_reply: where the child's writes to kReplyFd come out
};
inline constexpr int kReplyFd = 3;
[[nodiscard]] SpawnedProcess spawn_process_keeping_input(const std::vector<std::string>& args,
                                                         const std::string& input, bool with_reply = false);

// The same command on `host`, over SSH without prompts, with this
// process's variables that steer the numerical and communication libraries
// (forwarded_environment()): an SSH session starts with a bare environment,
// and a host whose BLAS picks other kernels computes other bits.
[[nodiscard]] std::vector<std::string> over_ssh(const std::string& host, const std::vector<std::string>& args);

// NAME=VALUE of this process's variables whose names start with OMP_, GOMP_,
// KMP_, OPENBLAS_, GOTO_, MKL_, GLOO_, NCCL_, CUDA_, TORCH_ or OOBLECK_, and
// LD_LIBRARY_PATH, sorted.
[[nodiscard]] std::vector<std::string> forwarded_environment();

// The same command on Slurm node `node` of the allocation this process runs
// in: a job step of one task (srun passes the whole environment on).
[[nodiscard]] std::vector<std::string> over_srun(const std::string& node, const std::vector<std::string>& args);

// The IPv4 address this host's name resolves to, loopback excepted: where
// processes on other hosts reach this one. Throws InputError when none.
[[nodiscard]] std::string this_host_address();

// Whether `host` names this machine.
[[nodiscard]] bool is_local_host(const std::string& host);

}  // namespace oobleck::executor
