// Replaying a trace: the cluster gains and loses nodes as the trace says and
// each recovery policy trains through it. Every cost comes from the profile,
// the planner's plans and a small cluster description; every derived
// constant can be overridden by a scenario file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/trace.h"

namespace oobleck::sim {

// oobleck_snapshots: oobleck whose fall-back past f restores the newest
// snapshot in the nodes' host memory (own, then mirrored) before the disk
// checkpoint, as the live executor does.
enum class Policy { oobleck, checkpoint, inmemory, bamboo, oobleck_snapshots };
inline constexpr Policy kAllPolicies[] = {Policy::oobleck, Policy::checkpoint, Policy::inmemory, Policy::bamboo,
                                          Policy::oobleck_snapshots};
[[nodiscard]] std::string_view policy_name(Policy policy);
// "oobleck,checkpoint" or "all"; the message names the flag on a bad name.
[[nodiscard]] std::vector<Policy> parse_policies(std::string_view list);

// What a policy does about a straggler (a trace's slow events):
//   ignore:   nothing; every iteration waits for the slow node (the plan
//             priced at the nodes' speeds);
//   evict:    once detected, the slow node leaves as if lost (the policy's
//             own recovery) and joins again when it recovers;
//   mitigate: oobleck's: once detected, the recovery controller weighs
//             keeping the plan, re-splitting the batch and re-planning
//             (recovery/controller.h), as a live run does. Only the oobleck
//             policies have it.
enum class StragglerHandling { ignore, evict, mitigate };
inline constexpr StragglerHandling kAllStragglerHandlings[] = {StragglerHandling::ignore, StragglerHandling::evict,
                                                               StragglerHandling::mitigate};
[[nodiscard]] std::string_view straggler_handling_name(StragglerHandling handling);
// "ignore,evict" or "all"; the message names --stragglers on a bad name.
[[nodiscard]] std::vector<StragglerHandling> parse_straggler_handlings(std::string_view list);
[[nodiscard]] bool policy_mitigates(Policy policy);

// The cluster around the GPUs, with defaults for an A100-class cluster.
struct Cluster {
  double storage_bytes_per_s = 50e9;        // aggregate, to and from a parallel file system
  Milliseconds detection_ms = 10'000;       // a lost node is noticed after this
  Milliseconds restart_ms = 90'000;         // relaunching every process
  Milliseconds communicator_ms = 5'000;     // building the collective communicators
  double host_copy_bytes_per_s = 20e9;      // device to host, per GPU (each over its own PCIe link)
  // The optimizer step streams the state at this (0: not played); unset:
  // device_memory_bytes_per_s() below.
  std::optional<double> device_memory_bytes_per_s;
  double network_bytes_per_s = 25e9;        // per node, host memory to another node's (snapshot mirrors)
  Milliseconds straggler_detection_ms = 30'000;  // a slow node is flagged after this (evict, mitigate)
};

// Without a profile's rate, an A100-class GPU's (HBM2e at what an AdamW
// step reaches).
inline constexpr double kDefaultDeviceMemoryBytesPerS = 1.5e12;
// The rate simulated optimizer steps stream weights and optimizer state at:
// the cluster's where a scenario sets it, else the profile's
// hardware.memory_bytes_per_s (what the planner prices), else
// kDefaultDeviceMemoryBytesPerS.
[[nodiscard]] double device_memory_bytes_per_s(const Cluster& cluster, const Hardware& hardware);

// The live executor's defaults (oobleck-run --snapshot-every, --mirror-every).
inline constexpr int kDefaultSnapshotEveryIterations = 1;
inline constexpr int kDefaultMirrorEveryIterations = 4;

// Overrides of derived constants; unset ones are derived.
struct Overrides {
  std::optional<Milliseconds> iteration_ms;                 // every plan's iteration time
  // The iteration time of a plan by the nodes it trains on, as published
  // tables give it (instead of iteration_ms). Between two listed counts
  // linear; beyond the table, the nearest count's throughput per node.
  std::map<int, Milliseconds> iteration_ms_by_nodes;
  std::optional<int> checkpoint_interval_iterations;        // all checkpointing policies
  std::optional<Milliseconds> checkpoint_save_ms;
  std::optional<Milliseconds> checkpoint_load_ms;
  std::optional<Milliseconds> oobleck_copy_ms;              // per reconfiguration, instead of the planner's copies
  std::optional<Milliseconds> inmemory_save_ms;             // per iteration
  std::optional<Milliseconds> inmemory_restore_ms;
  std::optional<double> bamboo_slowdown;                    // iteration time factor of redundant computation
  std::optional<Milliseconds> bamboo_failover_ms;
  std::optional<Milliseconds> bamboo_rebalance_ms;          // re-forming the pipelines, state from memory
  // oobleck-snapshots: snapshots into host memory every K iterations (0:
  // none), mirrored to the next node every M (a multiple of K; 0: never).
  std::optional<int> snapshot_every_iterations;
  std::optional<int> mirror_every_iterations;
  std::optional<Milliseconds> snapshot_stall_ms;            // per iteration, instead of the derived stall
  std::optional<Milliseconds> snapshot_restore_memory_ms;   // a rollback to snapshots in the nodes' own memory
  std::optional<Milliseconds> snapshot_restore_mirror_ms;   // ... with pieces from mirrors
  std::optional<Milliseconds> snapshot_restore_disk_ms;     // ... to the disk checkpoint
};

struct Scenario {
  Cluster cluster;
  Overrides overrides;  // for every policy
  // For one policy, over `overrides`: a field set here replaces the common
  // one (either iteration setting replaces both common ones).
  std::map<Policy, Overrides> policy_overrides;
  [[nodiscard]] Overrides overrides_for(Policy policy) const;
};

// The iteration time `overrides` gives a plan training on `nodes` nodes, if any.
[[nodiscard]] std::optional<Milliseconds> overridden_iteration_ms(const Overrides& overrides, int nodes);

// A JSON object with optional `cluster`, `overrides` and `policy_overrides`
// (policy name -> the keys of `overrides`) sections whose keys are the
// fields above; unknown keys and wrong types are errors that name the file
// and the field.
[[nodiscard]] Scenario parse_scenario(std::string_view json_text, const std::string& origin);

struct ReplayOptions {
  int fault_tolerance = 1;
  int global_microbatches = 1;
  std::vector<Policy> policies = {std::begin(kAllPolicies), std::end(kAllPolicies)};
  // When false, policies run one after another (results are identical).
  bool parallel = true;
  // Keep the oobleck policies' decisions (PolicyResult::decisions).
  bool record_decisions = false;
  // What the templates every policy plans with may choose (oobleck-plan --recompute).
  RecomputePolicy recompute = RecomputePolicy::none;
  // How many whole nodes one stage may span (oobleck-plan --tensor-parallel-nodes).
  int tensor_parallel_nodes = 1;
  // Model chunks a device may hold (oobleck-plan --interleave): the plans
  // of every policy but Bamboo's (whose redundant computation pairs a node
  // with its successor's stages) may interleave where that plays faster.
  int interleave = 1;
  // Pipelines sharing each node (oobleck-plan --pipelines-per-node; 0:
  // every divisor of G, the fastest kept): likewise for every policy but
  // Bamboo's, whose pipelines stay on whole nodes.
  // With either, mitigating stragglers keeps or drops slow nodes: splits
  // and placements at node speeds are of plain pipelines on whole nodes.
  int pipelines_per_node = 1;
  // When the gradients are all-reduced, as every policy's plans assume and
  // its iterations are played (oobleck-plan --gradient-sync).
  GradientSync gradient_sync = GradientSync::per_layer;
  double gradient_bucket_bytes = kDefaultGradientBucketBytes;
  // With a trace that slows nodes down: each policy is replayed once per
  // handling here that it has (mitigate: the oobleck policies only);
  // without, once, as ignore.
  std::vector<StragglerHandling> stragglers = {std::begin(kAllStragglerHandlings), std::end(kAllStragglerHandlings)};
};

struct TimeBreakdown {
  Milliseconds training_ms = 0;
  Milliseconds reconfiguration_ms = 0;
  Milliseconds restart_ms = 0;
  Milliseconds checkpoint_ms = 0;
  Milliseconds lost_work_ms = 0;
  Milliseconds waiting_ms = 0;
  [[nodiscard]] Milliseconds total_ms() const {
    return training_ms + reconfiguration_ms + restart_ms + checkpoint_ms + lost_work_ms + waiting_ms;
  }
};

// One point of the timeline: from time_ms on, until the next point.
struct TimelinePoint {
  Milliseconds time_ms = 0;
  int nodes = 0;       // present in the cluster
  int pipelines = 0;   // training; 0 while down
  double samples_per_s = 0;
};

struct PolicyResult {
  Policy policy = Policy::oobleck;
  StragglerHandling stragglers = StragglerHandling::ignore;
  bool runnable = true;
  std::string reason;  // why it cannot run, when it cannot
  double samples = 0;
  double samples_per_s = 0;
  double goodput = 0;  // training time / duration
  TimeBreakdown time;
  int failures = 0;          // losses of nodes that were training
  int reconfigurations = 0;
  int restarts = 0;
  int unrecoverable = 0;     // losses that forced a fall back to a checkpoint (or a snapshot)
  // oobleck and oobleck-snapshots: microbatches of steps in flight at a
  // loss that pipelines the new plan left as they were kept, not trained
  // again (recovery/step_shares.h).
  int kept_microbatches = 0;
  int checkpoint_interval_iterations = 0;  // 0: none taken
  Milliseconds checkpoint_save_ms = 0;
  // oobleck-snapshots: the snapshot intervals, and where each rollback
  // past f (counted in `unrecoverable`) took its state from.
  int snapshot_every_iterations = 0, mirror_every_iterations = 0;
  int rollbacks_from_memory = 0, rollbacks_from_mirror = 0, rollbacks_from_checkpoint = 0;
  std::vector<TimelinePoint> timeline;
  // oobleck and oobleck-snapshots, with ReplayOptions::record_decisions:
  // every generation it started, as the JSON record a live run's metrics
  // carry too.
  std::vector<std::string> decisions;
};

// The policy's name, and the handling's after a '+' unless it is ignore
// ("oobleck+mitigate"): the result's name in every output.
[[nodiscard]] std::string result_name(const PolicyResult& result);

struct ReplayResult {
  Milliseconds duration_ms = 0;
  int samples_per_iteration = 0;
  std::vector<PolicyResult> policies;
};

[[nodiscard]] ReplayResult replay(const Profile& profile, const Trace& trace, const ReplayOptions& options,
                                  const Scenario& scenario = {}, const Progress& progress = {});

[[nodiscard]] std::string replay_to_json(const ReplayResult& result);
// `policy,time_s,nodes,pipelines,samples_per_s`, one row per timeline point.
[[nodiscard]] std::string timeline_csv(const ReplayResult& result);
// Throughput and node count over time for every policy, self-contained SVG.
[[nodiscard]] std::string timeline_svg(const ReplayResult& result, const std::string& title);
// The oobleck policy's decisions (with ReplayOptions::record_decisions), or
// oobleck-snapshots' when oobleck did not run: one JSON line per generation
// it started.
[[nodiscard]] std::string decisions_jsonl(const ReplayResult& result);
// The human summary: one row per policy.
[[nodiscard]] std::string summary_table(const ReplayResult& result);

}  // namespace oobleck::sim
