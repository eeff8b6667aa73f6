// The master's injections: scripted failures and joins (--inject) and
// random ones (--chaos), fired from its loop.
#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "master.h"

namespace oobleck::executor {

using protocol::Role;

// Fires what is due; returns how long the loop may wait for the next.
Milliseconds Master::inject(Milliseconds wait_ms) {
  if (o_.join_spares) join_spares();
  const Milliseconds now = now_ms();
  fire_due_step_events();
  for (const auto& e : injector_.due(now - training_start_ms_)) fire(e);
  if (const auto next = injector_.next_due_ms()) wait_ms = std::min(wait_ms, training_start_ms_ + *next - now);
  if (const auto due = injector_.chaos_due_ms(now)) {
    // (Not while a worker crashes and restarts in place, so that restarts
    // are seen to end; a kill that lands in one is a scripted case.)
    const bool crashing = !restarts_.empty() || std::any_of(pending_step_events_.begin(), pending_step_events_.end(),
                                                              [](const PendingStepEvent& e) {
                                                                return e.event.action == Injection::Action::Crash;
                                                              });
    if (now >= *due && (established_ || wait_deadline_ms_ >= 0) && !crashing) {
      if (const auto event = injector_.next_chaos_event(chaos_view(), now)) {
        const char* why = event->past_f ? "chaos, past f" : "chaos";
        for (const auto& node : event->nodes) {
          if (event->kind == ChaosEvent::Kind::kill) kill_node(node, why, false);
          if (event->kind == ChaosEvent::Kind::crash) crash_during_next_step(node, why);
          if (event->kind == ChaosEvent::Kind::slow) slow_node(node, event->factor, why);
          if (event->kind == ChaosEvent::Kind::join) {
            std::fprintf(stderr, "oobleck-run: chaos: starting node %s\n", node.c_str());
            processes_.start(node, now);
          }
        }
      }
    } else if (now < *due) {
      wait_ms = std::min(wait_ms, *due - now);
    }
  }
  return std::max(0.0, wait_ms);
}

// As many spares started as the nodes running fall short of the plan's
// first count: hosts never started, in their order.
void Master::join_spares() {
  if (phase_ == Phase::finishing) return;
  int running = 0;
  for (const auto& [name, p] : processes_.nodes()) running += p.alive ? 1 : 0;
  const auto wanted = static_cast<int>(recovery::ranked_nodes(in_.initial_plan).size());
  for (const auto& host : in_.hosts) {
    if (running >= wanted) return;
    if (processes_.find(host) != nullptr) continue;
    std::fprintf(stderr, "oobleck-run: starting spare node %s\n", host.c_str());
    processes_.start(host, now_ms());
    ++running;
  }
}

// A crash restarts in place only once the worker's snapshot of the last
// committed step is in its agent's memory (before that, the node is lost and
// the replicas stand in): like a scripted step:N crash, a chaos crash
// strikes during the next step once the snapshots before it are in.
void Master::crash_during_next_step(const std::string& node, const std::string& why) {
  Injection crash;
  crash.when = Injection::When::DuringStep;
  crash.index = controller_.committed_step() + 1;
  crash.action = Injection::Action::Crash;
  crash.node = node;
  pending_step_events_.push_back({crash, why, now_ms()});
  fire_due_step_events();
}

void Master::fire(const Injection& event) {
  const std::string why = "--inject line " + std::to_string(event.line);
  if (event.action == Injection::Action::KillMaster) {
    // As a dying host would: no goodbye, nothing flushed but what is kept.
    std::fprintf(stderr, "oobleck-run: %s: killing the master (SIGKILL) at unix ms %.0f\n", why.c_str(),
                 unix_now_ms());
    std::fflush(nullptr);
    ::raise(SIGKILL);
  }
  if (event.action == Injection::Action::Slow) {
    slow_node(event.node, event.factor, why);
    return;
  }
  if (event.action != Injection::Action::Add && event.when == Injection::When::DuringStep &&
      (o_.snapshot_every > 0 || checkpoints_.enabled())) {
    pending_step_events_.push_back({event, why, now_ms()});
    fire_due_step_events();
    return;
  }
  strike(event, why);
}

void Master::strike(const Injection& event, const std::string& why) {
  if (event.action == Injection::Action::Slow) {
    slow_node(event.node, event.factor, why);
    return;
  }
  if (event.action == Injection::Action::Crash) {
    crash_worker(event.node, why);
    return;
  }
  if (event.action != Injection::Action::Add) {
    kill_node(event.node, why, event.action == Injection::Action::Hang);
    return;
  }
  if (const NodeProcess* p = processes_.find(event.node); p != nullptr && p->alive) {
    std::fprintf(stderr, "oobleck-run: %s: node %s is already running\n", why.c_str(), event.node.c_str());
    return;
  } else if (p != nullptr && in_.slurm) {
    std::fprintf(stderr, "oobleck-run: %s: node %s failed earlier; later job steps leave it out\n", why.c_str(),
                 event.node.c_str());
    return;
  }
  if (phase_ == Phase::finishing) return;
  std::fprintf(stderr, "oobleck-run: %s: starting node %s\n", why.c_str(), event.node.c_str());
  processes_.start(event.node, now_ms());
  if (event.when == Injection::When::DuringStep) decide(recovery::JoinAwaited{event.node});
}

void Master::kill_node(const std::string& node, const std::string& why, bool hang) {
  const NodeProcess* p = processes_.find(node);
  if (p == nullptr || !p->alive) {
    std::fprintf(stderr, "oobleck-run: %s: node %s is not running; nothing to %s\n", why.c_str(), node.c_str(),
                 hang ? "stop" : "remove");
    return;
  }
  std::fprintf(stderr, "oobleck-run: %s: %s node %s\n", why.c_str(), hang ? "stopping" : "killing", node.c_str());
  if (!processes_.inject_failure(node, hang, now_ms())) {
    server_.send(node, Role::agent, hang ? protocol::Message(protocol::Hang{}) : protocol::Message(protocol::Kill{}));
  }
}

ChaosView Master::chaos_view() {
  ChaosView view;
  for (const auto& n : ranks_) {
    if (processes_.healthy(n)) view.members.push_back(n);
  }
  std::vector<std::string> killed;  // not detected yet
  for (const auto& [name, p] : processes_.nodes()) {
    view.healthy_nodes += processes_.healthy(name) ? 1 : 0;
    if (p.alive && p.killed_ms >= 0) killed.push_back(name);
  }
  view.initial_nodes = static_cast<int>(recovery::ranked_nodes(in_.initial_plan).size());
  view.fault_tolerance = in_.initial_plan.fault_tolerance;
  view.waiting_for_nodes = wait_deadline_ms_ >= 0;
  const auto with_killed = [killed](const std::vector<std::string>& victims) {
    auto lost = killed;
    lost.insert(lost.end(), victims.begin(), victims.end());
    return lost;
  };
  view.survivable = [this, with_killed](const std::vector<std::string>& victims) {
    return controller_.survives_losing(with_killed(victims));
  };
  view.restorable = [this, with_killed](const std::vector<std::string>& victims) {
    return controller_.can_roll_back_losing(with_killed(victims));
  };
  return view;
}

}  // namespace oobleck::executor
