#include <charconv>
#include <string>

#include "oobleck/executor/live.h"

namespace oobleck::executor {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_count(std::string_view text, long long& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size() && out >= 0;
}

}  // namespace

std::vector<Injection> parse_injections(std::string_view text, const std::string& origin) {
  std::vector<Injection> out;
  int line_number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = origin + ":" + std::to_string(line_number) + ": ";
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
      const std::size_t comma = line.find(',', start);
      fields.push_back(trim(line.substr(start, comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (fields.size() != 3) {
      throw InputError(where + "expected 'when,add|remove|hang,node' (3 fields), found " +
                       std::to_string(fields.size()));
    }
    Injection event;
    event.line = line_number;
    long long value = 0;
    const std::string_view when = fields[0];
    const auto indexed = [&](std::string_view prefix, Injection::When kind) {
      if (when.substr(0, prefix.size()) != prefix) return false;
      if (!parse_count(when.substr(prefix.size()), value) || value > 100000000) {
        throw InputError(where + "'" + std::string(when) + "': expected " + std::string(prefix) +
                         "N with N a whole number");
      }
      event.when = kind;
      event.index = static_cast<int>(value);
      return true;
    };
    if (!indexed("step:", Injection::When::DuringStep) && !indexed("recovery:", Injection::When::DuringRecovery)) {
      if (!parse_count(when, value) || value > (1LL << 53)) {
        throw InputError(where + "'" + std::string(when) +
                         "': expected milliseconds since training started, step:N or recovery:N");
      }
      event.when = Injection::When::AtTime;
      event.time_ms = static_cast<Milliseconds>(value);
    }
    if (event.when == Injection::When::DuringRecovery && event.index < 1) {
      throw InputError(where + "recovery:N counts reconfigurations from 1");
    }
    if (fields[1] == "remove") {
      event.action = Injection::Action::Remove;
    } else if (fields[1] == "add") {
      event.action = Injection::Action::Add;
    } else if (fields[1] == "hang") {
      event.action = Injection::Action::Hang;
    } else {
      throw InputError(where + "'" + std::string(fields[1]) + "': expected add, remove or hang");
    }
    if (fields[2].empty() || fields[2].size() > 255 ||
        fields[2].find_first_of(" \t\"'\\/") != std::string_view::npos) {
      throw InputError(where + "'" + std::string(fields[2]) + "': expected a node name (no spaces, quotes or slashes)");
    }
    event.node = std::string(fields[2]);
    out.push_back(std::move(event));
  }
  return out;
}

}  // namespace oobleck::executor
