// oobleck-run: trains a plan live and survives node failures. The master
// (this process) starts one agent per node (oobleck-agent), each agent a
// worker per GPU (this program again, `worker`); see
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
#include <iostream>

#include "oobleck/common/files.h"
#include "cli_io.h"
#include "node_flags.h"
#include "oobleck/executor/blas_kernels.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/live.h"
#include "oobleck/executor/train.h"

namespace {

using namespace oobleck;
using namespace oobleck::executor;

// The training run's flags (the master's, or the single process's).
struct RunFlags {
  MasterOptions master;
  std::string inject_path;
  std::uint64_t chaos_seed = 0;
  CLI::Option* chaos = nullptr;
  bool single_process = false;
  std::vector<double> straggler_thresholds;
};

void add_data_flags(CLI::App& app, RunFlags& f) {
  MasterOptions& o = f.master;
  app.add_option("--plan", o.plan_path, "Plan JSON from oobleck-plan instantiate");
  app.add_option("--profile", o.profile_path, "The profile the plan was made from (its model is trained)");
  app.add_option("--data", o.data_path, "Token file: little-endian uint16 tokens");
  app.add_option("--steps", o.steps, "Training steps")->check(CLI::Range(1, 100000000));
  app.add_option("--seed", o.seed, "Weights and data order");
  app.add_option("--learning-rate", o.learning_rate, "AdamW's learning rate")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "Intra-op threads per worker")->check(CLI::Range(1, 1024));
  app.add_option("--device", o.device,
                 "cpu, or cuda: every worker on the first visible GPU, mixed precision when the profile is "
                 "bf16; stages exchange tensors through host memory with Gloo")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--deterministic", o.deterministic,
               "On cuda: kernels that give the same bits every run (fused attention's backward is otherwise "
               "not), so that losses equal the one process's bit for bit, as on the CPU; attention then runs "
               "1.7-2.6x slower (measured on an H200)");
  app.add_option("--metrics", o.metrics_path,
                 "JSON lines, written as training goes, each with a kind: run, generation, step, "
                 "reconfiguration, speeds, no_plan");
  app.add_option("--chrome-trace", o.chrome_trace_path,
                 "The last step's schedule as a Chrome trace, as oobleck-sim iteration writes it");
  app.add_flag("--single-process", f.single_process,
               "Train the same model on the same global batches in this one process (the reference)");
}

