// oobleck-run: trains a plan live. The master starts one worker process per
// node of the plan on this machine (CPU: one worker per node), holds the
// rendezvous store, and waits for them; the workers train with Gloo.
//
// Exit status: 0 success, 2 bad input, 1 a worker failed or anything else.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_io.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/train.h"

extern char** environ;

namespace {

using namespace oobleck;
using namespace oobleck::executor;

std::string metrics_text(const std::vector<StepMetrics>& metrics) {
  std::string out;
  for (const auto& m : metrics) out += metrics_line(m) + "\n";
  return out;
}

void print_metrics(const std::vector<StepMetrics>& metrics) {
  for (const auto& m : metrics) {
    std::printf("step %3d  loss %.6f  samples %lld  %.1f ms\n", m.step, m.loss, static_cast<long long>(m.samples),
                m.iteration_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-run: train a plan live with worker processes, 1F1B pipelines and Gloo"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "oobleck-run 0.1.0");
  std::string plan_path, profile_path, data_path, metrics_path, chrome_path;
  int steps = 1, threads = 1, rank = -1, port = 0;
  std::uint64_t seed = 1;
  bool single_process = false;
  auto add_training_options = [&](CLI::App* cmd) {
    cmd->add_option("--plan", plan_path, "Plan JSON from oobleck-plan instantiate");
    cmd->add_option("--profile", profile_path, "The profile the plan was made from (its model is trained)");
    cmd->add_option("--data", data_path, "Token file: little-endian uint16 tokens");
    cmd->add_option("--steps", steps, "Training steps")->check(CLI::Range(1, 100000000));
    cmd->add_option("--seed", seed, "Weights and data order");
    cmd->add_option("--threads", threads, "Intra-op threads per worker")->check(CLI::Range(1, 1024));
    cmd->add_option("--metrics", metrics_path, "One JSON line per step: {step, loss, samples, iteration_ms}");
    cmd->add_option("--chrome-trace", chrome_path,
                    "The last step's schedule as a Chrome trace, as oobleck-sim iteration writes it");
  };
  add_training_options(&app);
  app.add_flag("--single-process", single_process,
               "Train the same model on the same global batches in this one process (the reference)");

  std::string text_path, tokens_out;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "Make a token file from text (byte-level tokens)");
  tokenize_cmd->add_option("--text", text_path, "Text file")->required();
  tokenize_cmd->add_option("--out", tokens_out, "Token file to write")->required();

  auto* worker_cmd = app.add_subcommand("worker", "(internal) one worker of a plan");
  add_training_options(worker_cmd);
  worker_cmd->add_option("--rank", rank)->required();
  worker_cmd->add_option("--port", port)->required();
  int master_pid = 0;
  worker_cmd->add_option("--master-pid", master_pid);
  worker_cmd->group("");

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  return cli::run_reporting_errors("oobleck-run", [&]() -> int {
    if (*tokenize_cmd) {
      const auto tokens = tokenize_bytes(read_text_file(text_path));
      cli::write_file_atomically<InputError>(tokens_out, tokens_to_bytes(tokens));
      std::printf("Wrote %zu tokens (vocabulary 256, byte-level) to %s\n", tokens.size(), tokens_out.c_str());
      return 0;
    }
    for (const auto& [flag, value] : {std::pair{"--plan", plan_path}, std::pair{"--profile", profile_path},
                                      std::pair{"--data", data_path}}) {
      if (value.empty()) throw InputError(std::string(flag) + ": required");
    }
    torch::set_num_threads(threads);
    const Profile profile = load_profile(profile_path);
    const Plan plan = parse_plan(read_text_file(plan_path), plan_path, profile);
    TrainOptions options;
    options.model = model_of_profile(profile);
    options.microbatch_size = profile.microbatch_size;
    options.steps = steps;
    options.seed = seed;
    const auto tokens = read_tokens(data_path);
    for (std::uint16_t t : tokens) {
      if (t >= options.model.vocab) {
        throw InputError(data_path + ": token " + std::to_string(t) + " is outside the model's vocabulary of " +
                         std::to_string(options.model.vocab));
      }
    }

    if (*worker_cmd) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the master
      if (master_pid > 0 && getppid() != master_pid) return 1;  // it died before the line above
      const WorkerResult result = train_worker(tokens, options, plan, rank, port);
      if (rank == 0) {
        if (!metrics_path.empty()) cli::write_file_atomically<InputError>(metrics_path, metrics_text(result.metrics));
        if (!chrome_path.empty()) cli::write_file_atomically<InputError>(chrome_path, result.chrome_trace);
        std::fputs(result.stage_summary.c_str(), stdout);
      }
      return 0;
    }

    if (single_process) {
      const auto metrics = train_single_process(tokens, options, plan.global_microbatches);
      if (!metrics_path.empty()) cli::write_file_atomically<InputError>(metrics_path, metrics_text(metrics));
      print_metrics(metrics);
      return 0;
    }

    // The master: the rendezvous store, then one worker per node.
    int world = 0;
    for (const auto& p : plan.pipelines) world += static_cast<int>(p.nodes.size());
    c10d::TCPStoreOptions store_options;
    store_options.port = 0;
    store_options.isServer = true;
    store_options.numWorkers = world + 1;
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(120);
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string metrics_file =
        metrics_path.empty() ? (std::filesystem::temp_directory_path() / ("oobleck-run-" + std::to_string(getpid()) + ".jsonl")).string()
                             : metrics_path;
    std::vector<pid_t> children;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> args = {self,       "worker",          "--plan",  plan_path,
                                       "--profile", profile_path,     "--data",  data_path,
                                       "--steps",   std::to_string(steps), "--seed", std::to_string(seed),
                                       "--threads", std::to_string(threads), "--rank", std::to_string(r),
                                       "--port",    std::to_string(store->getPort()), "--metrics", metrics_file,
                                       "--master-pid", std::to_string(getpid())};
      if (!chrome_path.empty()) {
        args.push_back("--chrome-trace");
        args.push_back(chrome_path);
      }
      std::vector<char*> child_argv;
      for (auto& a : args) child_argv.push_back(a.data());
      child_argv.push_back(nullptr);
      pid_t pid = 0;
      if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, child_argv.data(), environ) != 0) {
        for (pid_t c : children) kill(c, SIGKILL);
        throw std::runtime_error("cannot start worker " + std::to_string(r));
      }
      children.push_back(pid);
    }
    std::fprintf(stderr, "oobleck-run: %d workers (%zu pipelines), %d steps\n", world, plan.pipelines.size(), steps);
    bool failed = false;
    for (std::size_t left = children.size(); left > 0; --left) {
      int status = 0;
      const pid_t pid = wait(&status);
      if (pid < 0) break;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!failed) std::fprintf(stderr, "oobleck-run: a worker failed; stopping the others\n");
        failed = true;
        for (pid_t c : children) kill(c, SIGTERM);
      }
    }
    if (failed) return 1;
    std::vector<StepMetrics> metrics;
    {
      const std::string text = read_text_file(metrics_file);
      std::size_t start = 0;
      while (start < text.size()) {
        const std::size_t end = text.find('\n', start);
        const auto line = nlohmann::json::parse(text.substr(start, end - start));
        metrics.push_back({line["step"], line["loss"], line["samples"], line["iteration_ms"]});
        start = end == std::string::npos ? text.size() : end + 1;
      }
      if (metrics_path.empty()) std::filesystem::remove(metrics_file);
    }
    print_metrics(metrics);
    return 0;
  });
}
