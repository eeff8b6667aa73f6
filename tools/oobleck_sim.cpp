// oobleck-sim: one iteration op by op, trace replay with recovery policies,
// Monte Carlo over generated traces, sweeps, trace generation, and the
// iteration model validated against published measurements.
//
// Exit status: 0 success, 2 bad input, 3 no plan even at the trace's peak,
// 1 anything unexpected or a validation error beyond its bounds.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>

#include "cli_io.h"
#include "gradient_sync_flags.h"
#include "pipelines_per_node_flag.h"
#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/planner.h"
#include "oobleck/sim/experiment.h"
#include "oobleck/sim/iteration.h"
#include "oobleck/sim/monte_carlo.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/sweep.h"
#include "oobleck/sim/trace.h"
#include "oobleck/sim/trace_generator.h"
#include "oobleck/validation.h"

namespace {

using namespace oobleck;
using namespace oobleck::sim;
using Clock = std::chrono::steady_clock;

// A preset's rate is per GPU; `trace` has no profile to say how many a node has.
constexpr int kDefaultGpusPerNode = 8;

struct IterationFlags {
  std::string plan_path, profile_path, scenario_path, json_out, chrome_out;
  double gradient_scale = 1;
  bool shared_device = false, tied_embedding = false, gradient_norm = false;
  std::vector<std::string> node_delays;  // NODE=MS
};

// What `replay` and `sweep` share.
struct ExperimentFlags {
  std::string trace_path, profile_path, scenario_path, json_out;
  int global_microbatches = 0, seeds = 0;
  TraceSpec spec;
};

struct ReplayFlags {
  ExperimentFlags experiment;
  int fault_tolerance = 1;
  std::string policies = "all", timeline_out, plot_out, decisions_out, recompute = "none", stragglers;
  cli::GradientSyncFlags gradient_sync;
  int tensor_parallel_nodes = 1, interleave = 1;
  std::string pipelines_per_node = "1";
};

struct SweepFlags {
  ExperimentFlags experiment;
  std::string fault_tolerances = "0,1,2,3", checkpoint_intervals = "auto,10,50,100,500";
};

struct TraceFlags {
  TraceSpec spec;
  std::string out;
};

// ------------------------------------------------------------------ flags

void add_generator_options(CLI::App* cmd, TraceSpec& spec, bool required_kind) {
  auto* kind = cmd->add_option("--generate", spec.kind, "Generate the trace: fixed, poisson or spot")
                   ->check(CLI::IsMember({"fixed", "poisson", "spot"}));
  if (required_kind) kind->required();
  cmd->add_option("--nodes", spec.nodes, "Nodes at the start (fixed, poisson) or slots (spot)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--interval", spec.interval, "fixed: one node lost every INTERVAL (e.g. 30m, 6h)");
  cmd->add_option("--min-nodes", spec.min_nodes, "fixed: stop removing at this many nodes")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--failure-rate", spec.failures_per_node_hour, "poisson: failures per node-hour")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--preset", spec.preset,
                  "poisson: llama3-405b = 419 interruptions in 54 days on 16,384 GPUs, scaled by GPUs per node")
      ->check(CLI::IsMember({"llama3-405b"}));
  cmd->add_option("--gpus-per-node", spec.gpus_per_node,
                  "poisson with a preset: GPUs per node (default: the profile's, or 8)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--mttr", spec.mttr, "poisson: mean time to repair, e.g. 3h (0: never repaired)");
  cmd->add_option("--duration", spec.duration, "Trace length, e.g. 54d");
  cmd->add_option("--add-probability", spec.add_probability, "spot: chance per hour that an absent slot comes back")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--remove-probability", spec.remove_probability, "spot: chance per hour that a present node goes")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", spec.seed, "Random seed (the first of --seeds)");
  cmd->add_option("--stragglers-per-node-hour", spec.stragglers_per_node_hour,
                  "Add stragglers: slowdowns per node-hour while present (time_ms,slow,node,factor lines)");
  cmd->add_option("--straggler-preset", spec.straggler_preset,
                  "falcon: FALCON's compute fail-slows (1.1e-2 per node-hour, 10 min, 15-25 % slower)");
  cmd->add_option("--straggler-mean", spec.straggler_mean, "Stragglers' mean duration, e.g. 10m");
  cmd->add_option("--straggler-factors", spec.straggler_factors, "MIN,MAX: stragglers' speed factors, drawn uniformly")
      ->delimiter(',')
      ->expected(2);
}