void add_cluster_flags(CLI::App& app, RunFlags& f) {
  MasterOptions& o = f.master;
  app.add_option("--hostfile", o.hostfile,
                 "MPI-style hostfile ('host slots=G'): the plan's node names are hosts; agents on other hosts "
                 "start over SSH (default: every node is a local process)");
  app.add_option("--launcher", o.launcher,
                 "Where agents start: local, ssh (the --hostfile's hosts), slurm (the nodes of the Slurm "
                 "allocation this runs in, each with srun; its nodes not in the plan are spares), or auto: ssh "
                 "with --hostfile, else slurm inside an allocation that has the plan's nodes, else local")
      ->check(CLI::IsMember({"auto", "local", "ssh", "slurm"}));
  app.add_option("--master-addr", o.master_addr,
                 "Address agents and workers reach the master at (default: 127.0.0.1 when every node is this "
                 "host, else the address this host's name resolves to)");
  app.add_option("--heartbeat-timeout-ms", o.heartbeat_timeout_ms,
                 "A node whose agent sends no heartbeat for this long is lost (a closed connection is noticed "
                 "at once)")
      ->check(CLI::Range(50.0, 3600000.0));
  app.add_option("--node-cpus", o.node_cpus,
                 "Each node started on this machine runs within this many of its cores (a cgroup CPU quota; "
                 "needs root): nodes emulated on one machine then take no CPU from each other, as machines of "
                 "their own would not, and --inject's slow throttles that quota")
      ->check(CLI::Range(0.01, 4096.0));
  app.add_flag("--standby-workers,!--no-standby-workers", o.standby_workers,
               "Each agent loads the worker program once and forks its workers from it, the first ones and those "
               "that replace a crashed worker, instead of starting each anew (default: on)");
  app.add_option("--wait-for-passes", o.wait_for_passes,
                 "A node lost during a step: the pipelines the new plan leaves as they were keep their passes of "
                 "it. auto (the default): wait for those still in their passes where that saves more of the "
                 "resumed step than the wait costs; always: wait for them (up to the heartbeat timeout or three "
                 "steps); never")
      ->transform(CLI::CheckedTransformer(std::map<std::string, MasterOptions::WaitForPasses>{
                                              {"auto", MasterOptions::WaitForPasses::automatic},
                                              {"always", MasterOptions::WaitForPasses::always},
                                              {"never", MasterOptions::WaitForPasses::never}},
                                          CLI::ignore_case));
  app.add_option("--comm-timeout-s", o.comm_timeout_s, "Last resort: a communication still waiting after this long fails")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--checkpoint", o.checkpoint_dir, "With --checkpoint-every: the folder checkpoints go to");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Save a checkpoint every K steps and after the last")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--snapshot-every", o.snapshot_every,
                 "Snapshot the training state into the agents' memory every K steps, in the background, mirrored "
                 "to another node (0: none): a crashed worker restarts from it, and past f the run rolls back to it")
      ->check(CLI::Range(0, 100000000));
  app.add_option("--mirror-every", o.mirror_every,
                 "Mirror every M-th step's snapshot to another node (a multiple of --snapshot-every): past f a "
                 "rollback goes back at most M steps, and mirroring every step costs its copy over the network")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--stragglers", o.stragglers,
                 "keep (the default): nodes flagged slow (their compute time against the profile and their "
                 "peers, several steps running) are reported only; mitigate: a flagged node gets fewer "
                 "microbatches (a re-split), or a lighter place (a re-plan), when the cost model prices that "
                 "best, and its share back once it recovers; resplit, replan: only that choice")
      ->transform(CLI::CheckedTransformer(std::map<std::string, MasterOptions::Stragglers>{
                                              {"mitigate", MasterOptions::Stragglers::mitigate},
                                              {"resplit", MasterOptions::Stragglers::resplit},
                                              {"replan", MasterOptions::Stragglers::replan},
                                              {"drop", MasterOptions::Stragglers::drop},
                                              {"keep", MasterOptions::Stragglers::keep}},
                                          CLI::ignore_case));
  app.add_option("--straggler-thresholds", f.straggler_thresholds,
                 "SLOW,RECOVERED: a node is flagged once its speed against its peers stays below SLOW for 3 "
                 "steps, and unflagged once it stays above RECOVERED (default 0.75,0.85)")
      ->delimiter(',')
      ->expected(2)
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--straggler-probation", o.straggler_probation_steps,
                 "STEPS a node dropped as slow stays a spare before it is taken back to be measured again "
                 "(default 20; doubled each time it is dropped again, up to 16 times)")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--resume", o.resume_dir, "Start from the latest checkpoint in this folder");
  app.add_flag("--join-spares", o.join_spares,
              "Start the hostfile's or the allocation's hosts that the plan leaves out, one for each node lost "
              "(a host that failed is never started again)");
  app.add_option("--state-dir", o.state_dir,
                 "Where the master keeps the job's state (plan, generation, last committed step, members, "
                 "options), written before it acts, so that --resume-master can go on if the master dies "
                 "(default: oobleck-state-<pid> here, removed when the run ends by itself)");
  app.add_option("--master-wait-s", o.master_wait_s,
                 "When the master dies, agents and workers keep their training state and wait this long for "
                 "--resume-master, then end")
      ->check(CLI::Range(0.0, 31536000.0));
  app.add_option("--wait-for-nodes-s", o.wait_for_nodes_s,
                 "Past f, when too few nodes are left for any pipeline: wait this long for nodes to join "
                 "(then exit 3)")
      ->check(CLI::Range(0.0, 31536000.0));
}

