// oobleck-plan: pipeline templates, instantiation and reconfiguration plans.
//
// Exit status: 0 success, 2 bad input, 3 no plan exists (restore from a
// checkpoint), 1 anything unexpected.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "cli_io.h"
#include "gradient_sync_flags.h"
#include "pipelines_per_node_flag.h"
#include "plan_tables.h"
#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/planner.h"

namespace {

using namespace oobleck;
using namespace oobleck::plan_tables;
using Clock = std::chrono::steady_clock;

// Instantiation time grows with nodes x pipelines; past this it takes seconds.
constexpr std::size_t kMaxNodes = 16384;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Progress on stderr, at most every half second, for searches that take a while.
Progress throttled_progress() {
  auto last = std::make_shared<Clock::time_point>(Clock::now());
  return [last](std::string_view line) {
    if (Clock::now() - *last < std::chrono::milliseconds(500)) return;
    *last = Clock::now();
    std::cerr << "oobleck-plan: " << line << "\n";
  };
}

// JSON to a file (atomically) or to stdout for "-"; true when the human
// summary should be skipped (JSON went to stdout). Made only when asked
// for: a 2,048-node plan's took a tenth of the command's time.
template <typename MakeJson>
bool emit_json(const std::string& target, const MakeJson& make_json) {
  if (target.empty()) return false;
  if (cli::emit(target, make_json())) return true;
  std::cerr << "oobleck-plan: wrote " << target << "\n";
  return false;
}

// `make` timed: a line on stderr when it takes over a second.
template <typename Make>
TemplateSet timed(const Make& make, int max_nodes) {
  const auto start = Clock::now();
  TemplateSet templates = make();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (seconds > 1) std::cerr << "oobleck-plan: templates for up to " << max_nodes << " nodes in " << seconds << " s\n";
  return templates;
}

TemplateSet timed_templates(const CostModel& cost, int max_nodes) {
  return timed([&] { return build_templates(cost, max_nodes, throttled_progress()); }, max_nodes);
}

// The profile a planning subcommand reads; what an import had to assume goes
// to stderr.
Profile load_reported_profile(const std::string& path) {
  Profile profile = load_profile(path);
  if (profile.source == "imported-oobleck") {
    for (const auto& note : profile.notes) std::cerr << "oobleck-plan: assumed " << note << "\n";
  }
  return profile;
}

// ------------------------------------------------------------ templates

// --recompute: which stages may recompute their activations.
void add_recompute_option(CLI::App* cmd, std::string& policy) {
  cmd->add_option("--recompute", policy,
                  "Activation recomputation: none, auto (each stage recomputes where that makes the template "
                  "fit or faster, selectively or fully), selective (every stage runs its attention cores again "
                  "in the backward) or full (every stage runs its forward again)")
      ->check(CLI::IsMember({"none", "auto", "selective", "full"}));
}

RecomputePolicy recompute_policy(const std::string& name) { return *recompute_policy_named(name); }

// --tensor-parallel-nodes: how many whole nodes one stage may span.
void add_tensor_parallel_nodes_option(CLI::App* cmd, int& nodes) {
  cmd->add_option("--tensor-parallel-nodes", nodes,
                  "Let a stage span up to this many whole nodes, tensor-parallel over all their GPUs (default 1: "
                  "a stage stays inside a node)")
      ->check(CLI::Range(1, kMaxTensorParallelNodes));
}

// --interleave: model chunks a device may hold.
void add_interleave_option(CLI::App* cmd, int& chunks) {
  cmd->add_option("--interleave", chunks,
                  "V: let a template give each device 2 to V model chunks (interleaved 1F1B, as Megatron's "
                  "virtual stages) where that plays faster (default 1: never)")
      ->check(CLI::Range(1, 64));
}

// --threads: how many threads the template search may use (kThreadsUnset:
// not given).
constexpr int kThreadsUnset = -1;
void add_threads_option(CLI::App* cmd, int& threads) {
  cmd->add_option("--threads", threads,
                  "Threads for the template search: N finish node counts' templates side by side (local moves, "
                  "interleaved layouts) and share a stage count's rows, which pays only on cores nothing else is "
                  "busy on; 0: the machine's cores, up to 8. Default: rows on one thread, node counts on the "
                  "machine's cores (up to 8). The result does not depend on it")
      ->check(CLI::Range(0, 256));
}

// The search's threads as --threads says (add_threads_option).
void apply_threads_option(int threads) {
  set_search_threads(threads == kThreadsUnset ? 1 : threads);
  set_finishing_threads(threads == kThreadsUnset ? 0 : threads);
}

struct TemplatesFlags {
  std::string profile_path, json_out, recompute = "none";
  int max_nodes = 0, microbatches = 0, tensor_parallel_nodes = 1, interleave = 1, threads = kThreadsUnset;
};

CLI::App* add_templates(CLI::App& app, TemplatesFlags& f) {
  auto* cmd = app.add_subcommand("templates", "Optimal pipeline template for every node count");
  cmd->add_option("--profile", f.profile_path, "Profile JSON (oobleck.profile.v1) or Oobleck profile folder")
      ->required();
  cmd->add_option("--max-nodes", f.max_nodes, "Largest node count")->required()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--microbatches", f.microbatches,
                  "Microbatches M the templates are optimised for (default: the largest possible stage "
                  "count, so every stage holds its full 1F1B load)")
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--json", f.json_out, "Write JSON here ('-' for stdout)");
  add_recompute_option(cmd, f.recompute);
  add_tensor_parallel_nodes_option(cmd, f.tensor_parallel_nodes);
  add_interleave_option(cmd, f.interleave);
  add_threads_option(cmd, f.threads);
  return cmd;
}