CLI::App* add_iteration_command(CLI::App& app, IterationFlags& flags) {
  auto* cmd = app.add_subcommand("iteration", "Play one iteration of a plan op by op");
  cmd->add_option("--plan", flags.plan_path, "Plan JSON from oobleck-plan instantiate or reconfigure")->required();
  cmd->add_option("--profile", flags.profile_path, "The profile the plan was made from")->required();
  cmd->add_option("--scenario", flags.scenario_path, "Scenario JSON (device memory bandwidth for the optimizer step)");
  cmd->add_option("--json", flags.json_out, "Write the result as JSON here ('-' for stdout)");
  cmd->add_option("--chrome-trace", flags.chrome_out, "Write the schedule as a Chrome trace (open in Perfetto)");
  cmd->add_option("--gradient-scale", flags.gradient_scale,
                  "All-reduced bytes per parameter byte of the profile (oobleck-run: 2, float64 sums of "
                  "fp32 gradients)")
      ->check(CLI::Range(0.0, 64.0));
  cmd->add_flag("--shared-device", flags.shared_device,
                "Every stage computes on one device (workers sharing a GPU), one op at a time");
  cmd->add_flag("--tied-embedding", flags.tied_embedding,
                "The LM head's weight is the token embedding's: first and last layers' gradients are "
                "all-reduced together, among the holders of either");
  cmd->add_flag("--gradient-norm", flags.gradient_norm,
                "The global gradient norm (for clipping) is all-reduced among every trainer before the optimizer "
                "steps, as oobleck-run does");
  cmd->add_option("--node-delay-ms", flags.node_delays,
                  "NODE=MS: what NODE sends arrives MS later (a distant node, one way; its transfers and every "
                  "ring step of its all-reduces); repeatable");
  return cmd;
}

void add_experiment_options(CLI::App* cmd, ExperimentFlags& flags) {
  cmd->add_option("--trace", flags.trace_path, "Trace CSV (time_ms,add|remove,node) or count series");
  cmd->add_option("--profile", flags.profile_path, "Profile JSON or Oobleck profile folder")->required();
  cmd->add_option("--global-microbatches", flags.global_microbatches, "B: microbatches per iteration")
      ->required()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--scenario", flags.scenario_path, "Scenario JSON: cluster description and overrides");
  cmd->add_option("--seeds", flags.seeds, "Replay K generated traces (seeds --seed .. --seed+K-1) on all cores")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--json", flags.json_out, "Write the result as JSON here ('-' for stdout)");
  add_generator_options(cmd, flags.spec, false);
}

