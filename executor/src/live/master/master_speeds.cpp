// Stragglers, live: a slowdown injected on purpose (--inject ...,slow,node,
// factor), each node's compute time of every step against what the plan's
// profile predicts for its share (the detector flags the nodes that stay
// slower than their peers), and what the controller weighed about them.
#include <algorithm>
#include <cstdio>

#include "master.h"

namespace oobleck::executor {

using protocol::Role;

void Master::slow_node(const std::string& node, double factor, const std::string& why) {
  const NodeProcess* p = processes_.find(node);
  if (p == nullptr || !p->alive) {
    std::fprintf(stderr, "oobleck-run: %s: node %s is not running; nothing to slow down\n", why.c_str(), node.c_str());
    return;
  }
  std::fprintf(stderr, "oobleck-run: %s: node %s %s\n", why.c_str(), node.c_str(),
               factor >= 1 ? "back to full speed" : ("slowed to " + std::to_string(factor).substr(0, 4)).c_str());
  server_.send(node, Role::agent, protocol::Slow{factor});
}

// Each node's passes of one step at the plan's profile: its pipeline's
// microbatches times its slowest stage's forward and backward.
std::map<std::string, Milliseconds> Master::predicted_compute_ms() const {
  std::map<std::string, Milliseconds> out;
  if (!generation_) return out;
  for (const auto& p : generation_->plan.pipelines) {
    for (const auto& s : p.stages) {
      const Milliseconds ms =
          p.microbatches * cost_.stage_compute_ms(s.layer_begin, s.layer_end, s.gpus, s.recompute);
      for (int n = s.node; n < s.node + s.node_span; ++n) {
        auto& node = out[p.nodes.at(static_cast<std::size_t>(n))];
        node = std::max(node, ms);
      }
    }
  }
  return out;
}

// A node finished `step`. Once every trainer node did, the detector sees
// the step's passes; the first step of a generation is left out (it runs
// right after a recovery, whose work may still share its cores), and so
// is a step trained on another split than the plan's (what pipelines that
// kept their passes added).
void Master::measure_work(int step, const std::string& node, const NodeWork& work) {
  if (!generation_ || step == generation_->resume_step || step == listed_step_) return;
  auto& measured = work_ms_[step];
  measured[node] = work;
  const auto predicted = predicted_compute_ms();
  if (measured.size() < predicted.size()) return;
  std::map<std::string, Milliseconds> compute;
  for (const auto& [n, w] : measured) compute[n] = w.compute_ms;
  const bool changed = stragglers_.observe(compute, predicted);
  // What the cost model predicts for this step at the speeds measured, on
  // this machine's scale (its median node's compute against the profile's).
  MeasuredStep& shown = measured_steps_[step];
  std::vector<double> scale;
  for (const auto& [n, ms] : compute) {
    const auto speed = stragglers_.measured().find(n);
    if (speed == stragglers_.measured().end()) continue;  // (no time measured)
    shown.speeds[n] = speed->second;
    if (const auto p = predicted.find(n); p != predicted.end() && p->second > 0) scale.push_back(ms / p->second);
  }
  if (!scale.empty()) {
    std::nth_element(scale.begin(), scale.begin() + static_cast<std::ptrdiff_t>(scale.size() / 2), scale.end());
    price_optimizer(measured, scale[scale.size() / 2]);
    shown.predicted_ms = iteration_ms_at_speeds(cost_, generation_->plan, shown.speeds) * scale[scale.size() / 2];
  }
  work_ms_.erase(step);
  if (!changed) return;
  std::string flagged;
  for (const auto& [n, speed] : stragglers_.flagged()) {
    flagged += (flagged.empty() ? "" : ", ") + n + " at " + std::to_string(speed).substr(0, 4);
  }
  std::fprintf(stderr, "oobleck-run: step %d: slow nodes: %s%s\n", step, flagged.empty() ? "none" : flagged.c_str(),
               o_.stragglers == MasterOptions::Stragglers::keep ? " (--stragglers keep: reported only)" : "");
  if (o_.stragglers != MasterOptions::Stragglers::keep) {
    decide(recovery::NodeSpeedsMeasured{stragglers_.flagged(), now_ms()});
  }
}

// The profile prices passes, not optimizer steps, and a slow node's step
// is slow too (node_speeds.h): its rate is measured here, each node's step
// brought to full speed (times its measured factor) and to the profile's
// scale (over `scale`, the machine's passes against the profile's), and the
// median node's rate is what the controller's weighing prices.
void Master::price_optimizer(const std::map<std::string, NodeWork>& measured, double scale) {
  if (!generation_ || scale <= 0) return;
  std::map<std::string, Bytes> state;  // per GPU, the node's largest stage
  for (const auto& p : generation_->plan.pipelines) {
    for (const auto& s : p.stages) {
      for (int n = s.node; n < s.node + s.node_span; ++n) {
        auto& bytes = state[p.nodes.at(static_cast<std::size_t>(n))];
        bytes = std::max(bytes, cost_.stage_state_bytes_per_gpu(s.layer_begin, s.layer_end, s.gpus));
      }
    }
  }
  std::vector<double> rates;
  for (const auto& [node, work] : measured) {
    const auto bytes = state.find(node);
    const auto speed = stragglers_.measured().find(node);
    if (work.optimizer_ms <= 0 || bytes == state.end() || speed == stragglers_.measured().end()) continue;
    const double profile_ms = work.optimizer_ms * speed->second / scale;
    rates.push_back(2.0 * static_cast<double>(bytes->second) / profile_ms * 1000.0);
  }
  if (rates.empty()) return;
  std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
  cost_.set_optimizer_bytes_per_s(rates[rates.size() / 2]);
}

// A node dropped as a spare trains nothing, so nothing measures it: after a
// probation (--straggler-probation, 20 steps by default; doubled each time
// it is dropped again, up to 16 times that)
// the detector forgets it, and the controller, told that it is no longer
// slow, weighs taking it back at the next commit. Still slow, it is flagged
// again within a few steps and dropped again.
void Master::retry_dropped_nodes(int committed_step) {
  bool retried = false;
  for (auto it = dropped_until_step_.begin(); it != dropped_until_step_.end();) {
    if (committed_step < it->second) {
      ++it;
      continue;
    }
    std::fprintf(stderr, "oobleck-run: step %d: node %s, a spare since it was dropped as slow, is tried again\n",
                 committed_step, it->first.c_str());
    stragglers_.forget(it->first);
    it = dropped_until_step_.erase(it);
    retried = true;
  }
  if (retried) (void)controller_.handle(recovery::NodeSpeedsMeasured{stragglers_.flagged(), now_ms()});  // (no action)
}

void Master::speeds_weighed(const recovery::SpeedsWeighed& w) {
  const auto& c = w.choice;
  for (const auto& node : c.dropped) {
    if (c.chosen != recovery::SpeedChoice::Kind::drop) break;
    int& probation = drop_probation_steps_[node];
    const int first = o_.straggler_probation_steps;
    probation = probation == 0 ? first : std::min(16 * first, 2 * probation);
    dropped_until_step_[node] = w.step + probation;
  }
  char dropping[48] = "", readmitting[48] = "";
  if (!c.dropped.empty()) std::snprintf(dropping, sizeof dropping, ", dropping %.1f ms", c.drop_ms);
  if (!c.readmitted.empty()) std::snprintf(readmitting, sizeof readmitting, ", readmitting %.1f ms", c.readmit_ms);
  std::fprintf(stderr,
               "oobleck-run: at step %d, node speeds weighed: keep %.1f ms, re-split %.1f ms, re-plan %.1f ms "
               "(copies %.1f ms)%s%s: %s\n",
               w.step, c.keep_ms, c.resplit_ms, c.replan_ms, c.replan_copy_ms, dropping, readmitting,
               std::string(recovery::speed_choice_name(c.chosen)).c_str());
  reporter_.speeds(w, now_ms() - training_start_ms_);
}

}  // namespace oobleck::executor
