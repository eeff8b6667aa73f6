// What a live run tells people (stdout, stderr) and scripts (--metrics:
// JSON lines, each with a `kind`):
//   {kind: "run", format: "oobleck.metrics.v1", plan, profile, steps, seed, nodes}   first
//   {kind: "generation", ...}      each generation the recovery controller started
//                                  (recovery::generation_record, as oobleck-sim --decisions)
//   {kind: "step", step, loss, samples, step_samples, iteration_ms, elapsed_ms, generation,
//    node_speeds: {node: factor}, predicted_ms}   (each node's speed measured, relative to its
//                                  peers, and the cost model's iteration at those speeds on this
//                                  machine's scale; both absent on a generation's first step)
//   {kind: "speeds", ...}          node speeds weighed at a commit (recovery::speeds_record)
//   {kind: "reconfiguration", generation, lost, added, reasons, resume_step, pipelines,
//    detect_ms, plan_ms, held_ms, communicators_ms, copy_ms, copy_bytes, resume_ms, recovery_ms,
//    kept_microbatches, held_timed_out, superseded}   (kept_microbatches: of the resumed step, not
//                                  trained again; held_ms: the wait for their pipelines' passes)
//   {kind: "restart", generation, node, gpu, resume_step, detect_ms, restore_ms, recovery_ms}
//                                  a worker restarted in place (no new generation)
//   {kind: "rollback", generation, from_step, to_step, source}   past f
//   {kind: "no_plan", generation, lost, added, resume_step, checkpoint_bytes, message}
//   {kind: "master_restart", at_ms, resumed_after_step, state_dir, unix_ms}
//                                  a master restarted with --resume-master goes on
//                                  appending to the same file
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oobleck/recovery/events.h"

namespace oobleck::executor {

// How one generation's recovery went.
struct RecoveryTiming {
  int generation = 0;
  std::vector<std::string> lost, added;
  std::map<std::string, std::string> reasons;  // how each loss was noticed
  int resume_step = 0;
  std::string pipelines;         // "3+2"
  Milliseconds failure_ms = -1;  // the earliest failure it recovers from (-1: none, a join)
  Milliseconds detected_ms = 0, planned_ms = 0, plan_ms = 0;
  int recovered = 0;                         // workers that rebuilt and copied
  Milliseconds rebuild_ms = 0, copy_ms = 0;  // the slowest worker's
  std::int64_t copy_bytes = 0;
  // The wait for pipelines that keep the resumed step's sums to finish their
  // passes before the generation was sent, and the microbatches they kept.
  Milliseconds held_ms = 0;
  // It went without some pipeline it would have waited for (the wait's
  // deadline, or a recovery in progress).
  bool held_timed_out = false;
  int kept_microbatches = 0;
};

// How an in-place restart went: from the crash to its detection (the
// agent's word), to every worker having its state and communicators again,
// and to the next committed step.
struct RestartTiming {
  int generation = 0, gpu = 0, resume_step = 0;
  std::string node;
  bool standby = false;  // a standby worker took its place
  Milliseconds crash_ms = -1, detected_ms = 0, restored_ms = -1;
  // Within the restore: the new worker's hello (its process up), and the
  // new worker's communicators and read of its layers from its agent's
  // memory.
  Milliseconds hello_ms = -1, communicators_ms = 0, read_ms = 0;
};

struct StepReport {
  int step = 0, generation = 0;
  double loss = 0;
  std::int64_t samples = 0, step_samples = 0;
  Milliseconds iteration_ms = 0, elapsed_ms = 0;
  NodeSpeeds node_speeds;  // each node's measured speed factor (none on a generation's first step)
  // The cost model's iteration at those speeds, scaled by the median node's
  // measured compute against the profile's (-1: not measured).
  Milliseconds predicted_ms = -1;
};

class Reporter {
 public:
  // No metrics file when `metrics_path` is empty. InputError when it cannot
  // be written. With `resumed_after` (a restarted master's: the record of
  // the last step its predecessor committed, "" before any), the file is
  // appended to: a line cut short by the death is dropped, and the last
  // committed step's record added when the death came before it was
  // written, so that every committed step is recorded once.
  explicit Reporter(const std::string& metrics_path, const std::optional<std::string>& resumed_after = std::nullopt);

  void run_started(const std::string& plan_path, const std::string& profile_path, int steps, std::uint64_t seed,
                   int nodes);
  void generation_started(const recovery::Generation& g, Milliseconds elapsed_ms);
  void step(const StepReport& report);
  // The metrics line of a step (what step() writes).
  [[nodiscard]] static std::string step_record(const StepReport& report);
  void master_restarted(Milliseconds elapsed_ms, int committed_step, const std::string& state_dir,
                        double unix_ms);
  // A recovery is over: it trained a step, or a newer generation replaced it.
  void reconfiguration(const RecoveryTiming& timing, bool superseded, Milliseconds now_ms);
  void restart(const RestartTiming& timing, Milliseconds now_ms);
  void speeds(const recovery::SpeedsWeighed& w, Milliseconds elapsed_ms);
  // What the planner could not recover from, and what a checkpoint would
  // need to hold to go on (the message, also returned).
  std::string no_plan(int generation, const recovery::GiveUp& g, int layers, std::int64_t state_bytes,
                      std::uint64_t seed);

 private:
  void emit(const std::string& line);
  std::ofstream metrics_;
};

// "a,b" ("-" when empty).
[[nodiscard]] std::string joined(const std::vector<std::string>& names);

}  // namespace oobleck::executor