CLI::App* add_replay_command(CLI::App& app, ReplayFlags& flags) {
  auto* cmd = app.add_subcommand("replay", "Replay a trace with recovery policies");
  add_experiment_options(cmd, flags.experiment);
  cmd->add_option("--fault-tolerance", flags.fault_tolerance, "f: node failures the oobleck plan survives")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--policy", flags.policies,
                  "oobleck,checkpoint,inmemory,bamboo,oobleck-snapshots or all (oobleck-snapshots: oobleck whose "
                  "fall-back past f restores in-memory snapshots, own or mirrored, before the disk checkpoint; "
                  "scenario overrides snapshot_every_iterations, mirror_every_iterations, snapshot_stall_ms, "
                  "snapshot_restore_{memory,mirror,disk}_ms)");
  cmd->add_option("--recompute", flags.recompute,
                  "Activation recomputation the templates may choose, as oobleck-plan --recompute: none, auto, "
                  "selective or full")
      ->check(CLI::IsMember({"none", "auto", "selective", "full"}));
  cmd->add_option("--tensor-parallel-nodes", flags.tensor_parallel_nodes,
                  "How many whole nodes one stage may span, as oobleck-plan --tensor-parallel-nodes (default 1)")
      ->check(CLI::Range(1, kMaxTensorParallelNodes));
  cmd->add_option("--interleave", flags.interleave,
                  "V: let the templates give each device 2 to V model chunks where that plays faster, as "
                  "oobleck-plan --interleave (every policy but bamboo; stragglers mitigated then by keeping or "
                  "dropping slow nodes, not by splits at node speeds; default 1: never)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pipelines-per-node", flags.pipelines_per_node,
                  std::string(cli::kPipelinesPerNodeHelp) +
                      ", as oobleck-plan --pipelines-per-node (every policy but bamboo; stragglers mitigated then by "
                      "keeping or dropping slow nodes, not by splits at node speeds)");
  // Every policy plans for it and plays its iterations with it.
  cli::add_gradient_sync_options(cmd, flags.gradient_sync);
  cmd->add_option("--stragglers", flags.stragglers,
                  "With a trace that slows nodes: replay each policy per handling, ignore, evict (the slow node "
                  "leaves once detected and rejoins when it recovers) and mitigate (oobleck's re-split or "
                  "re-plan; with --interleave or --pipelines-per-node, keeping or dropping slow nodes), or all (the "
                  "default)");
  cmd->add_option("--timeline", flags.timeline_out, "Write the timeline CSV here");
  cmd->add_option("--plot", flags.plot_out, "Write an SVG plot of throughput and nodes over time here");
  cmd->add_option("--decisions", flags.decisions_out,
                  "Write the oobleck policy's decisions here (oobleck-snapshots' when --policy leaves oobleck "
                  "out): a JSON line per generation it started, the record a live run's --metrics has for each of "
                  "its generations");
  return cmd;
}

CLI::App* add_sweep_command(CLI::App& app, SweepFlags& flags) {
  auto* cmd =
      app.add_subcommand("sweep", "Sweep f (oobleck) and the checkpoint interval (checkpoint), recommend the best");
  add_experiment_options(cmd, flags.experiment);
  cmd->add_option("--fault-tolerance", flags.fault_tolerances, "Values of f to try, e.g. 0,1,2,3");
  cmd->add_option("--checkpoint-interval", flags.checkpoint_intervals,
                  "Checkpoint intervals in iterations, e.g. auto,50,100");
  return cmd;
}

struct ValidateFlags {
  std::string suite = "tests/validation/suite.json", json_out;
  bool every_row = false;
};

CLI::App* add_validate_command(CLI::App& app, ValidateFlags& flags) {
  auto* cmd = app.add_subcommand(
      "validate", "Predict published measured iterations (tests/validation/) and report the errors; exit 1 beyond "
                  "the bounds recorded beside the data");
  cmd->add_option("--suite", flags.suite, "The suite: datasets, clusters, calibration rows and bounds")
      ->capture_default_str();
  cmd->add_option("--json", flags.json_out, "Write every run's prediction and the summaries as JSON here");
  cmd->add_flag("--every-row", flags.every_row, "List every run, not groups of runs");
  return cmd;
}

CLI::App* add_trace_command(CLI::App& app, TraceFlags& flags) {
  auto* cmd = app.add_subcommand("trace", "Generate a trace");
  add_generator_options(cmd, flags.spec, true);
  cmd->add_option("--out", flags.out, "Output CSV ('-' for stdout)")->required();
  return cmd;
}

// ------------------------------------------------------------------ inputs

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

// Every finished run of an experiment, so long ones show they move.
ExperimentOptions on_all_cores() {
  ExperimentOptions options;
  options.progress = [](std::string_view line) { std::cerr << "oobleck-sim: " << line << "\n"; };
  return options;
}

struct Inputs {
  Profile profile;
  Scenario scenario;
};

Inputs load_inputs(const std::string& profile_path, const std::string& scenario_path) {
  Inputs in{load_profile(profile_path), {}};
  if (!scenario_path.empty()) in.scenario = parse_scenario(read_text_file(scenario_path), scenario_path);
  return in;
}

