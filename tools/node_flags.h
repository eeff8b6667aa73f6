// The flags the master passes a node's processes (not listed in any --help):
// its agent (oobleck-agent) and its workers (oobleck-run worker).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "oobleck/executor/live.h"

namespace oobleck::cli {

// What every node process takes.
inline void add_node_options(CLI::App& cmd, executor::NodeProcessOptions& node) {
  cmd.add_option("--node", node.node)->required();
  cmd.add_option("--master-addr", node.master_addr);
  cmd.add_option("--control-port", node.control_port)->required();
  cmd.add_option("--parent-pid", node.parent_pid);
  cmd.add_option("--master-wait-ms", node.master_wait_ms)->check(CLI::NonNegativeNumber);
}

// The job's token: the first line of standard input, never a flag (a
// command line is visible to every user of the host). False, said on
// standard error, when there is none.
inline bool read_job_token(executor::NodeProcessOptions& node, const char* program) {
  if (std::getline(std::cin, node.token) && !node.token.empty()) return true;
  std::fprintf(stderr, "%s: expected the job's token on standard input\n", program);
  return false;
}

}  // namespace oobleck::cli
