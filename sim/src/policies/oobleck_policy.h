// The oobleck policies' driver of the recovery controller
// (recovery/controller.h): it tells the controller the trace's changes and
// the step boundaries where joins wait, carries out what it answers, and
// charges each decision its time. `oobleck` plays its disk checkpoints
// itself; `oobleck-snapshots` (snapshots_policy.cpp) also tells the
// controller its saves and steps, and overrides the hooks below.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "oobleck/recovery/controller.h"
#include "oobleck/recovery/step_shares.h"
#include "policy_model.h"

namespace oobleck::sim::detail {

class OobleckPolicy : public PolicyModel {
 public:
  explicit OobleckPolicy(const Job& job);

 protected:
  // The options the oobleck policy drives the controller with.
  [[nodiscard]] static recovery::ControllerOptions controller_options(const Job& job);
  OobleckPolicy(const Job& job, Policy policy, const recovery::ControllerOptions& options);

  // ---------------------------------------------------------------- hooks
  // Before the controller decides on a change (`lost` may be empty).
  virtual void before_change(const std::vector<std::string>& /*lost*/) {}
  // After it decided on a change and the actions were carried out.
  virtual void after_change() {}
  // Before a step boundary is told to the controller (joins wait for it).
  virtual void before_commit() {}
  // The controller's number for the step that ends `iterations` done.
  [[nodiscard]] virtual int step_of(std::int64_t iterations) const { return static_cast<int>(iterations) - 1; }
  // The replicas no longer covered a layer: back to a save. `g`: the
  // generation that resumes (nullptr when the job waits for nodes).
  virtual void fall_back(const recovery::Generation* g);
  // A generation starts (after any fall-back).
  virtual void generation_begins(const recovery::Generation& /*g*/) {}
  // Loading the state of a generation that restarts (not from replicas).
  [[nodiscard]] virtual Milliseconds restore_ms(const recovery::Generation& g);
  // Time added to every iteration of `plan` beyond the iteration itself.
  [[nodiscard]] virtual Milliseconds stall_ms(const Plan& /*plan*/) { return 0; }
  // The generation's record as the simulator played it.
  [[nodiscard]] virtual recovery::Generation as_played(const recovery::Generation& g) const;

  void carry_out(const recovery::Actions& actions);

  std::optional<recovery::Controller> controller_;

 private:
  void on_change(const std::vector<std::string>& added, const std::vector<std::string>& lost) override;
  // The current plan at the nodes' speeds; mitigation through the controller.
  [[nodiscard]] double straggler_slowdown() const override;
  void on_stragglers_detected() override;
  void begin(const recovery::Generation& g);
  void resume(int generation);
  void commit_at_next_iteration();

  // A loss during a step (recovery/step_shares.h): the pipelines that the
  // new plan leaves as they were keep their passes of it, and the resumed
  // step trains only the other microbatches, as a live run does.
  struct StepInFlight {
    Plan plan;                  // the plan that trains it
    recovery::StepShares shares;  // what each pipeline holds once it passed
    // Per pipeline of `plan`: when its workers hold their share (infinite:
    // never, a node of it lost or it does not train).
    std::vector<Milliseconds> passes_end_ms;
    bool trains = true;  // false: a generation that kept some of it and never trained
    Milliseconds iteration_ms = 0;  // as trained (what a live master measured of the step before)
  };
  void note_step_in_flight(const std::vector<std::string>& lost);
  // For a generation resuming from replicas after a loss: how long it
  // waits for kept pipelines still in their passes; sets resumed_.
  [[nodiscard]] Milliseconds carry_step_in_flight(const recovery::Generation& g, Milliseconds detection);
  // The kept pipelines' sums that change hands (recovery::kept_sum_copies).
  [[nodiscard]] Milliseconds kept_sums_copy_ms(const Plan& running, const Plan& next,
                                               const recovery::CarriedStep& carried) const;
  Milliseconds kept_sums_ms_ = 0;  // the last carry's, added to the state copy
  std::optional<StepInFlight> in_flight_;
  // The step a generation resumes with kept passes: each pipeline trains
  // its `train` list (`played`: the plan with those counts), and once
  // passed holds kept and trained lists (`shares`); `end_ms` once training.
  struct ResumedStep {
    Plan played;
    recovery::StepShares shares;
    Milliseconds iteration_ms = 0;
    Milliseconds end_ms = 0;
  };
  std::optional<ResumedStep> resumed_;
};

}  // namespace oobleck::sim::detail