void add_failure_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--inject", f.inject_path,
                 "Failures and joins to inject: lines 'when,add|remove|hang|crash|kill-master,node' where when is "
                 "milliseconds since training started, step:N (during step N), recovery:R (during the R-th "
                 "reconfiguration), rollback:R (during the R-th rollback past f) or commit:N (kill-master only: "
                 "once the commit of step N is kept, before it is sent); kill-master's node is 'master'");
  f.chaos = app.add_option("--chaos", f.chaos_seed,
                           "Kill random nodes at random moments (also during recoveries) and start new ones, "
                           "from this seed");
  app.add_option("--chaos-events", f.master.chaos.events, "With --chaos: events in all (removals, joins and, with --chaos-slow, slowdowns)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--chaos-mean-ms", f.master.chaos.mean_interval_ms, "With --chaos: mean time between events")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--chaos-crashes", f.master.chaos.crash_share,
                 "With --chaos: the share of failures that crash a node's worker alone (needs --snapshot-every > 0)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--chaos-slow", f.master.chaos.slow_share,
                 "With --chaos: the share of events that slow a node down (its CPU to a factor in [0.3, 0.7]) or, "
                 "while one is slow, end its slowdown")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--chaos-past-f", f.master.chaos.past_f_share,
                 "With --chaos: the share of failures that kill several nodes at once, past f (a rollback follows; "
                 "needs snapshots or --checkpoint-every)")
      ->check(CLI::Range(0.0, 1.0));
}

struct TokenizeFlags {
  std::string text_path, tokens_out;
};

CLI::App* add_tokenize_command(CLI::App& app, TokenizeFlags& f) {
  auto* cmd = app.add_subcommand("tokenize", "Make a token file from text (byte-level tokens)");
  cmd->add_option("--text", f.text_path, "Text file")->required();
  cmd->add_option("--out", f.tokens_out, "Token file to write")->required();
  return cmd;
}

// A node's worker, which its agent (oobleck-agent) starts: not listed in --help.
CLI::App* add_worker_command(CLI::App& app, NodeProcessOptions& node) {
  auto* worker = app.add_subcommand("worker", "(internal) the worker of one GPU");
  cli::add_node_options(*worker, node);
  worker->add_option("--gpu", node.gpu)->check(CLI::NonNegativeNumber);
  worker->add_flag("--standby", node.standby);
  worker->add_option("--snapshot-port", node.snapshot_port)->check(CLI::NonNegativeNumber);
  worker->group("");
  return worker;
}

int run_tokenize(const TokenizeFlags& f) {
  const auto tokens = tokenize_bytes(read_text_file(f.text_path));
  write_file_atomically(f.tokens_out, tokens_to_bytes(tokens));
  std::printf("Wrote %zu tokens (vocabulary 256, byte-level) to %s\n", tokens.size(), f.tokens_out.c_str());
  return kExitSuccess;
}

int run_worker_process(NodeProcessOptions node) {
  // A worker dies with its agent, and does not start when it is gone already.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (node.parent_pid > 0 && getppid() != node.parent_pid) return kExitFailure;
  if (!cli::read_job_token(node, "oobleck-run worker")) return kExitBadInput;
  // The node's zygote, which forks its workers (the forks run run_worker).
  if (node.standby) {
    const int status = run_worker_zygote(node, std::cin);
    std::fflush(nullptr);
    std::_Exit(status);
  }
  // A worker ends without running static destructors: a communicator
  // abandoned in a recovery may still be winding down on its own thread.
  const int status = run_worker(node);
  std::fflush(nullptr);
  std::_Exit(status);
}

