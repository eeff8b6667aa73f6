// The master's injections: scripted failures and joins (--inject) and
// random ones (--chaos), fired from its loop.
#include <cstdio>

#include "master.h"

namespace oobleck::executor {

using protocol::Role;

// Fires what is due; returns how long the loop may wait for the next.
Milliseconds Master::inject(Milliseconds wait_ms) {
  const Milliseconds now = now_ms();
  fire_due_step_events();
  for (const auto& e : injector_.due(now - training_start_ms_)) fire(e);
  if (const auto next = injector_.next_due_ms()) wait_ms = std::min(wait_ms, training_start_ms_ + *next - now);
  if (const auto due = injector_.chaos_due_ms(now)) {
    if (now >= *due && established_) {
      if (const auto event = injector_.next_chaos_event(chaos_view(), now); event && event->kill) {
        kill_node(event->node, "chaos", false);
      } else if (event) {
        std::fprintf(stderr, "oobleck-run: chaos: starting node %s\n", event->node.c_str());
        processes_.start(event->node, now);
      }
    } else if (now < *due) {
      wait_ms = std::min(wait_ms, *due - now);
    }
  }
  return std::max(0.0, wait_ms);
}

void Master::fire(const Injection& event) {
  const std::string why = "--inject line " + std::to_string(event.line);
  if (event.action != Injection::Action::Add && event.when == Injection::When::DuringStep && o_.snapshot_every > 0) {
    pending_step_events_.push_back({event, why, now_ms()});
    fire_due_step_events();
    return;
  }
  strike(event, why);
}

void Master::strike(const Injection& event, const std::string& why) {
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
  view.survivable = [this, killed](const std::string& victim) {
    auto lost = killed;
    lost.push_back(victim);
    return controller_.survives_losing(lost);
  };
  return view;
}

}  // namespace oobleck::executor