int run_templates(const TemplatesFlags& f) {
  apply_threads_option(f.threads);
  const Profile profile = load_reported_profile(f.profile_path);
  const int m = f.microbatches > 0 ? f.microbatches : default_template_microbatches(profile, f.max_nodes);
  CostModel cost(profile, m);
  cost.set_recompute(recompute_policy(f.recompute));
  cost.set_tensor_parallel_nodes(f.tensor_parallel_nodes);
  cost.set_interleave(f.interleave);
  const TemplateSet templates = timed_templates(cost, f.max_nodes);
  if (emit_json(f.json_out, [&] { return templates_to_json(templates, profile); })) return 0;
  print_profile_header(profile);
  print_templates(templates);
  return 0;
}

// ------------------------------------------------------------ instantiate

struct InstantiateFlags {
  std::vector<std::string> profile_paths;
  std::string json_out, hostfile, recompute = "none";
  cli::GradientSyncFlags gradient_sync;
  int nodes = 0, fault_tolerance = -1, global_microbatches = 0, global_batch = 0, microbatches = 0;
  int tensor_parallel_nodes = 1, interleave = 1, threads = kThreadsUnset;
  std::string pipelines_per_node = "1";
  std::vector<std::string> node_speeds;  // NAME=FACTOR
};

// --node-speed NAME=FACTOR, each; InputError naming the bad one.
NodeSpeeds parse_node_speeds(const std::vector<std::string>& given) {
  NodeSpeeds out;
  for (const auto& item : given) {
    const auto equals = item.find('=');
    char* end = nullptr;
    const double factor = equals == std::string::npos ? 0 : std::strtod(item.c_str() + equals + 1, &end);
    if (equals == std::string::npos || equals == 0 || end == item.c_str() + equals + 1 || *end != '\0') {
      throw InputError("--node-speed " + quoted_excerpt(item) + ": expected NAME=FACTOR, for example node3=0.5");
    }
    if (!out.emplace(item.substr(0, equals), factor).second) {
      throw InputError("--node-speed: node \"" + item.substr(0, equals) + "\" given twice");
    }
  }
  return out;
}

void print_node_speeds(const NodeSpeeds& speeds) {
  if (speeds.empty()) return;
  std::printf("Node speeds (the plan and times above are chosen at them):");
  for (const auto& [node, speed] : speeds) std::printf(" %s %g", node.c_str(), speed);
  std::printf("\n");
}

