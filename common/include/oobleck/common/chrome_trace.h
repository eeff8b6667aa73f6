// Chrome trace event format (Perfetto and chrome://tracing open it), one
// writer for the simulator's iterations and the live run's last step, so
// the two open side by side: a process per pipeline, a thread per stage.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "oobleck/common.h"

namespace oobleck {

class ChromeTrace {
 public:
  using Value = std::variant<double, std::string>;

  void name_process(int pid, std::string_view name);
  // Perfetto lists processes by this index, then by pid.
  void sort_process(int pid, int index);
  void name_thread(int pid, int tid, std::string_view name);
  // A span of work on one thread; times are the trace's own milliseconds.
  // `labels` are args with text values (after the numeric `args`).
  void add_span(std::string_view name, std::string_view category, int pid, int tid, Milliseconds start_ms,
                Milliseconds end_ms, std::vector<std::pair<std::string, double>> args = {},
                std::vector<std::pair<std::string, std::string>> labels = {});
  // The whole trace, one line of JSON; `about` goes to otherData.
  [[nodiscard]] std::string to_json(const std::vector<std::pair<std::string, Value>>& about) const;

 private:
  struct Event {
    char phase;  // 'M' metadata, 'X' complete span
    std::string name, category;
    int pid, tid;  // tid -1: a process's metadata
    Milliseconds start_ms = 0, end_ms = 0;
    std::vector<std::pair<std::string, Value>> args;
  };
  std::vector<Event> events_;
};

}  // namespace oobleck