int run_single_process(const MasterOptions& o) {
  for (const auto& [flag, value] : {std::pair{"--plan", o.plan_path}, std::pair{"--profile", o.profile_path},
                                    std::pair{"--data", o.data_path}}) {
    if (value.empty()) throw InputError(std::string(flag) + ": required");
  }
  torch::set_num_threads(o.threads);
  const Profile profile = load_profile(o.profile_path);
  const Plan plan = parse_plan(read_text_file(o.plan_path), o.plan_path, profile);
  TrainOptions options;
  apply_profile(options, profile, o.device);
  if (o.deterministic && options.device == "cuda") use_deterministic_kernels();
  options.steps = o.steps;
  options.seed = o.seed;
  options.learning_rate = o.learning_rate;
  const auto tokens = read_tokens(o.data_path);
  check_scripted_model(options.model);
  check_tokens(tokens, options.model, o.seed, o.data_path);
  const auto metrics = train_single_process(tokens, options, plan.global_microbatches);
  std::string lines;
  for (const auto& m : metrics) lines += metrics_line(m) + "\n";
  if (!o.metrics_path.empty()) write_file_atomically(o.metrics_path, lines);
  for (const auto& m : metrics) {
    std::printf("step %3d  loss %.6f  samples %lld  %.1f ms\n", m.step, m.loss, static_cast<long long>(m.samples),
                m.iteration_ms);
  }
  return kExitSuccess;
}

int run_training(RunFlags f) {
  if (f.single_process) return run_single_process(f.master);
  if (!f.inject_path.empty()) f.master.injections = parse_injections(read_text_file(f.inject_path), f.inject_path);
  if (!f.straggler_thresholds.empty()) {
    f.master.straggler_slow_below = f.straggler_thresholds[0];
    f.master.straggler_recovered_above = f.straggler_thresholds[1];
    if (!(f.straggler_thresholds[0] < f.straggler_thresholds[1])) {
      throw InputError("--straggler-thresholds: SLOW (" + std::to_string(f.straggler_thresholds[0]) +
                       ") must be below RECOVERED (" + std::to_string(f.straggler_thresholds[1]) + ")");
    }
  }
  if (*f.chaos) {
    f.master.chaos.enabled = true;
    f.master.chaos.seed = f.chaos_seed;
  }
  f.master.program = std::filesystem::read_symlink("/proc/self/exe").string();
  return run_master(f.master);
}

}  // namespace

int main(int argc, char** argv) {
  oobleck::executor::use_best_blas_kernels(argv);
  CLI::App app{"oobleck-run: train a plan live with worker processes, 1F1B pipelines and Gloo, surviving node failures"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "oobleck-run 0.2.0");
  RunFlags run;
  add_data_flags(app, run);
  const std::size_t data_flags = app.get_options().size();
  add_cluster_flags(app, run);
  add_failure_flags(app, run);
  // The live run's own flags mean nothing to --single-process: refused
  // there rather than ignored.
  const auto options = app.get_options();
  auto* single = app.get_option("--single-process");
  for (std::size_t i = data_flags; i < options.size(); ++i) options[i]->excludes(single);
  // A restarted master takes every option from the kept state.
  auto* resume_master =
      app.add_option("--resume-master", run.master.resume_master_dir,
                     "Go on with the job whose master died, from the state it kept in this folder (--state-dir, or "
                     "the one it printed): its agents and workers, still holding their training state, reconnect; "
                     "training resumes after the last committed step and the metrics file is appended to. Takes no "
                     "other option");
  for (auto* option : app.get_options()) {
    if (option != resume_master && option->get_name() != "--help" && option->get_name() != "--version")
      option->excludes(resume_master);
  }
  TokenizeFlags tokenize;
  const auto* tokenize_cmd = add_tokenize_command(app, tokenize);
  NodeProcessOptions node;
  const auto* worker_cmd = add_worker_command(app, node);

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  // A write to a socket whose peer is gone must fail, not kill the process
  // (Gloo writes with writev, and recovery depends on surviving that).
  ::signal(SIGPIPE, SIG_IGN);
  return cli::run_reporting_errors("oobleck-run", [&]() -> int {
    if (*tokenize_cmd) return run_tokenize(tokenize);
    if (*worker_cmd) return run_worker_process(node);
    try {
      return run_training(run);
    } catch (const NodeStartError& e) {
      std::fprintf(stderr, "oobleck-run: error: %s\n", e.what());
      return kExitFailure;
    }
  });
}
