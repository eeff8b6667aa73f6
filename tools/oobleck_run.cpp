// oobleck-run: trains a plan live and survives node failures. The master
// (this process) starts one agent per node, each agent one worker; see
// executor/include/oobleck/executor/live.h for how they recover.
//
// Exit status: 0 success, 1 training failed, 2 bad input, 3 no plan exists
// after a loss (the replicas no longer cover some layer).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "oobleck/common/files.h"
#include "cli_io.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/live.h"
#include "oobleck/executor/train.h"

namespace {

using namespace oobleck;
using namespace oobleck::executor;

std::string metrics_text(const std::vector<StepMetrics>& metrics) {
  std::string out;
  for (const auto& m : metrics) out += metrics_line(m) + "\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-run: train a plan live with worker processes, 1F1B pipelines and Gloo, surviving node failures"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "oobleck-run 0.2.0");
  MasterOptions o;
  std::string inject_path;
  std::uint64_t chaos_seed = 0;
  bool single_process = false;
  app.add_option("--plan", o.plan_path, "Plan JSON from oobleck-plan instantiate");
  app.add_option("--profile", o.profile_path, "The profile the plan was made from (its model is trained)");
  app.add_option("--data", o.data_path, "Token file: little-endian uint16 tokens");
  app.add_option("--steps", o.steps, "Training steps")->check(CLI::Range(1, 100000000));
  app.add_option("--seed", o.seed, "Weights and data order");
  app.add_option("--threads", o.threads, "Intra-op threads per worker")->check(CLI::Range(1, 1024));
  app.add_option("--device", o.device,
                 "cpu, or cuda: every worker on the first visible GPU, mixed precision when the profile is "
                 "bf16; stages exchange tensors through host memory with Gloo")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--metrics", o.metrics_path,
                 "JSON lines, written as training goes: {step, loss, samples, iteration_ms, ...} per step and "
                 "{event: \"reconfigured\", ...} per reconfiguration");
  app.add_option("--chrome-trace", o.chrome_trace_path,
                 "The last step's schedule as a Chrome trace, as oobleck-sim iteration writes it");
  app.add_flag("--single-process", single_process,
               "Train the same model on the same global batches in this one process (the reference)");
  app.add_option("--hostfile", o.hostfile,
                 "MPI-style hostfile ('host slots=G'): the plan's node names are hosts; agents on other hosts "
                 "start over SSH (default: every node is a local process)");
  app.add_option("--master-addr", o.master_addr,
                 "Address agents and workers reach the master at (default 127.0.0.1; give this host's address "
                 "with --hostfile)");
  app.add_option("--heartbeat-timeout-ms", o.heartbeat_timeout_ms,
                 "A node whose agent sends no heartbeat for this long is lost (a closed connection is noticed "
                 "at once)")
      ->check(CLI::Range(50.0, 3600000.0));
  app.add_option("--comm-timeout-s", o.comm_timeout_s,
                 "Last resort: a communication still waiting after this long fails")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--inject", inject_path,
                 "Failures and joins to inject: lines 'when,add|remove,node' where when is milliseconds since "
                 "training started, step:N (during step N) or recovery:R (during the R-th reconfiguration)");
  auto* chaos = app.add_option("--chaos", chaos_seed,
                               "Kill random nodes at random moments (also during recoveries) and start new ones, "
                               "from this seed");
  app.add_option("--chaos-events", o.chaos.events, "With --chaos: removals and joins in all")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--chaos-mean-ms", o.chaos.mean_interval_ms, "With --chaos: mean time between events")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--checkpoint", o.checkpoint_dir, "With --checkpoint-every: the folder checkpoints go to");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Save a checkpoint every K steps and after the last")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--resume", o.resume_dir, "Start from the latest checkpoint in this folder");

  std::string text_path, tokens_out;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "Make a token file from text (byte-level tokens)");
  tokenize_cmd->add_option("--text", text_path, "Text file")->required();
  tokenize_cmd->add_option("--out", tokens_out, "Token file to write")->required();

  NodeProcessOptions node;
  auto* agent_cmd = app.add_subcommand("agent", "(internal) one node's agent: starts and watches its worker");
  auto* worker_cmd = app.add_subcommand("worker", "(internal) one node's worker");
  for (auto* cmd : {agent_cmd, worker_cmd}) {
    cmd->add_option("--node", node.node)->required();
    cmd->add_option("--master-addr", node.master_addr);
    cmd->add_option("--control-port", node.control_port)->required();
    cmd->add_option("--parent-pid", node.parent_pid);
    cmd->add_option("--token", node.token);
    cmd->group("");  // not listed in --help
  }
  agent_cmd->add_option("--heartbeat-ms", node.heartbeat_interval_ms);

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  // A write to a socket whose peer is gone must fail, not kill the process
  // (Gloo writes with writev, and recovery depends on surviving that).
  ::signal(SIGPIPE, SIG_IGN);
  return cli::run_reporting_errors("oobleck-run", [&]() -> int {
    if (*tokenize_cmd) {
      const auto tokens = tokenize_bytes(read_text_file(text_path));
      write_file_atomically(tokens_out, tokens_to_bytes(tokens));
      std::printf("Wrote %zu tokens (vocabulary 256, byte-level) to %s\n", tokens.size(), tokens_out.c_str());
      return 0;
    }
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    if (*agent_cmd || *worker_cmd) {
      // Die with the parent, and make sure it had not died already.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (node.parent_pid > 0 && getppid() != node.parent_pid) return 1;
      node.program = self;
      if (*agent_cmd) return run_agent(node);
      // A worker ends without running static destructors: a communicator
      // abandoned in a recovery may still be winding down on its own thread.
      const int status = run_worker(node);
      std::fflush(nullptr);
      std::_Exit(status);
    }
    if (single_process) {
      for (const auto& [flag, value] : {std::pair{"--plan", o.plan_path}, std::pair{"--profile", o.profile_path},
                                        std::pair{"--data", o.data_path}}) {
        if (value.empty()) throw InputError(std::string(flag) + ": required");
      }
      torch::set_num_threads(o.threads);
      const Profile profile = load_profile(o.profile_path);
      const Plan plan = parse_plan(read_text_file(o.plan_path), o.plan_path, profile);
      TrainOptions options;
      apply_profile(options, profile, o.device);
      options.steps = o.steps;
      options.seed = o.seed;
      const auto metrics = train_single_process(read_tokens(o.data_path), options, plan.global_microbatches);
      if (!o.metrics_path.empty()) write_file_atomically(o.metrics_path, metrics_text(metrics));
      for (const auto& m : metrics) {
        std::printf("step %3d  loss %.6f  samples %lld  %.1f ms\n", m.step, m.loss,
                    static_cast<long long>(m.samples), m.iteration_ms);
      }
      return 0;
    }
    if (!inject_path.empty()) o.injections = parse_injections(read_text_file(inject_path), inject_path);
    if (*chaos) {
      o.chaos.enabled = true;
      o.chaos.seed = chaos_seed;
    }
    o.program = self;
    return run_master(o);
  });
}
