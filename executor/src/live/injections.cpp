#include <charconv>
#include <string>

#include "oobleck/common/event_lines.h"
#include "oobleck/executor/live.h"

namespace oobleck::executor {
namespace {

bool parse_count(std::string_view text, long long& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size() && out >= 0;
}

}  // namespace

std::vector<Injection> parse_injections(std::string_view text, const std::string& origin) {
  std::vector<Injection> out;
  for_each_event_line(text, origin, "when,add|remove|hang|crash|kill-master|slow,node", [&](const EventLine& line) {
    Injection event;
    event.line = line.line;
    long long value = 0;
    const std::string_view when = line.when;
    const auto indexed = [&](std::string_view prefix, Injection::When kind) {
      if (when.substr(0, prefix.size()) != prefix) return false;
      if (!parse_count(when.substr(prefix.size()), value) || value > 100000000) {
        fail_at_line(origin, line.line,
                     quoted_excerpt(when) + ": expected " + std::string(prefix) + "N with N a whole number");
      }
      event.when = kind;
      event.index = static_cast<int>(value);
      return true;
    };
    if (!indexed("step:", Injection::When::DuringStep) && !indexed("recovery:", Injection::When::DuringRecovery) &&
        !indexed("rollback:", Injection::When::DuringRollback) && !indexed("commit:", Injection::When::AtCommit)) {
      if (!parse_count(when, value) || value > (1LL << 53)) {
        fail_at_line(origin, line.line,
                     quoted_excerpt(when) +
                         ": expected milliseconds since training started, step:N, recovery:N, rollback:N or commit:N");
      }
      event.when = Injection::When::AtTime;
      event.time_ms = static_cast<Milliseconds>(value);
    }
    if (event.when == Injection::When::DuringRecovery && event.index < 1) {
      fail_at_line(origin, line.line, "recovery:N counts reconfigurations from 1");
    }
    if (event.when == Injection::When::DuringRollback && event.index < 1) {
      fail_at_line(origin, line.line, "rollback:N counts rollbacks from 1");
    }
    if (line.action == "remove") {
      event.action = Injection::Action::Remove;
    } else if (line.action == "add") {
      event.action = Injection::Action::Add;
    } else if (line.action == "hang") {
      event.action = Injection::Action::Hang;
    } else if (line.action == "crash") {
      event.action = Injection::Action::Crash;
    } else if (line.action == "kill-master") {
      event.action = Injection::Action::KillMaster;
      if (line.node != "master") fail_at_line(origin, line.line, "kill-master strikes the master: its node is 'master'");
    } else if (line.action == "slow") {
      event.action = Injection::Action::Slow;
      event.factor = slow_factor(line, origin);
    } else {
      fail_at_line(origin, line.line,
                   quoted_excerpt(line.action) + ": expected add, remove, hang, crash, kill-master or slow");
    }
    if (event.when == Injection::When::AtCommit && event.action != Injection::Action::KillMaster) {
      fail_at_line(origin, line.line, "commit:N is for kill-master (the moment a commit is kept, not yet sent)");
    }
    event.node = std::string(line.node);
    out.push_back(std::move(event));
  });
  return out;
}

}  // namespace oobleck::executor
