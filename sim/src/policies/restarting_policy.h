// The policies that restart every process on a change and run the best plan
// for the nodes present (job morphing): checkpoint-restart and in-memory
// checkpoints. Plans depend only on the node count: the first `used` nodes
// present, in order of arrival, run it.
#pragma once

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "policy_model.h"

namespace oobleck::sim::detail {

class RestartingPolicy : public PolicyModel {
 protected:
  struct CountPlan {
    bool exists = false;
    Plan plan;
    Milliseconds iteration_ms = 0;
    Bytes node_state_bytes = 0;
    int used = 0;
  };

  RestartingPolicy(const Job& job, Policy policy) : PolicyModel(job, policy) {}

  const CountPlan& plan_for(int count);

  // Restarts on the nodes present; waits when they cannot form a plan.
  void restart(Milliseconds extra_downtime);

  virtual Milliseconds load_ms(const CountPlan& cp) = 0;
  virtual Milliseconds save_per_iteration_ms(const CountPlan&) { return 0; }
  virtual void trained_since_restart() {}

  // Whether the nodes present would train faster than the running plan.
  bool growth_helps();

  // Those of `nodes` that run the plan, in the order given.
  [[nodiscard]] std::vector<std::string> members_among(const std::vector<std::string>& nodes) const;
  // The running plan at its members' speeds (the plan's places, in rank
  // order, taken by the members in order).
  [[nodiscard]] double straggler_slowdown() const override;

  std::vector<std::string> members_;  // nodes running the plan, ring order for in-memory peers
  const CountPlan* running_ = nullptr;

 private:
  std::map<int, CountPlan> plans_;
  std::unordered_set<std::string> member_set_;  // members_, to look nodes up by name
};

}  // namespace oobleck::sim::detail
