// Starting the processes of a live run: this program again, as an agent or a
// worker, locally or on another host over SSH.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace oobleck::executor {

// posix_spawn of args[0] (searched in PATH when it has no '/'). Throws with
// the reason when it cannot start.
[[nodiscard]] pid_t spawn_process(const std::vector<std::string>& args);

// The same command on `host`, over SSH without prompts.
[[nodiscard]] std::vector<std::string> over_ssh(const std::string& host, const std::vector<std::string>& args);

// Whether `host` names this machine.
[[nodiscard]] bool is_local_host(const std::string& host);

}  // namespace oobleck::executor