// The trace file, or the generated traces, that --trace, --generate and
// --seeds ask for.
TraceSet trace_set_of(const ExperimentFlags& flags, const Profile& profile) {
  const bool generated = !flags.spec.kind.empty();
  if (generated == !flags.trace_path.empty()) throw InputError("give either --trace FILE or --generate KIND");
  if (flags.seeds > 0 && !generated) throw InputError("--seeds: needs --generate (a trace file has no randomness)");
  TraceSet traces;
  if (!generated) traces.given = std::make_shared<const Trace>(load_trace(flags.trace_path));
  traces.spec = flags.spec;
  traces.runs = generated ? std::max(1, flags.seeds) : 1;
  traces.default_gpus_per_node = profile.hardware.gpus_per_node;
  return traces;
}

// ------------------------------------------------------------------ subcommands

// --node-delay-ms NODE=MS, each NODE a node of the plan and MS a finite
// number from 0.
std::map<std::string, Milliseconds> parse_node_delays(const std::vector<std::string>& given, const Plan& plan) {
  std::map<std::string, Milliseconds> out;
  std::vector<std::string> nodes = plan.spare_nodes;
  for (const auto& p : plan.pipelines) nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
  for (const auto& item : given) {
    const auto eq = item.find('=');
    const std::string node = item.substr(0, eq);
    const std::string shown = "--node-delay-ms " + quoted_excerpt(item);
    if (eq == std::string::npos || node.empty()) throw InputError(shown + ": expected NODE=MS");
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end())
      throw InputError(shown + ": node " + excerpt(node) + " is not in the plan");
    double ms = 0;
    const std::string value = item.substr(eq + 1);
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(ms) || ms < 0 || ms > 1e9)
      throw InputError(shown + ": expected milliseconds from 0 after '='");
    if (!out.emplace(node, ms).second) throw InputError(shown + ": node " + excerpt(node) + " given twice");
  }
  return out;
}

int run_iteration(const IterationFlags& flags) {
  require_output_path("--json", flags.json_out);
  require_output_path("--chrome-trace", flags.chrome_out);
  const Inputs in = load_inputs(flags.profile_path, flags.scenario_path);
  const Plan plan = parse_plan(read_text_file(flags.plan_path), flags.plan_path, in.profile);
  CostModel cost(in.profile, std::max(1, plan.template_microbatches));
  cost.set_pipelines_per_node(plan.pipelines_per_node);
  IterationOptions options;
  options.optimizer_bytes_per_s = device_memory_bytes_per_s(in.scenario.cluster, in.profile.hardware);
  options.record_ops = !flags.chrome_out.empty();
  options.gradient_scale = flags.gradient_scale;
  options.shared_device = flags.shared_device;
  options.tied_embedding = flags.tied_embedding;
  options.gradient_sync = plan.gradient_sync;
  options.gradient_bucket_bytes = plan.gradient_bucket_bytes;
  options.gradient_norm = flags.gradient_norm;
  options.node_send_delay_ms = parse_node_delays(flags.node_delays, plan);
  const IterationResult result = simulate_iteration(cost, plan, options);
  if (!flags.chrome_out.empty()) cli::emit(flags.chrome_out, chrome_trace_json(result, plan, in.profile));
  if (cli::emit(flags.json_out, iteration_to_json(result, plan))) return 0;
  std::printf("iteration: %.2f ms simulated op by op (the planner's formula: %.2f ms)\n", result.iteration_ms,
              plan.iteration_ms);
  std::printf("  last backward ends at %.2f ms; gradient all-reduce exposed after it: %.2f ms\n",
              result.last_backward_ms, result.sync_exposed_ms);
  // Node: its name and its position in the pipeline (stages sharing a node
  // share both); TP: the tensor-parallel degree, the stage's GPUs.
  std::printf("  %-8s %-5s %-12s %4s %-10s %3s %12s %12s %12s %12s\n", "pipeline", "stage", "node", "pos", "layers",
              "TP", "compute ms", "TP AR ms", "optimizer ms", "idle ms");
  for (const auto& s : result.stages) {
    const Stage& st = plan.pipelines[s.pipeline].stages[s.stage];
    const std::string layers = "[" + std::to_string(st.layer_begin) + "," + std::to_string(st.layer_end) + ")";
    // A stage over several nodes: "node0+2" (its first node and how many more).
    const std::string node = st.node_span > 1 ? s.node + "+" + std::to_string(st.node_span - 1) : s.node;
    std::printf("  %-8d %-5d %-12s %4d %-10s %3d %12.2f %12.2f %12.2f %12.2f\n", s.pipeline, s.stage, node.c_str(),
                s.node_index, layers.c_str(), s.gpus, s.compute_ms, s.tp_allreduce_ms, s.optimizer_ms, s.idle_ms);
  }
  const bool tensor_parallel =
      std::any_of(result.stages.begin(), result.stages.end(), [](const StageTimes& s) { return s.gpus > 1; });
  if (tensor_parallel) {
    std::printf("  (TP AR: the tensor-parallel all-reduces inside the node, or over the nodes of a stage that spans "
                "several, 2 per split layer and pass)\n");
  }
  if (!flags.chrome_out.empty()) {
    std::printf("Chrome trace: %s (open it in https://ui.perfetto.dev)\n", flags.chrome_out.c_str());
  }
  return 0;
}

