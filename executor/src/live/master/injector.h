// Failures and joins made on purpose: the scripted ones of --inject (at a
// time, during a step, during a recovery) and the random ones of --chaos.
// The injector says what is due; the master does it.
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "oobleck/executor/live.h"

namespace oobleck::executor {

// What chaos sees of the job when it picks its next event.
struct ChaosView {
  std::vector<std::string> members;  // of the current generation, healthy
  int healthy_nodes = 0;             // members, and nodes starting or waiting to join
  int initial_nodes = 0;
  int fault_tolerance = 0;
  bool waiting_for_nodes = false;    // past f with too few nodes: joins only
  // With these nodes lost too, a recovery would find a plan; a rollback
  // would find a complete state.
  std::function<bool(const std::vector<std::string>&)> survivable, restorable;
};

struct ChaosEvent {
  enum class Kind { kill, crash, join, slow };
  Kind kind = Kind::join;
  bool past_f = false;             // a kill meant to leave no plan
  std::vector<std::string> nodes;  // the victims (several only past f), or the new node's name
  double factor = 1;               // slow: the node's speed from now on (1: the slowdown ends)
};

class Injector {
 public:
  Injector(std::vector<Injection> script, ChaosOptions chaos);

  // Scripted events due once training has run `since_start_ms`; when the
  // next one is due (in the same time base).
  std::vector<Injection> due(Milliseconds since_start_ms);
  [[nodiscard]] std::optional<Milliseconds> next_due_ms() const;
  // Scripted events of a step (once its first forward ran), of the R-th
  // recovery and of the R-th rollback (once its workers started rebuilding).
  std::vector<Injection> at_step(int step);
  std::vector<Injection> at_recovery(int recovery);
  std::vector<Injection> at_rollback(int rollback);
  // Scripted events of the moment step `step`'s commit is kept.
  std::vector<Injection> at_commit(int step);

  // When the next chaos event is due, on the caller's clock (none when
  // chaos is off or done).
  [[nodiscard]] std::optional<Milliseconds> chaos_due_ms(Milliseconds now_ms);
  // The next chaos event: kills and joins even, the node count between
  // initial - f and initial, victims only among nodes whose loss leaves a
  // plan; some kills are followed by one during the next recovery. Of the
  // failures, the asked shares are crashes (one worker, any node a loss
  // would leave a plan without) and kills past f (the fewest random nodes
  // whose loss leaves no plan, when a rollback would find a state; else
  // a kill within f). None when a kill is due but no loss would leave a
  // plan and the nodes starting already make up the count: their joins
  // come first. A share of all events slows a member down, or ends the
  // slowdown of the one slowed last while it is still a member.
  std::optional<ChaosEvent> next_chaos_event(const ChaosView& view, Milliseconds now_ms);
  // The kill planned for a recovery, if any.
  std::optional<std::string> chaos_victim_in_recovery(const ChaosView& view);

 private:
  std::vector<Injection> take(const std::function<bool(const Injection&)>& pick);
  std::optional<std::string> survivable_victim(const ChaosView& view);
  std::optional<std::vector<std::string>> victims_past_f(const ChaosView& view);

  std::vector<Injection> script_;
  std::vector<bool> fired_;
  ChaosOptions chaos_;
  std::mt19937_64 rng_;
  int chaos_left_ = 0, kills_ = 0, joins_ = 0;
  std::optional<Milliseconds> chaos_next_ms_;
  bool kill_in_recovery_ = false;
  std::vector<std::string> slowed_;  // by chaos, not yet back to full speed
};

}  // namespace oobleck::executor
