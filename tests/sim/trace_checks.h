// Shared by the trace tests: the bundled traces' folder, a replay that
// checks what a trace promises and counts, and small helpers.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "oobleck/planner.h"
#include "oobleck/sim/trace.h"

namespace oobleck::sim::trace_checks {

inline const std::filesystem::path kTraces = std::filesystem::path(OOBLECK_SOURCE_DIR) / "traces";

inline std::string trace_path(const std::string& file) { return (kTraces / file).string(); }

struct Tally {
  int adds = 0;
  int removes = 0;
  int peak = 0;
  int final_nodes = 0;
};

// Replays the trace, checking what the header promises (times in order, adds
// of absent nodes, removes of present ones), and counts.
inline Tally replay(const Trace& trace) {
  Tally tally;
  std::set<std::string> present;
  Milliseconds last = 0;
  std::string problem;
  for (std::size_t i = 0; i < trace.events.size() && problem.empty(); ++i) {
    const TraceEvent& e = trace.events[i];
    const std::string where = "event " + std::to_string(i) + " (" + e.node + "): ";
    if (!(e.time_ms >= last)) problem = where + "time goes back";
    last = e.time_ms;
    if (e.change == NodeChange::add) {
      if (!present.insert(e.node).second) problem = where + "added while present";
      ++tally.adds;
    } else {
      if (present.erase(e.node) != 1) problem = where + "removed while absent";
      ++tally.removes;
    }
    tally.peak = std::max(tally.peak, static_cast<int>(present.size()));
  }
  CHECK_MESSAGE(problem.empty(), problem);
  tally.final_nodes = static_cast<int>(present.size());
  return tally;
}

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

inline std::vector<Milliseconds> times_of(const Trace& trace) {
  std::vector<Milliseconds> times;
  for (const auto& e : trace.events) times.push_back(e.time_ms);
  return times;
}

inline constexpr double kHour = 3'600'000;
inline constexpr double kDay = 24 * kHour;

}  // namespace oobleck::sim::trace_checks