// One trace: the timeline, the plot, the JSON or the summary table. True
// when the JSON went to stdout.
bool replay_one(const ReplayFlags& flags, const Inputs& in, const Trace& trace, const ReplayOptions& options) {
  const ReplayResult result = replay(in.profile, trace, options, in.scenario, progress_printer("oobleck-sim"));
  if (!flags.timeline_out.empty()) cli::emit(flags.timeline_out, timeline_csv(result));
  if (!flags.decisions_out.empty()) cli::emit(flags.decisions_out, decisions_jsonl(result));
  if (!flags.plot_out.empty()) {
    cli::emit(flags.plot_out, timeline_svg(result, in.profile.model_name + " on " + trace.origin +
                                                       ", f = " + std::to_string(options.fault_tolerance) +
                                                       ", B = " + std::to_string(options.global_microbatches)));
  }
  if (cli::emit(flags.experiment.json_out, replay_to_json(result))) return true;
  std::printf("%s: %zu events over %.2f h, peak %d nodes; %s, f = %d, B = %d (%d samples per iteration)\n",
              trace.origin.c_str(), trace.events.size(), trace.duration_ms() / 3.6e6, trace.peak_nodes(),
              in.profile.model_name.c_str(), options.fault_tolerance, options.global_microbatches,
              result.samples_per_iteration);
  std::cout << summary_table(result);
  return false;
}

