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

std::vector<Injection> Injector::at_commit(int step) {
  return take([&](const Injection& e) { return e.when == Injection::When::AtCommit && e.index == step; });
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
    if (view.survivable({victim})) return victim;
  }
  return std::nullopt;
}

// The fewest victims found in a few random orders: nodes added one by one
// until a recovery would find no plan.
std::optional<std::vector<std::string>> Injector::victims_past_f(const ChaosView& view) {
  std::optional<std::vector<std::string>> fewest;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::vector<std::string> candidates = view.members, victims;
    std::shuffle(candidates.begin(), candidates.end(), rng_);
    for (const auto& victim : candidates) {
      victims.push_back(victim);
      if (fewest && victims.size() >= fewest->size()) break;
      if (view.survivable(victims)) continue;
      if (view.restorable(victims)) fewest = victims;
      break;
    }
  }
  return fewest;
}

std::optional<ChaosEvent> Injector::next_chaos_event(const ChaosView& view, Milliseconds now) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::exponential_distribution<double> gap(1.0 / chaos_.mean_interval_ms);
  // Keep the node count between initial - f and initial, and otherwise
  // kills and joins even, so that a long run has as many of each.
  const bool kill = view.waiting_for_nodes                                          ? false
                    : view.healthy_nodes >= view.initial_nodes                        ? true
                    : view.healthy_nodes <= view.initial_nodes - view.fault_tolerance ? false
                    : kills_ != joins_                                               ? kills_ < joins_
                                                                                     : unit(rng_) < 0.5;
  // Kills only as many as the events left can bring back with joins.
  const auto can_lose = [&](std::size_t victims) {
    const int short_of = view.initial_nodes - view.fault_tolerance - (view.healthy_nodes - static_cast<int>(victims));
    return chaos_left_ - 1 >= short_of;
  };
  std::optional<ChaosEvent> event;
  // (No draw without slowdowns, so that the other events of a seed stay.)
  if (chaos_.slow_share > 0 && unit(rng_) < chaos_.slow_share) {
    std::erase_if(slowed_, [&](const std::string& n) {
      return std::find(view.members.begin(), view.members.end(), n) == view.members.end();
    });
    if (!slowed_.empty()) {
      event = ChaosEvent{ChaosEvent::Kind::slow, false, {slowed_.back()}, 1.0};
      slowed_.pop_back();
    } else if (!view.members.empty()) {
      std::uniform_int_distribution<std::size_t> pick(0, view.members.size() - 1);
      std::uniform_real_distribution<double> factor(0.3, 0.7);
      const std::string node = view.members[pick(rng_)];
      event = ChaosEvent{ChaosEvent::Kind::slow, false, {node}, factor(rng_)};
      slowed_.push_back(node);
    }
  }
  if (!event && kill) {
    const double draw = unit(rng_);
    if (draw < chaos_.crash_share) {
      // A crash leaves the node count as it is; should the restart fail,
      // the node is lost, which must leave a plan.
      if (auto victim = survivable_victim(view)) event = ChaosEvent{ChaosEvent::Kind::crash, false, {*victim}};
    } else if (draw < chaos_.crash_share + chaos_.past_f_share) {
      if (auto victims = victims_past_f(view); victims && can_lose(victims->size())) {
        kills_ += static_cast<int>(victims->size());
        event = ChaosEvent{ChaosEvent::Kind::kill, true, *victims};
      }
    }
    if (!event && can_lose(1)) {
      if (auto victim = survivable_victim(view)) {
        ++kills_;
        kill_in_recovery_ = unit(rng_) < 0.25 && can_lose(2);
        event = ChaosEvent{ChaosEvent::Kind::kill, false, {*victim}};
      }
    }
  }
  if (!event && view.healthy_nodes < view.initial_nodes) {
    event = ChaosEvent{ChaosEvent::Kind::join, false, {"chaos-" + std::to_string(++joins_)}};
  }
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
