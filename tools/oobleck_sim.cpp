// oobleck-sim: one iteration op by op, trace replay with recovery policies,
// Monte Carlo over generated traces, sweeps, and trace generation.
//
// Exit status: 0 success, 2 bad input, 3 no plan even at the trace's peak,
// 1 anything unexpected.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "oobleck/common/files.h"
#include "cli_io.h"
#include "oobleck/planner.h"
#include "oobleck/sim/iteration.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"

namespace {

using namespace oobleck;
using namespace oobleck::sim;
using Clock = std::chrono::steady_clock;


// How generated traces are made: shared by `trace`, `replay` and `sweep`.
struct Generator {
  std::string kind;  // fixed | poisson | spot
  int nodes = 0;
  std::string interval = "1h";
  int min_nodes = 0;
  double failure_rate = -1;  // per node-hour
  std::string preset;
  int gpus_per_node = 0;
  std::string mttr = "0";
  std::string duration = "1d";
  double add_probability = 0.5, remove_probability = 0.05;
  std::uint64_t seed = 1;

  void add_options(CLI::App* cmd, bool required_kind) {
    auto* k = cmd->add_option("--generate", kind, "Generate the trace: fixed, poisson or spot")
                  ->check(CLI::IsMember({"fixed", "poisson", "spot"}));
    if (required_kind) k->required();
    cmd->add_option("--nodes", nodes, "Nodes at the start (fixed, poisson) or slots (spot)")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--interval", interval, "fixed: one node lost every INTERVAL (e.g. 30m, 6h)");
    cmd->add_option("--min-nodes", min_nodes, "fixed: stop removing at this many nodes")->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--failure-rate", failure_rate, "poisson: failures per node-hour")->check(CLI::Range(0.0, 1e6));
    cmd->add_option("--preset", preset,
                    "poisson: llama3-405b = 419 interruptions in 54 days on 16,384 GPUs, scaled by GPUs per node")
        ->check(CLI::IsMember({"llama3-405b"}));
    cmd->add_option("--gpus-per-node", gpus_per_node, "poisson with a preset: GPUs per node (default: the profile's, or 8)")
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--mttr", mttr, "poisson: mean time to repair, e.g. 3h (0: never repaired)");
    cmd->add_option("--duration", duration, "Trace length, e.g. 54d");
    cmd->add_option("--add-probability", add_probability, "spot: chance per hour that an absent slot comes back")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--remove-probability", remove_probability, "spot: chance per hour that a present node goes")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seed", seed, "Random seed (the first of --seeds)");
  }

  [[nodiscard]] Trace make(std::uint64_t with_seed, int default_gpus_per_node) const {
    if (nodes <= 0) throw InputError("--nodes: required with --generate");
    const Milliseconds length = parse_duration(duration, "--duration");
    Trace trace;
    if (kind == "fixed") {
      trace = fixed_interval_trace(nodes, parse_duration(interval, "--interval"), min_nodes, with_seed);
    } else if (kind == "poisson") {
      double rate = failure_rate;
      if (!preset.empty()) {
        if (rate >= 0) throw InputError("--failure-rate and --preset: give one of them");
        rate = kLlama3FailuresPerGpuHour * (gpus_per_node > 0 ? gpus_per_node : default_gpus_per_node);
      }
      if (rate < 0) throw InputError("--failure-rate: required for poisson traces (or --preset llama3-405b)");
      trace = poisson_trace(nodes, rate, parse_duration(mttr, "--mttr"), length, with_seed);
    } else {
      trace = spot_trace(nodes, add_probability, remove_probability, length, with_seed);
    }
    trace.origin = kind + " trace (seed " + std::to_string(with_seed) + ")";
    return trace;
  }
};

// At most two lines a second; callable from several threads.
Progress progress_printer(const char* program) {
  struct State {
    std::mutex mutex;
    Clock::time_point last = Clock::now() - std::chrono::seconds(1);
  };
  auto state = std::make_shared<State>();
  return [state, program](std::string_view line) {
    std::lock_guard lock(state->mutex);
    if (Clock::now() - state->last < std::chrono::milliseconds(500)) return;
    state->last = Clock::now();
    std::cerr << program << ": " << line << "\n";
  };
}

