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
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
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

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const bool path_search = args.front().find('/') == std::string::npos;
  const int error = path_search ? posix_spawnp(&pid, args.front().c_str(), nullptr, nullptr, argv.data(), environ)
                                : posix_spawn(&pid, args.front().c_str(), nullptr, nullptr, argv.data(), environ);
  if (error != 0) throw std::runtime_error("cannot start " + args.front() + ": " + std::strerror(error));
  return pid;
}

// Waits for every child; on the first failure stops the rest. True when all succeeded.
bool wait_all(const std::vector<pid_t>& children, const char* what) {
  bool failed = false;
  for (std::size_t left = children.size(); left > 0; --left) {
    int status = 0;
    if (wait(&status) < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (!failed) std::fprintf(stderr, "oobleck-run: %s failed; stopping the others\n", what);
      failed = true;
      for (pid_t c : children) kill(c, SIGTERM);
    }
  }
  return !failed;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool is_local(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return host == "localhost" || host == "127.0.0.1" || host == name;
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

  std::string hostfile, ranks_text;
  app.add_option("--hostfile", hostfile,
                 "MPI-style hostfile ('host slots=G'): the plan's node names are hosts; agents on other hosts "
                 "start over SSH (default: every node is a local process)");
  std::string master_addr = "127.0.0.1";
  app.add_option("--master-addr", master_addr,
                 "Address agents and workers reach the master at (default 127.0.0.1; give this host's address "
                 "with --hostfile)");
  int master_pid = 0;
  auto* agent_cmd = app.add_subcommand("agent", "(internal) one node's agent: starts and watches its workers");
  agent_cmd->add_option("--ranks", ranks_text)->required();
  auto* worker_cmd = app.add_subcommand("worker", "(internal) one worker of a plan");
  worker_cmd->add_option("--rank", rank)->required();
  for (auto* cmd : {agent_cmd, worker_cmd}) {
    cmd->add_option("--master-addr", master_addr);
    cmd->add_option("--port", port)->required();
    cmd->add_option("--parent-pid", master_pid);
    cmd->group("");  // not listed in --help
  }

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  return cli::run_reporting_errors("oobleck-run", [&]() -> int {
    if (*tokenize_cmd) {
      const auto tokens = tokenize_bytes(read_text_file(text_path));
      cli::write_file_atomically<InputError>(tokens_out, tokens_to_bytes(tokens));
      std::printf("Wrote %zu tokens (vocabulary 256, byte-level) to %s\n", tokens.size(), tokens_out.c_str());
      return 0;
    }
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const bool internal = *agent_cmd || *worker_cmd;
    if (internal) {
      // Die with the parent, and make sure it had not died already.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (master_pid > 0 && getppid() != master_pid) return 1;
    }
    if (*agent_cmd) {
      // One worker per rank of this node (on CPU, one).
      std::vector<pid_t> workers;
      std::stringstream list(ranks_text);
      std::string r;
      while (std::getline(list, r, ',')) {
        workers.push_back(spawn({self, "worker", "--rank", r, "--master-addr", master_addr, "--port",
                                 std::to_string(port), "--parent-pid", std::to_string(getpid())}));
      }
      return wait_all(workers, "a worker") ? 0 : 1;
    }

    // The job's configuration: the master reads the files and publishes
    // them on the control channel (the rendezvous store); workers read it
    // there, so other hosts need only the program and the token file.
    nlohmann::json config;
    c10::intrusive_ptr<c10d::TCPStore> store;
    if (*worker_cmd) {
      c10d::TCPStoreOptions client;
      client.port = static_cast<std::uint16_t>(port);
      client.isServer = false;
      client.timeout = std::chrono::seconds(120);
      store = c10::make_intrusive<c10d::TCPStore>(master_addr, client);
      const auto bytes = store->get("config");
      config = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
    } else {
      for (const auto& [flag, value] : {std::pair{"--plan", plan_path}, std::pair{"--profile", profile_path},
                                        std::pair{"--data", data_path}}) {
        if (value.empty()) throw InputError(std::string(flag) + ": required");
      }
      config = {{"plan", read_text_file(plan_path)},
                {"plan_origin", plan_path},
                {"profile", profile_to_json(load_profile(profile_path))},
                {"profile_origin", profile_path},
                {"data", std::filesystem::absolute(data_path).string()},
                {"steps", steps},
                {"seed", seed},
                {"threads", threads},
                {"metrics", metrics_path},
                {"chrome_trace", chrome_path}};
    }
    torch::set_num_threads(config["threads"].get<int>());
    const Profile profile = parse_profile(config["profile"].get<std::string>(), config["profile_origin"]);
    const Plan plan = parse_plan(config["plan"].get<std::string>(), config["plan_origin"], profile);
    TrainOptions options;
    options.model = model_of_profile(profile);
    options.microbatch_size = profile.microbatch_size;
    options.steps = config["steps"];
    options.seed = config["seed"];
    const std::string data = config["data"];
    const auto tokens = read_tokens(data);
    for (std::uint16_t t : tokens) {
      if (t >= options.model.vocab) {
        throw InputError(data + ": token " + std::to_string(t) + " is outside the model's vocabulary of " +
                         std::to_string(options.model.vocab));
      }
    }

    if (*worker_cmd) {
      store.reset();
      const WorkerResult result = train_worker(tokens, options, plan, rank, master_addr, port);
      if (rank == 0) {
        const std::string metrics = config["metrics"], chrome = config["chrome_trace"];
        if (!metrics.empty()) cli::write_file_atomically<InputError>(metrics, metrics_text(result.metrics));
        if (!chrome.empty()) cli::write_file_atomically<InputError>(chrome, result.chrome_trace);
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

    // The master: the rendezvous store, then one agent per node.
    int world = 0;
    for (const auto& p : plan.pipelines) world += static_cast<int>(p.nodes.size());
    std::vector<std::string> hosts;
    if (!hostfile.empty()) {
      const auto listed = parse_hostfile(read_text_file(hostfile), hostfile, profile.hardware.gpus_per_node);
      for (const auto& p : plan.pipelines) {
        for (const auto& n : p.nodes) {
          if (std::find(listed.begin(), listed.end(), n) == listed.end()) {
            throw InputError(hostfile + ": the plan's node " + n + " is not listed");
          }
        }
      }
    }
    c10d::TCPStoreOptions store_options;
    store_options.port = 0;
    store_options.isServer = true;
    store_options.numWorkers = world + 1;
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(120);
    store = c10::make_intrusive<c10d::TCPStore>(master_addr, store_options);
    const std::string metrics_file =
        metrics_path.empty()
            ? (std::filesystem::temp_directory_path() / ("oobleck-run-" + std::to_string(getpid()) + ".jsonl")).string()
            : std::filesystem::absolute(metrics_path).string();
    config["metrics"] = metrics_file;
    if (!chrome_path.empty()) config["chrome_trace"] = std::filesystem::absolute(chrome_path).string();
    const std::string config_text = config.dump();
    store->set("config", std::vector<std::uint8_t>(config_text.begin(), config_text.end()));
    std::vector<pid_t> agents;
    int rank_of_node = 0;
    try {
      for (const auto& p : plan.pipelines) {
        for (const auto& node : p.nodes) {
          std::vector<std::string> args = {self,     "agent",        "--ranks",     std::to_string(rank_of_node++),
                                           "--port", std::to_string(store->getPort()), "--master-addr", master_addr};
          if (hostfile.empty() || is_local(node)) {
            args.push_back("--parent-pid");
            args.push_back(std::to_string(getpid()));
          }
          if (!hostfile.empty() && !is_local(node)) {
            // Another host: the same program, same paths, over SSH.
            std::string remote;
            for (std::size_t i = 0; i < args.size(); ++i) remote += (i ? " " : "") + shell_quote(args[i]);
            args = {"ssh", "-o", "BatchMode=yes", node, remote};
          }
          agents.push_back(spawn(args));
        }
      }
    } catch (...) {
      for (pid_t a : agents) kill(a, SIGKILL);
      throw;
    }
    std::fprintf(stderr, "oobleck-run: %d nodes (%zu pipelines), one agent and one worker each, %d steps\n", world,
                 plan.pipelines.size(), steps);
    const bool failed = !wait_all(agents, "an agent");
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