CLI::App* add_instantiate(CLI::App& app, InstantiateFlags& f) {
  auto* cmd = app.add_subcommand("instantiate", "Pipelines for N nodes tolerating f failures");
  cmd->add_option("--profile", f.profile_paths,
                  "Profile JSON or Oobleck profile folder; several (one model at different microbatch sizes, "
                  "with --global-batch): the microbatch size is chosen too")
      ->required();
  auto* nodes_opt = cmd->add_option("--nodes", f.nodes, "Node count (names node0..node{N-1})")
                        ->check(CLI::Range(1, static_cast<int>(kMaxNodes)));
  auto* hostfile_opt = cmd->add_option("--hostfile", f.hostfile, "MPI-style hostfile: 'host slots=G' lines");
  nodes_opt->excludes(hostfile_opt);
  cmd->add_option("--fault-tolerance", f.fault_tolerance, "f: node failures to survive (f+1 pipelines)")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  auto* microbatches_opt =
      cmd->add_option("--global-microbatches", f.global_microbatches, "B: microbatches per iteration")
          ->check(CLI::Range(1, 1000000));
  auto* batch_opt = cmd->add_option("--global-batch", f.global_batch,
                                    "Samples per iteration, instead of B: each profile's microbatch size that "
                                    "divides it is planned, the fastest plan wins")
                        ->check(CLI::Range(1, 1 << 30));
  microbatches_opt->excludes(batch_opt);
  cmd->add_option("--microbatches", f.microbatches,
                  "M the templates are optimised for (default: the microbatches the plan's pipelines run, "
                  "found by re-planning from ceil(B / (f+1)))")
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--json", f.json_out, "Write the plan as JSON here ('-' for stdout)");
  cmd->add_option("--node-speed", f.node_speeds,
                  "NAME=FACTOR, repeatable: a node computing at FACTOR of the profile's speed (0.5: half as "
                  "fast); the slowest nodes take each pipeline's lightest stages and the batch is re-split");
  add_recompute_option(cmd, f.recompute);
  cli::add_gradient_sync_options(cmd, f.gradient_sync);
  add_tensor_parallel_nodes_option(cmd, f.tensor_parallel_nodes);
  cmd->add_option("--pipelines-per-node", f.pipelines_per_node, cli::kPipelinesPerNodeHelp);
  add_interleave_option(cmd, f.interleave);
  add_threads_option(cmd, f.threads);
  return cmd;
}

