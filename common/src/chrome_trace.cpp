#include "oobleck/common/chrome_trace.h"

#include <nlohmann/json.hpp>

namespace oobleck {
namespace {

using nlohmann::ordered_json;

ordered_json to_json_value(const ChromeTrace::Value& value) {
  return std::visit([](const auto& v) { return ordered_json(v); }, value);
}

}  // namespace

void ChromeTrace::name_process(int pid, std::string_view name) {
  events_.push_back({'M', "process_name", "", pid, -1, 0, 0, {{"name", std::string(name)}}});
}

void ChromeTrace::sort_process(int pid, int index) {
  events_.push_back({'M', "process_sort_index", "", pid, -1, 0, 0, {{"sort_index", static_cast<double>(index)}}});
}

void ChromeTrace::name_thread(int pid, int tid, std::string_view name) {
  events_.push_back({'M', "thread_name", "", pid, tid, 0, 0, {{"name", std::string(name)}}});
}

void ChromeTrace::add_span(std::string_view name, std::string_view category, int pid, int tid, Milliseconds start_ms,
                           Milliseconds end_ms, std::vector<std::pair<std::string, double>> args,
                           std::vector<std::pair<std::string, std::string>> labels) {
  Event e{'X', std::string(name), std::string(category), pid, tid, start_ms, end_ms, {}};
  for (auto& [key, value] : args) e.args.emplace_back(std::move(key), value);
  for (auto& [key, value] : labels) e.args.emplace_back(std::move(key), std::move(value));
  events_.push_back(std::move(e));
}

std::string ChromeTrace::to_json(const std::vector<std::pair<std::string, Value>>& about) const {
  constexpr double kMicrosecondsPerMs = 1000.0;
  ordered_json events = ordered_json::array();
  for (const Event& e : events_) {
    ordered_json out = {{"name", e.name}};
    if (e.phase == 'X') out["cat"] = e.category;
    out["ph"] = std::string(1, e.phase);
    if (e.phase == 'X') {
      out["ts"] = e.start_ms * kMicrosecondsPerMs;
      out["dur"] = (e.end_ms - e.start_ms) * kMicrosecondsPerMs;
    }
    out["pid"] = e.pid;
    if (e.tid >= 0) out["tid"] = e.tid;
    if (!e.args.empty()) {
      ordered_json args = ordered_json::object();
      for (const auto& [key, value] : e.args) args[key] = to_json_value(value);
      out["args"] = std::move(args);
    }
    events.push_back(std::move(out));
  }
  ordered_json other = ordered_json::object();
  for (const auto& [key, value] : about) other[key] = to_json_value(value);
  ordered_json trace;
  trace["traceEvents"] = std::move(events);
  trace["displayTimeUnit"] = "ms";
  trace["otherData"] = std::move(other);
  return trace.dump() + "\n";
}

}  // namespace oobleck