int run_replay(const ReplayFlags& flags) {
  require_output_path("--json", flags.experiment.json_out);
  require_output_path("--timeline", flags.timeline_out);
  require_output_path("--plot", flags.plot_out);
  require_output_path("--decisions", flags.decisions_out);
  const Inputs in = load_inputs(flags.experiment.profile_path, flags.experiment.scenario_path);
  const TraceSet traces = trace_set_of(flags.experiment, in.profile);
  const auto start = Clock::now();
  ReplayOptions options;
  options.fault_tolerance = flags.fault_tolerance;
  options.global_microbatches = flags.experiment.global_microbatches;
  options.policies = parse_policies(flags.policies);
  options.stragglers = parse_straggler_handlings(flags.stragglers.empty() ? "all" : flags.stragglers);
  options.record_decisions = !flags.decisions_out.empty();
  options.recompute = *recompute_policy_named(flags.recompute);
  options.tensor_parallel_nodes = flags.tensor_parallel_nodes;
  options.interleave = flags.interleave;
  options.pipelines_per_node = cli::parse_pipelines_per_node(flags.pipelines_per_node, in.profile.hardware.gpus_per_node);
  options.gradient_sync = flags.gradient_sync.sync();
  options.gradient_bucket_bytes = flags.gradient_sync.bucket_bytes();
  const auto runs = [&](Policy p) {
    return std::find(options.policies.begin(), options.policies.end(), p) != options.policies.end();
  };
  if (options.record_decisions && !runs(Policy::oobleck) && !runs(Policy::oobleck_snapshots)) {
    throw InputError("--decisions: the oobleck or oobleck-snapshots policy's, but --policy leaves both out");
  }
  if (traces.runs == 1) {
    if (replay_one(flags, in, *traces.trace_for_run(0), options)) return 0;
  } else {
    if (!flags.timeline_out.empty() || !flags.plot_out.empty() || !flags.decisions_out.empty()) {
      throw InputError("--timeline, --plot and --decisions: one trace only (no --seeds)");
    }
    const SeedsSummary summary = replay_seeds(in.profile, traces, options, in.scenario, on_all_cores());
    if (cli::emit(flags.experiment.json_out, seeds_to_json(summary))) return 0;
    std::cout << seeds_summary_table(summary);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cerr << "oobleck-sim: replayed in " << seconds << " s\n";
  return 0;
}

int run_sweep(const SweepFlags& flags) {
  require_output_path("--json", flags.experiment.json_out);
  const Inputs in = load_inputs(flags.experiment.profile_path, flags.experiment.scenario_path);
  const TraceSet traces = trace_set_of(flags.experiment, in.profile);
  SweepOptions options;
  options.fault_tolerances = parse_fault_tolerances(flags.fault_tolerances, "--fault-tolerance");
  options.checkpoint_intervals = parse_checkpoint_intervals(flags.checkpoint_intervals, "--checkpoint-interval");
  options.global_microbatches = flags.experiment.global_microbatches;
  const SweepResult result = sweep(in.profile, traces, options, in.scenario, on_all_cores());
  if (cli::emit(flags.experiment.json_out, sweep_to_json(result))) return 0;
  std::cout << sweep_summary_table(result);
  return 0;
}

int run_trace(const TraceFlags& flags) {
  require_output_path("--out", flags.out);
  const Trace trace = generate_trace(flags.spec, flags.spec.seed, kDefaultGpusPerNode);
  if (cli::emit(flags.out, trace_to_csv(trace))) return 0;
  const auto removes = std::count_if(trace.events.begin(), trace.events.end(),
                                     [](const TraceEvent& e) { return e.change == NodeChange::remove; });
  const auto slowdowns = std::count_if(trace.events.begin(), trace.events.end(), [](const TraceEvent& e) {
    return e.change == NodeChange::slow && e.factor < 1;
  });
  std::cout << "Wrote " << trace.events.size() << " events (" << removes << " removals, " << slowdowns
            << " slowdowns, peak " << trace.peak_nodes() << " nodes, " << trace.duration_ms() / 3.6e6 << " h) to "
            << flags.out << "\n";
  return 0;
}

int run_validate(const ValidateFlags& flags) {
  require_output_path("--json", flags.json_out);
  const validation::Suite suite = validation::load_suite(flags.suite);
  const auto start = Clock::now();
  const auto hardware = executor::load_hardware(suite.hardware);
  const auto calibration = validation::calibrate(suite, hardware, progress_printer("oobleck-sim"));
  const auto result = validation::validate(suite, calibration);
  if (!cli::emit(flags.json_out, validation::validation_to_json(result))) {
    std::cout << validation::validation_report(result, flags.every_row);
  }
  std::cerr << "oobleck-sim: validated in " << std::chrono::duration<double>(Clock::now() - start).count()
            << " s\n";
  if (!result.within_bounds()) {
    std::cerr << "oobleck-sim: validation errors beyond the bounds in " << flags.suite << "\n";
    return kExitFailure;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-sim: simulate training iterations and replay failure traces with recovery policies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oobleck-sim " OOBLECK_VERSION);
  IterationFlags iteration_flags;
  ReplayFlags replay_flags;
  SweepFlags sweep_flags;
  TraceFlags trace_flags;
  ValidateFlags validate_flags;
  const auto* iteration_cmd = add_iteration_command(app, iteration_flags);
  const auto* replay_cmd = add_replay_command(app, replay_flags);
  const auto* sweep_cmd = add_sweep_command(app, sweep_flags);
  const auto* validate_cmd = add_validate_command(app, validate_flags);
  add_trace_command(app, trace_flags);

  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  return cli::run_reporting_errors("oobleck-sim", [&]() -> int {
    if (*iteration_cmd) return run_iteration(iteration_flags);
    if (*replay_cmd) return run_replay(replay_flags);
    if (*sweep_cmd) return run_sweep(sweep_flags);
    if (*validate_cmd) return run_validate(validate_flags);
    return run_trace(trace_flags);
  });
}