int run_instantiate(const InstantiateFlags& f) {
  apply_threads_option(f.threads);
  if ((f.global_microbatches > 0) == (f.global_batch > 0)) {
    std::cerr << "oobleck-plan instantiate: give --global-microbatches B or --global-batch SAMPLES\n";
    return kExitBadInput;
  }
  if (f.profile_paths.size() > 1 && f.global_batch == 0) {
    std::cerr << "oobleck-plan instantiate: several --profile choose the microbatch size: give the batch as "
                 "--global-batch SAMPLES\n";
    return kExitBadInput;
  }
  if (f.global_batch > 0 && f.microbatches > 0) {
    std::cerr << "oobleck-plan instantiate: --microbatches fixes M for one microbatch size; leave it out with "
                 "--global-batch\n";
    return kExitBadInput;
  }
  std::vector<Profile> profiles;
  for (const auto& path : f.profile_paths) profiles.push_back(load_reported_profile(path));
  const Profile& profile = profiles.front();
  std::vector<std::string> names;
  if (!f.hostfile.empty()) {
    names = parse_hostfile(read_text_file(f.hostfile), f.hostfile, profile.hardware.gpus_per_node);
  } else if (f.nodes > 0) {
    names = numbered_nodes(f.nodes);
  } else {
    std::cerr << "oobleck-plan instantiate: give --nodes N or --hostfile H\n";
    return kExitBadInput;
  }
  if (names.size() > kMaxNodes) {
    std::cerr << "oobleck-plan: error: " << (f.hostfile.empty() ? "--nodes" : f.hostfile) << ": " << names.size()
              << " nodes; at most " << kMaxNodes << " are supported\n";
    return kExitBadInput;
  }
  const auto start = Clock::now();
  const auto report_time = [&] {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (seconds > 1) std::cerr << "oobleck-plan: planned " << names.size() << " nodes in " << seconds << " s\n";
  };
  const NodeSpeeds speeds = parse_node_speeds(f.node_speeds);
  check_node_speeds(speeds, names, "--node-speed");
  const int pipelines_per_node = cli::parse_pipelines_per_node(f.pipelines_per_node, profile.hardware.gpus_per_node);
  if (pipelines_per_node != 1 && !speeds.empty()) {
    std::cerr << "oobleck-plan instantiate: --node-speed plans pipelines on whole nodes: leave out "
                 "--pipelines-per-node\n";
    return kExitBadInput;
  }
  if (f.interleave > 1 && !speeds.empty()) {
    std::cerr << "oobleck-plan instantiate: --node-speed plans pipelines without interleaving: leave out "
                 "--interleave\n";
    return kExitBadInput;
  }
  if (f.global_batch > 0 && !speeds.empty()) {
    std::cerr << "oobleck-plan instantiate: --node-speed takes --global-microbatches B, not --global-batch\n";
    return kExitBadInput;
  }
  if (f.global_batch > 0) {
    std::vector<const Profile*> given;
    for (const auto& p : profiles) given.push_back(&p);
    const SizedClusterPlan sized =
        plan_cluster_over_sizes(given, names, f.fault_tolerance, f.global_batch, throttled_progress(),
                                recompute_policy(f.recompute), f.gradient_sync.sync(),
                                f.gradient_sync.bucket_bytes(), f.tensor_parallel_nodes, pipelines_per_node,
                                f.interleave);
    report_time();
    const Profile& chosen = profiles[sized.chosen];
    if (emit_json(f.json_out, [&] { return sized_plan_to_json(sized, chosen); })) return 0;
    print_profile_header(chosen);
    print_templates(sized.cluster.templates, template_sizes_used(sized.cluster.plan));
    print_plan(sized.cluster.plan);
    print_sizes(sized);
    return 0;
  }
  ClusterPlan result =
      plan_cluster(profile, names, f.fault_tolerance, f.global_microbatches, f.microbatches, throttled_progress(),
                   recompute_policy(f.recompute), f.gradient_sync.sync(), f.gradient_sync.bucket_bytes(),
                   f.tensor_parallel_nodes, pipelines_per_node, f.interleave);
  if (!speeds.empty()) {
    CostModel cost(profile, result.plan.template_microbatches);
    cost.set_recompute(result.plan.recompute);
    cost.set_tensor_parallel_nodes(result.plan.tensor_parallel_nodes);
    cost.set_gradient_sync(result.plan.gradient_sync);
    cost.set_gradient_bucket_bytes(result.plan.gradient_bucket_bytes);
    result.plan = instantiate_at_speeds(cost, result.templates, names, f.fault_tolerance, f.global_microbatches, speeds);
  }
  report_time();
  if (emit_json(f.json_out, [&] { return plan_to_json(result.plan, result.templates, profile); })) return 0;
  print_profile_header(profile);
  print_templates(result.templates, template_sizes_used(result.plan));
  print_plan(result.plan);
  print_node_speeds(speeds);
  return 0;
}

// ------------------------------------------------------------ reconfigure

struct ReconfigureFlags {
  std::string profile_path, json_out, plan_path, lost, added;
  bool replan_all = false;
  std::vector<std::string> node_speeds;  // NAME=FACTOR
};

CLI::App* add_reconfigure(CLI::App& app, ReconfigureFlags& f) {
  auto* cmd = app.add_subcommand("reconfigure", "New plan after nodes are lost or added");
  cmd->add_option("--profile", f.profile_path, "Profile the plan was made from")->required();
  cmd->add_option("--plan", f.plan_path, "Current plan (JSON from instantiate or reconfigure)")->required();
  cmd->add_option("--lost", f.lost, "Comma-separated names of nodes that left");
  cmd->add_option("--added", f.added, "Comma-separated names of nodes that joined");
  cmd->add_option("--json", f.json_out, "Write the new plan and its transfers here ('-' for stdout)");
  cmd->add_flag("--replan-all", f.replan_all,
                "Re-plan every pipeline for the best iteration time (default: keep the pipelines that "
                "lost no node; far less state to copy)");
  cmd->add_option("--node-speed", f.node_speeds,
                  "NAME=FACTOR, repeatable: a surviving node computing at FACTOR of the profile's speed; the "
                  "slowest are left as the spares or take the lightest stages, and the batch is split at the speeds");
  return cmd;
}