// Runs `count` jobs on all cores; results in job order, so output does not
// depend on scheduling.
template <typename Result, typename Job>
std::vector<Result> run_on_all_cores(int count, Job job, const char* what) {
  std::vector<Result> results(count);
  std::vector<std::exception_ptr> errors(count);
  std::atomic<int> next{0}, done{0};
  std::mutex print;
  const int workers = std::max(1, std::min<int>(count, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        try {
          results[i] = job(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
        const int finished = ++done;
        std::lock_guard lock(print);
        std::cerr << "oobleck-sim: " << what << " " << finished << "/" << count << " done\n";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  // Linear interpolation between closest ranks.
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const auto high = std::min(values.size() - 1, low + 1);
  return values[low] + (values[high] - values[low]) * (position - static_cast<double>(low));
}

std::string seeds_json(const std::vector<ReplayResult>& runs, std::uint64_t first_seed) {
  using nlohmann::ordered_json;
  ordered_json out;
  out["format"] = "oobleck.replay-seeds.v1";
  out["seeds"] = runs.size();
  out["first_seed"] = first_seed;
  ordered_json policies = ordered_json::object();
  for (std::size_t p = 0; p < runs.front().policies.size(); ++p) {
    auto stat = [&](auto field) {
      std::vector<double> values;
      for (const auto& r : runs) values.push_back(field(r.policies[p]));
      return ordered_json{{"median", percentile(values, 0.5)}, {"p5", percentile(values, 0.05)},
                          {"p95", percentile(values, 0.95)}};
    };
    ordered_json entry;
    entry["runnable"] = runs.front().policies[p].runnable;
    entry["samples_per_s"] = stat([](const PolicyResult& r) { return r.samples_per_s; });
    entry["goodput"] = stat([](const PolicyResult& r) { return r.goodput; });
    entry["failures"] = stat([](const PolicyResult& r) { return static_cast<double>(r.failures); });
    entry["unrecoverable"] = stat([](const PolicyResult& r) { return static_cast<double>(r.unrecoverable); });
    entry["lost_work_s"] = stat([](const PolicyResult& r) { return r.time.lost_work_ms / 1000.0; });
    policies[std::string(policy_name(runs.front().policies[p].policy))] = std::move(entry);
  }
  out["policies"] = std::move(policies);
  return out.dump(2) + "\n";
}

void print_seeds_summary(const std::string& json_text) {
  const auto doc = nlohmann::ordered_json::parse(json_text);
  std::printf("%zu generated traces: median [5th, 95th percentile]\n", doc["seeds"].get<std::size_t>());
  std::printf("%-10s  %-32s  %-28s\n", "policy", "samples/s", "goodput");
  for (const auto& [name, p] : doc["policies"].items()) {
    std::printf("%-10s  %9.2f [%9.2f, %9.2f]  %6.1f%% [%6.1f%%, %6.1f%%]\n", name.c_str(),
                p["samples_per_s"]["median"].get<double>(), p["samples_per_s"]["p5"].get<double>(),
                p["samples_per_s"]["p95"].get<double>(), 100 * p["goodput"]["median"].get<double>(),
                100 * p["goodput"]["p5"].get<double>(), 100 * p["goodput"]["p95"].get<double>());
  }
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag, bool allow_auto) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (allow_auto && item == "auto") {
      out.push_back(-1);
      continue;
    }
    try {
      std::size_t used = 0;
      const long value = std::stol(item, &used);
      if (used != item.size() || value < 0 || value > 1'000'000) throw std::invalid_argument(item);
      out.push_back(static_cast<int>(value));
    } catch (const std::exception&) {
      throw InputError(flag + ": expected a comma-separated list of non-negative integers" +
                       (allow_auto ? std::string(" or auto") : "") + ", got \"" + item + "\"");
    }
  }
  if (out.empty()) throw InputError(flag + ": empty list");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-sim: simulate training iterations and replay failure traces with recovery policies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oobleck-sim 0.1.0");

  std::string profile_path, plan_path, json_out, chrome_out, trace_path, scenario_path, policies = "all",
                                                                                         timeline_out, plot_out, trace_out;
  int fault_tolerance = 1, global_microbatches = 0, seeds = 0;
  Generator generator;

  auto* iteration_cmd = app.add_subcommand("iteration", "Play one iteration of a plan op by op");
  iteration_cmd->add_option("--plan", plan_path, "Plan JSON from oobleck-plan instantiate or reconfigure")->required();
  iteration_cmd->add_option("--profile", profile_path, "The profile the plan was made from")->required();
  iteration_cmd->add_option("--scenario", scenario_path, "Scenario JSON (device memory bandwidth for the optimizer step)");
  iteration_cmd->add_option("--json", json_out, "Write the result as JSON here ('-' for stdout)");
  iteration_cmd->add_option("--chrome-trace", chrome_out, "Write the schedule as a Chrome trace (open in Perfetto)");
  double gradient_scale = 1;
  bool shared_device = false, tied_embedding = false;
  iteration_cmd->add_option("--gradient-scale", gradient_scale,
                            "All-reduced bytes per parameter byte of the profile (oobleck-run: 2, float64 sums of "
                            "fp32 gradients)")
      ->check(CLI::Range(0.0, 64.0));
  iteration_cmd->add_flag("--shared-device", shared_device,
                          "Every stage computes on one device (workers sharing a GPU), one op at a time");
  iteration_cmd->add_flag("--tied-embedding", tied_embedding,
                          "The LM head's weight is the token embedding's: first and last layers' gradients are "
                          "all-reduced together, among the holders of either");

  auto add_replay_options = [&](CLI::App* cmd) {
    cmd->add_option("--trace", trace_path, "Trace CSV (time_ms,add|remove,node) or count series");
    cmd->add_option("--profile", profile_path, "Profile JSON or Oobleck profile folder")->required();
    cmd->add_option("--global-microbatches", global_microbatches, "B: microbatches per iteration")
        ->required()
        ->check(CLI::Range(1, 1000000));
    cmd->add_option("--scenario", scenario_path, "Scenario JSON: cluster description and overrides");
    cmd->add_option("--seeds", seeds, "Replay K generated traces (seeds --seed .. --seed+K-1) on all cores")
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--json", json_out, "Write the result as JSON here ('-' for stdout)");
    generator.add_options(cmd, false);
  };

  auto* replay_cmd = app.add_subcommand("replay", "Replay a trace with recovery policies");
  add_replay_options(replay_cmd);
  replay_cmd->add_option("--fault-tolerance", fault_tolerance, "f: node failures the oobleck plan survives")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  replay_cmd->add_option("--policy", policies, "oobleck,checkpoint,inmemory,bamboo or all");
  replay_cmd->add_option("--timeline", timeline_out, "Write the timeline CSV here");
  replay_cmd->add_option("--plot", plot_out, "Write an SVG plot of throughput and nodes over time here");

  std::string sweep_f = "0,1,2,3", sweep_k = "auto,10,50,100,500";
  auto* sweep_cmd = app.add_subcommand("sweep", "Sweep f (oobleck) and the checkpoint interval (checkpoint), recommend the best");
  add_replay_options(sweep_cmd);
  sweep_cmd->add_option("--fault-tolerance", sweep_f, "Values of f to try, e.g. 0,1,2,3");
  sweep_cmd->add_option("--checkpoint-interval", sweep_k, "Checkpoint intervals in iterations, e.g. auto,50,100");

  auto* trace_cmd = app.add_subcommand("trace", "Generate a trace");
  generator.add_options(trace_cmd, true);
  trace_cmd->add_option("--out", trace_out, "Output CSV ('-' for stdout)")->required();

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  return cli::run_reporting_errors("oobleck-sim", [&]() -> int {
    for (const auto& [flag, path] : {std::pair{"--json", json_out}, std::pair{"--chrome-trace", chrome_out},
                                     std::pair{"--timeline", timeline_out}, std::pair{"--plot", plot_out},
                                     std::pair{"--out", trace_out}}) {
      require_output_path(flag, path);
    }
    if (*trace_cmd) {
      const Trace trace = generator.make(generator.seed, 8);
      if (cli::emit(trace_out, trace_to_csv(trace))) return 0;
      int removes = 0;
      for (const auto& e : trace.events) removes += e.change == NodeChange::remove ? 1 : 0;
      std::cout << "Wrote " << trace.events.size() << " events (" << removes << " removals, peak "
                << trace.peak_nodes() << " nodes, " << trace.duration_ms() / 3.6e6 << " h) to " << trace_out << "\n";
      return 0;
    }

    const Profile profile = load_profile(profile_path);
    Scenario scenario;
    if (!scenario_path.empty()) scenario = parse_scenario(read_text_file(scenario_path), scenario_path);

    if (*iteration_cmd) {
      const Plan plan = parse_plan(read_text_file(plan_path), plan_path, profile);
      const CostModel cost(profile, std::max(1, plan.template_microbatches));
      IterationOptions options;
      options.optimizer_bytes_per_s = scenario.cluster.device_memory_bytes_per_s;
      options.record_ops = !chrome_out.empty();
      options.gradient_scale = gradient_scale;
      options.shared_device = shared_device;
      options.tied_embedding = tied_embedding;
      const IterationResult result = simulate_iteration(cost, plan, options);
      if (!chrome_out.empty()) cli::emit(chrome_out, chrome_trace_json(result, plan, profile));
      if (cli::emit(json_out, iteration_to_json(result, plan))) return 0;
      std::printf("iteration: %.2f ms simulated op by op (the planner's formula: %.2f ms)\n", result.iteration_ms,
                  plan.iteration_ms);
      std::printf("  last backward ends at %.2f ms; gradient all-reduce exposed after it: %.2f ms\n",
                  result.last_backward_ms, result.sync_exposed_ms);
      std::printf("  %-8s %-5s %-12s %-10s %5s %12s %12s %12s\n", "pipeline", "stage", "node", "layers", "GPUs",
                  "compute ms", "optimizer ms", "idle ms");
      for (const auto& s : result.stages) {
        const Stage& st = plan.pipelines[s.pipeline].stages[s.stage];
        const std::string layers = "[" + std::to_string(st.layer_begin) + "," + std::to_string(st.layer_end) + ")";
        std::printf("  %-8d %-5d %-12s %-10s %5d %12.2f %12.2f %12.2f\n", s.pipeline, s.stage, s.node.c_str(),
                    layers.c_str(), s.gpus, s.compute_ms, s.optimizer_ms, s.idle_ms);
      }
      if (!chrome_out.empty()) std::printf("Chrome trace: %s (open it in https://ui.perfetto.dev)\n", chrome_out.c_str());
      return 0;
    }

    // replay and sweep
    const bool generated = !generator.kind.empty();
    if (generated == !trace_path.empty()) throw InputError("give either --trace FILE or --generate KIND");
    if (seeds > 0 && !generated) throw InputError("--seeds: needs --generate (a trace file has no randomness)");
    std::optional<Trace> file_trace;
    if (!generated) file_trace = load_trace(trace_path);
    const int runs = generated ? std::max(1, seeds) : 1;
    auto trace_for = [&](int i) {
      return generated ? generator.make(generator.seed + static_cast<std::uint64_t>(i), profile.hardware.gpus_per_node)
                       : *file_trace;
    };
    const auto start = Clock::now();

    if (*replay_cmd) {
      ReplayOptions options;
      options.fault_tolerance = fault_tolerance;
      options.global_microbatches = global_microbatches;
      options.policies = parse_policies(policies);
      if (runs == 1) {
        const Trace trace = trace_for(0);
        const ReplayResult result = replay(profile, trace, options, scenario, progress_printer("oobleck-sim"));
        if (!timeline_out.empty()) cli::emit(timeline_out, timeline_csv(result));
        if (!plot_out.empty()) {
          cli::emit(plot_out, timeline_svg(result, profile.model_name + " on " + trace.origin + ", f = " +
                                                  std::to_string(fault_tolerance) + ", B = " +
                                                  std::to_string(global_microbatches)));
        }
        if (cli::emit(json_out, replay_to_json(result))) return 0;
        std::printf("%s: %zu events over %.2f h, peak %d nodes; %s, f = %d, B = %d (%d samples per iteration)\n",
                    trace.origin.c_str(), trace.events.size(), trace.duration_ms() / 3.6e6, trace.peak_nodes(),
                    profile.model_name.c_str(), fault_tolerance, global_microbatches, result.samples_per_iteration);
        std::cout << summary_table(result);
      } else {
        if (!timeline_out.empty() || !plot_out.empty()) throw InputError("--timeline and --plot: one trace only (no --seeds)");
        options.parallel = false;  // the seeds already use every core
        const auto results = run_on_all_cores<ReplayResult>(
            runs, [&](int i) { return replay(profile, trace_for(i), options, scenario); }, "trace");
        const std::string text = seeds_json(results, generator.seed);
        if (cli::emit(json_out, text)) return 0;
        print_seeds_summary(text);
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::cerr << "oobleck-sim: replayed in " << seconds << " s\n";
      return 0;
    }

    if (*sweep_cmd) {
      const auto fs = parse_int_list(sweep_f, "--fault-tolerance", false);
      const auto ks = parse_int_list(sweep_k, "--checkpoint-interval", true);
      struct Point {
        Policy policy;
        int f;
        int k;  // -1: Young/Daly
      };
      std::vector<Point> points;
      for (int f : fs) points.push_back({Policy::oobleck, f, -1});
      for (int k : ks) points.push_back({Policy::checkpoint, 0, k});  // needs no replicas
      const int total = static_cast<int>(points.size()) * runs;
      const auto results = run_on_all_cores<PolicyResult>(
          total,
          [&](int i) {
            const Point& p = points[static_cast<std::size_t>(i / runs)];
            ReplayOptions options;
            options.fault_tolerance = p.f;
            options.global_microbatches = global_microbatches;
            options.policies = {p.policy};
            options.parallel = false;
            Scenario s = scenario;
            if (p.k >= 0) s.overrides.checkpoint_interval_iterations = p.k;
            return replay(profile, trace_for(i % runs), options, s).policies.front();
          },
          "sweep run");
      using nlohmann::ordered_json;
      ordered_json out;
      out["format"] = "oobleck.sweep.v1";
      out["seeds"] = runs;
      ordered_json rows = ordered_json::array();
      double best_f_rate = -1, best_k_rate = -1;
      int best_f = -1, best_k = -1;
      for (std::size_t p = 0; p < points.size(); ++p) {
        std::vector<double> rates, goodputs;
        int interval = 0;
        for (int r = 0; r < runs; ++r) {
          const PolicyResult& res = results[p * runs + r];
          rates.push_back(res.samples_per_s);
          goodputs.push_back(res.goodput);
          interval = res.checkpoint_interval_iterations;
        }
        const double rate = percentile(rates, 0.5);
        ordered_json row = {{"policy", policy_name(points[p].policy)},
                            {"fault_tolerance", points[p].f},
                            {"checkpoint_interval", points[p].k < 0 ? ordered_json("auto") : ordered_json(points[p].k)},
                            {"checkpoint_interval_iterations", interval},
                            {"samples_per_s", rate},
                            {"goodput", percentile(goodputs, 0.5)}};
        rows.push_back(row);
        if (points[p].policy == Policy::oobleck && rate > best_f_rate) {
          best_f_rate = rate;
          best_f = points[p].f;
        }
        if (points[p].policy == Policy::checkpoint && rate > best_k_rate) {
          best_k_rate = rate;
          best_k = interval;
        }
      }
      out["runs"] = rows;
      out["recommended"] = {{"fault_tolerance", best_f}, {"checkpoint_interval_iterations", best_k}};
      if (cli::emit(json_out, out.dump(2) + "\n")) return 0;
      std::printf("%-10s  %3s  %-10s  %12s  %8s\n", "policy", "f", "interval", "samples/s", "goodput");
      for (const auto& row : rows) {
        std::printf("%-10s  %3d  %-10s  %12.2f  %7.1f%%\n", row["policy"].get<std::string>().c_str(),
                    row["fault_tolerance"].get<int>(),
                    (std::to_string(row["checkpoint_interval_iterations"].get<int>()) +
                     (row["checkpoint_interval"] == "auto" ? " (auto)" : ""))
                        .c_str(),
                    row["samples_per_s"].get<double>(), 100 * row["goodput"].get<double>());
      }
      std::printf("Recommended: f = %d for oobleck; a checkpoint every %d iterations for checkpoint-restart\n", best_f,
                  best_k);
      return 0;
    }
    return 0;
  });
}
