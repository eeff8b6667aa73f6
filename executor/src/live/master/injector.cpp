#include "injector.h"

#include <algorithm>

namespace oobleck::executor {

Injector::Injector(std::vector<Injection> script, ChaosOptions chaos)
    : script_(std::move(script)), fired_(script_.size(), false), chaos_(chaos), rng_(chaos.seed) {
  if (chaos_.enabled) chaos_left_ = chaos_.events;
}

std::vector<Injection> Injector::take(const std::function<bool(const Injection&)>& pick) {
  std::vector<Injection> out;
  for (std::size_t i = 0; i < script_.size(); ++i) {
    if (fired_[i] || !pick(script_[i])) continue;
    fired_[i] = true;
    out.push_back(script_[i]);
  }
  return out;
}

std::vector<Injection> Injector::due(Milliseconds since_start_ms) {
  return take([&](const Injection& e) { return e.when == Injection::When::AtTime && e.time_ms <= since_start_ms; });
}

std::optional<Milliseconds> Injector::next_due_ms() const {
  std::optional<Milliseconds> next;
  for (std::size_t i = 0; i < script_.size(); ++i) {
    if (fired_[i] || script_[i].when != Injection::When::AtTime) continue;
    next = std::min(next.value_or(script_[i].time_ms), script_[i].time_ms);
  }
  return next;
}

std::vector<Injection> Injector::at_step(int step) {
  return take([&](const Injection& e) { return e.when == Injection::When::DuringStep && e.index == step; });
}

std::vector<Injection> Injector::at_recovery(int recovery) {
  return take([&](const Injection& e) { return e.when == Injection::When::DuringRecovery && e.index == recovery; });
}

std::vector<Injection> Injector::at_rollback(int rollback) {
  return take([&](const Injection& e) { return e.when == Injection::When::DuringRollback && e.index == rollback; });
}

std::optional<Milliseconds> Injector::chaos_due_ms(Milliseconds now) {
  if (!chaos_.enabled || chaos_left_ <= 0) return std::nullopt;
  if (!chaos_next_ms_) {
    std::exponential_distribution<double> gap(1.0 / chaos_.mean_interval_ms);
    chaos_next_ms_ = now + gap(rng_);
  }
  return chaos_next_ms_;
}

std::optional<std::string> Injector::survivable_victim(const ChaosView& view) {
  std::vector<std::string> candidates = view.members;
  std::shuffle(candidates.begin(), candidates.end(), rng_);
  for (const auto& victim : candidates) {
    if (view.survivable(victim)) return victim;
  }
  return std::nullopt;
}

std::optional<ChaosEvent> Injector::next_chaos_event(const ChaosView& view, Milliseconds now) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::exponential_distribution<double> gap(1.0 / chaos_.mean_interval_ms);
  // Keep the node count between initial - f and initial, and otherwise
  // kills and joins even, so that a long run has as many of each.
  const bool kill = view.healthy_nodes >= view.initial_nodes                        ? true
                    : view.healthy_nodes <= view.initial_nodes - view.fault_tolerance ? false
                    : kills_ != joins_                                               ? kills_ < joins_
                                                                                     : unit(rng_) < 0.5;
  std::optional<ChaosEvent> event;
  if (kill) {
    if (auto victim = survivable_victim(view)) {
      ++kills_;
      kill_in_recovery_ = unit(rng_) < 0.25;
      event = ChaosEvent{true, *victim};
    }
  }
  if (!event && view.healthy_nodes < view.initial_nodes) event = ChaosEvent{false, "chaos-" + std::to_string(++joins_)};
  if (event) --chaos_left_;
  // Nothing done: look again soon, once the nodes starting may have joined.
  const Milliseconds next = event ? gap(rng_) : chaos_.mean_interval_ms / 4;
  chaos_next_ms_ = chaos_left_ > 0 ? std::optional<Milliseconds>(now + next) : std::nullopt;
  return event;
}

std::optional<std::string> Injector::chaos_victim_in_recovery(const ChaosView& view) {
  if (!kill_in_recovery_) return std::nullopt;
  kill_in_recovery_ = false;
  auto victim = survivable_victim(view);
  if (victim) ++kills_;
  return victim;
}

}  // namespace oobleck::executor