int run_reconfigure(const ReconfigureFlags& f) {
  const Profile profile = load_reported_profile(f.profile_path);
  const Plan current = parse_plan(read_text_file(f.plan_path), f.plan_path, profile);
  if (!plan_matches_profile(current, profile)) {
    std::cerr << "oobleck-plan: warning: " << f.plan_path << " was made from a profile with different costs than "
              << f.profile_path << "\n";
  }
  const auto lost_nodes = split_list(f.lost);
  const auto added_nodes = split_list(f.added);
  CostModel cost(profile, current.template_microbatches);
  cost.set_recompute(current.recompute);  // as the plan's templates could choose
  cost.set_tensor_parallel_nodes(current.tensor_parallel_nodes);
  cost.set_gradient_sync(current.gradient_sync);
  cost.set_gradient_bucket_bytes(current.gradient_bucket_bytes);
  cost.set_pipelines_per_node(current.pipelines_per_node);
  cost.set_interleave(current.interleave);
  const TemplateSet templates = timed(
      [&] { return replanning_templates(cost, current, lost_nodes.size(), added_nodes.size(), throttled_progress()); },
      nodes_after(current, lost_nodes.size(), added_nodes.size()));
  ReconfigureOptions options;
  options.replan_all = f.replan_all;
  options.node_speeds = parse_node_speeds(f.node_speeds);
  const Reconfiguration result = reconfigure(cost, templates, current, lost_nodes, added_nodes, options);
  if (emit_json(f.json_out, [&] { return reconfiguration_to_json(result, templates, profile); })) return 0;
  print_profile_header(profile);
  print_reconfiguration(result, templates);
  print_node_speeds(options.node_speeds);
  return 0;
}

// ------------------------------------------------------------ import-oobleck

struct ImportFlags {
  std::string folder, out;
  OobleckImportOptions options;
};

CLI::App* add_import(CLI::App& app, ImportFlags& f) {
  auto* cmd = app.add_subcommand("import-oobleck", "Convert an Oobleck profile folder to oobleck.profile.v1");
  cmd->add_option("folder", f.folder, "Folder with mb{B}.json and allreduce_*.json")->required();
  cmd->add_option("--out", f.out, "Output profile JSON")->required();
  cmd->add_option("--microbatch-size", f.options.microbatch_size, "Which mb{B}.json (default: the only one)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gpus-per-node", f.options.gpus_per_node,
                  "GPUs per node (default: largest group in allreduce_in_node.json)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--gpu-memory-bytes", f.options.gpu_memory_bytes, "Memory per GPU (default 80 GiB)")
      ->check(CLI::Range(Bytes{1}, Bytes{1} << 50));
  cmd->add_option("--optimizer-bytes-per-param-byte", f.options.optimizer_bytes_per_param_byte,
                  "optimizer_bytes as a multiple of param_bytes (default 3: fp32 gradient and AdamW moments)")
      ->check(CLI::Range(0.0, 100.0));
  return cmd;
}

int run_import(const ImportFlags& f) {
  const Profile profile = import_oobleck_profile(f.folder, f.options);
  write_file_atomically(f.out, profile_to_json(profile));
  std::cout << "Imported " << profile.layers.size() << " layers from " << f.folder << " into " << f.out
            << "\nAssumptions:\n";
  for (const auto& note : profile.notes) std::cout << "  - " << note << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oobleck-plan: pipeline templates, instantiation and reconfiguration for resilient training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oobleck-plan " OOBLECK_VERSION);
  TemplatesFlags templates_flags;
  InstantiateFlags instantiate_flags;
  ReconfigureFlags reconfigure_flags;
  ImportFlags import_flags;
  const auto* templates_cmd = add_templates(app, templates_flags);
  const auto* instantiate_cmd = add_instantiate(app, instantiate_flags);
  const auto* reconfigure_cmd = add_reconfigure(app, reconfigure_flags);
  const auto* import_cmd = add_import(app, import_flags);
  if (auto status = cli::parse_command_line(app, argc, argv)) return *status;

  return cli::run_reporting_errors("oobleck-plan", [&]() -> int {
    if (*import_cmd) return run_import(import_flags);
    if (*templates_cmd) return run_templates(templates_flags);
    if (*instantiate_cmd) return run_instantiate(instantiate_flags);
    if (*reconfigure_cmd) return run_reconfigure(reconfigure_flags);
    return 0;
  });
}
