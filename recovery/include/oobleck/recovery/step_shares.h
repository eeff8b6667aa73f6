// The microbatches of the step in flight that each pipeline trains, and what
// a new generation that resumes at that step keeps of them.
//
// A trainer's gradient sums hold the microbatches of its pipeline's passes
// until it begins the next step (the synchronisation only reads them,
// gradient_sync.h), and a trainer that a generation let keep them holds
// those until it trains again. A generation that resumes at the step in
// flight lets a pipeline of the new plan keep them where one running
// pipeline (its source) can give it every layer's sums: all of the
// source's workers are in the new pipeline (it may gain nodes, and its
// stages may be cut anew), each known to hold the same microbatches, and
// the new pipeline holds every layer at the degree the source held it, so
// that each new seat's sums are one source worker's (kept_sum_copies says
// which move). Every layer of the pipeline then counts those microbatches
// once. The microbatches no kept pipeline holds are trained again, split
// among the new plan's pipelines in proportion to their shares of the batch
// (so a pipeline is given at most its own share). The sums are added in
// float64, so which pipeline trains a microbatch, and in which order the
// sums meet, does not change the step's result (the executor's
// model/train_common.h). The simulator plays the same rule (oobleck-snapshots
// and oobleck: a loss during a step keeps the passes of the pipelines that
// lost no node).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::recovery {

using WorkerId = std::pair<std::string, int>;  // (node, GPU)

// The microbatches (of the global batch) each pipeline's sums hold once its
// passes of `step` are over, by pipeline.
struct StepShares {
  int step = -1;  // -1: none known
  std::vector<std::vector<int>> microbatches;
};

// The plan's split: each pipeline the microbatches after the pipelines' before it.
[[nodiscard]] StepShares plan_shares(const Plan& plan, int step);

// What a generation resuming at a step does with it, by pipeline of its plan.
struct CarriedStep {
  std::vector<std::vector<int>> kept;   // held already: not trained again
  std::vector<int> source;              // the running pipeline whose sums each keeps (-1: none)
  std::vector<std::vector<int>> train;  // trained in the resumed step
  // Workers of pipelines that would keep theirs but are not past their
  // passes yet (their passes do not depend on anything that was lost).
  std::set<WorkerId> awaited;
  [[nodiscard]] int kept_count() const;
};

// A kept pipeline's sums that change hands: those of layer `layer` (the
// shard of the receiving seat, of `degree`) from worker `from`, which held
// them in the source pipeline, to worker `to` of the next plan.
struct SumCopy {
  int layer = 0;
  WorkerId from, to;
  int degree = 1;
  friend bool operator==(const SumCopy&, const SumCopy&) = default;
};

// Every sum copy that gives the kept pipelines of `next` their sums, by the
// receivers' ranks, then layers: none where a worker kept the layer's
// shard itself (the same seat, or the layer among its old ones).
[[nodiscard]] std::vector<SumCopy> kept_sum_copies(const Plan& running, const Plan& next, const CarriedStep& carried,
                                                   int gpus_per_node);

// What a worker's sums are known to hold of the step in flight (absent:
// not known yet).
using HeldSums = std::map<WorkerId, std::vector<int>>;

// The step in flight carried from the generation of `running` to one of
// `next` that resumes at it: `held` says what each worker's sums hold of
// it; workers in `settled` will not get further in the running generation
// (restarted, or failed before their passes were over), so a keepable
// pipeline waits (awaited) only for the others.
[[nodiscard]] CarriedStep carry_step(const Plan& running, const HeldSums& held, const std::set<WorkerId>& settled,
                                     const Plan& next, int gpus_per_node);

// carry_step where a running pipeline's workers pass together (as the
// simulator plays them): the workers of each pipeline `passed` says hold
// its list of `shares` (both by pipeline of `running`), the others are
// not past their passes yet, and none is settled. The same as carry_step
// with those held sums, without a map of every worker.
[[nodiscard]] CarriedStep carry_step_by_pipeline(const Plan& running, const StepShares& shares,
                                                 const std::vector<bool>& passed, const Plan& next, int gpus_per_node);

// The resumed step's plan: `next` with each pipeline's microbatches the
// count `carried` gives it to train (a kept pipeline none; `next` itself
// when nothing was carried).
[[nodiscard]] Plan resumed_plan(const Plan& next, const CarriedStep& carried);

// What each pipeline's sums hold once past the resumed step's passes: its
// kept microbatches, then those it trained.
[[nodiscard]] StepShares resumed_shares(const CarriedStep& carried, int step);

// The resumed step as the planner prices it (iteration_ms_at_speeds): `next`
// with each pipeline training what `carried` gives it (a kept pipeline
// nothing), then the gradient synchronisation of them all.
[[nodiscard]] Milliseconds resumed_step_ms(const CostModel& cost, const Plan& next, const CarriedStep& carried);

// Waiting for awaited pipelines (`now`'s awaited, carry_step) is worth it
// only when it saves more of the resumed step than it costs: the
// generation is held back until the last of them passes, `remaining_ms`
// from now, and the step is then carried as `waited` (carry_step with them
// holding their shares). The saving is priced by the planner relative to
// `next`'s whole step, and scaled to `iteration_ms`, the step as measured
// (or played), so that a profile taken on other hardware still compares
// with measured time. False when nothing is awaited.
[[nodiscard]] bool worth_waiting(const CostModel& cost, const Plan& next, const CarriedStep& now,
                                 const CarriedStep& waited, Milliseconds remaining_ms, Milliseconds iteration_ms);

}  // namespace oobleck::recovery
