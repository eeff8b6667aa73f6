// oobleck-agent: one node's agent in a live run (executor/src/live/agent.cpp).
// The master starts it, on this host or another, with the job's token on
// standard input; it starts the node's workers (oobleck-run worker) and
// watches them. It does not load libtorch, so that it starts at once and,
// when its node is lost, dies at once: its closed connection is how the
// master learns of the loss.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include "cli_io.h"
#include "node_flags.h"
#include "oobleck/common.h"
#include "oobleck/executor/live.h"

int main(int argc, char** argv) {
  using namespace oobleck;
  CLI::App app{"oobleck-agent: one node's agent in a live run (started by oobleck-run, not by hand)"};
  executor::NodeProcessOptions node;
  cli::add_node_options(app, node);
  app.add_option("--worker-program", node.program, "oobleck-run, which the workers run")->required();
  app.add_option("--heartbeat-ms", node.heartbeat_interval_ms);
  app.add_option("--gpus", node.gpus)->check(CLI::PositiveNumber);
  app.add_option("--cpus", node.cpus)->check(CLI::NonNegativeNumber);
  app.add_flag("--standby-worker", node.standby);
  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;
  // An agent outlives its master, for a restarted one to find, but does not
  // start when its parent is gone already.
  if (node.parent_pid > 0 && ::getppid() != node.parent_pid) return kExitFailure;
  ::signal(SIGPIPE, SIG_IGN);  // a write to a closed connection fails, not kills
  if (!cli::read_job_token(node, "oobleck-agent")) return kExitBadInput;
  return cli::run_reporting_errors("oobleck-agent", [&] { return executor::run_agent(node); });
}
