// Trace files: the event CSV and the count series read and checked, a trace
// written back as CSV, and durations as the command line writes them.
#include "oobleck/sim/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "trace_shared.h"

namespace oobleck::sim {

namespace trace_internal {

std::string format_decimal(double value) {
  if (value == 0) value = 0;  // no "-0"
  char buffer[400];           // the longest fixed-form double is about 330 characters
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed);
  if (error != std::errc()) return std::to_string(value);
  return std::string(buffer, end);
}

std::string node_name(int index) { return "node" + std::to_string(index + 1); }

}  // namespace trace_internal

namespace {

using namespace trace_internal;

constexpr const char* kEventFields = "time_ms,add|remove|slow,node_name";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::vector<std::string_view> split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const std::size_t at = s.find(separator);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// A non-negative decimal without sign or exponent ("600000", "600000.0", ".5").
// from_chars rounds correctly, so parsing is the same on every platform.
std::optional<double> parse_decimal(std::string_view s) {
  bool digits = false, point = false;
  for (char c : s) {
    if (is_digit(c)) {
      digits = true;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  double value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value, std::chars_format::fixed);
  if (error != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<long long> parse_whole(std::string_view s, long long max) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  long long value = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

// ------------------------------------------------------------ count series

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
// days_from_civil), so rows spanning month or year ends subtract correctly.
long long days_from_civil(long long y, long long m, long long d) {
  y -= m <= 2 ? 1 : 0;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const long long yoe = y - era * 400;
  const long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool is_leap(long long y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

// `groups` runs of digits joined by `separator`: the first 1..first_width
// digits long, the others 1..other_width.
std::optional<std::vector<long long>> digit_groups(std::string_view s, char separator, std::size_t groups,
                                                   std::size_t first_width, std::size_t other_width) {
  const std::vector<std::string_view> parts = split(s, separator);
  if (parts.size() != groups) return std::nullopt;
  std::vector<long long> values;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::size_t width = i == 0 ? first_width : other_width;
    if (parts[i].empty() || parts[i].size() > width) return std::nullopt;
    const auto value = parse_whole(parts[i], 9999);
    if (!value) return std::nullopt;
    values.push_back(*value);
  }
  return values;
}

// YYYY-MM-DD (month and day may have one digit): days since 1970-01-01.
std::optional<long long> parse_date(std::string_view s) {
  const auto parts = digit_groups(s, '-', 3, 4, 2);
  if (!parts || (*parts)[0] < 1000) return std::nullopt;
  const long long y = (*parts)[0], m = (*parts)[1], d = (*parts)[2];
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1) return std::nullopt;
  if (d > kDays[m - 1] + (m == 2 && is_leap(y) ? 1 : 0)) return std::nullopt;
  return days_from_civil(y, m, d);
}

// HH:MM:SS (the hour may have one digit): seconds since midnight.
std::optional<long long> parse_clock(std::string_view s) {
  const auto parts = digit_groups(s, ':', 3, 2, 2);
  if (!parts) return std::nullopt;
  const long long h = (*parts)[0], m = (*parts)[1], sec = (*parts)[2];
  if (h > 23 || m > 59 || sec > 59) return std::nullopt;
  return h * 3600 + m * 60 + sec;
}

bool looks_like_date(std::string_view s) { return digit_groups(s, '-', 3, 4, 2).has_value(); }

[[noreturn]] void fail_beyond_events(const std::string& origin, int line, const TraceLimits& limits) {
  fail_at_line(origin, line,
               "more than " + std::to_string(limits.events) +
                   " events, the most a trace may have; expected a shorter trace");
}

}  // namespace

bool Trace::has_stragglers() const {
  return std::any_of(events.begin(), events.end(),
                     [](const TraceEvent& e) { return e.change == NodeChange::slow && e.factor < 1; });
}

int Trace::peak_nodes() const {
  int present = 0, peak = 0;
  for (const TraceEvent& e : events) {
    if (e.change == NodeChange::slow) continue;
    present += e.change == NodeChange::add ? 1 : -1;
    peak = std::max(peak, present);
  }
  return peak;
}

Trace parse_trace(std::string_view text, const std::string& origin, const TraceLimits& limits) {
  Trace trace;
  trace.origin = origin;
  // At most one event a line: reserved once, the events are never copied
  // while the vector grows (which would hold both copies at once).
  const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  trace.events.reserve(std::min(lines, limits.events));
  std::unordered_map<std::string_view, int> present;  // node (a view into `text`) -> line that added it
  Milliseconds last_time = 0;
  int last_line = 0;
  for_each_event_line(text, origin, kEventFields, [&](const EventLine& e) {
    const int line = e.line;
    const std::optional<double> time = parse_decimal(e.when);
    if (!time) {
      fail_at_line(
          origin, line,
          "expected time_ms, a non-negative number of milliseconds such as 600000, got " + quoted_excerpt(e.when));
    }
    if (*time > kMaxTraceMs) {
      fail_at_line(origin, line,
                   "time " + format_decimal(*time) + " ms is beyond " + format_decimal(kMaxTraceMs) +
                       " ms (2^53, about 285,000 years); expected a smaller time");
    }
    if (trace.events.size() >= limits.events) fail_beyond_events(origin, line, limits);
    NodeChange change;
    double factor = 1;
    if (e.action == "add") {
      change = NodeChange::add;
    } else if (e.action == "remove") {
      change = NodeChange::remove;
    } else if (e.action == "slow") {
      change = NodeChange::slow;
      factor = slow_factor(e, origin);
    } else {
      fail_at_line(origin, line, "expected add, remove or slow, got " + quoted_excerpt(e.action));
    }
    if (*time < last_time) {
      fail_at_line(origin, line,
                   "time " + format_decimal(*time) + " ms is before " + format_decimal(last_time) + " ms of line " +
                       std::to_string(last_line) + ": events must be in time order");
    }
    if (change == NodeChange::add) {
      const auto [it, inserted] = present.emplace(e.node, line);
      if (!inserted) {
        fail_at_line(origin, line,
                     "adds node " + quoted_excerpt(e.node) + ", already present since line " +
                         std::to_string(it->second) + "; expected a node that is not present");
      }
      if (present.size() > static_cast<std::size_t>(limits.present_nodes)) {
        fail_at_line(origin, line,
                     "adds node " + quoted_excerpt(e.node) + " while " + std::to_string(limits.present_nodes) +
                         " nodes are present, the most a trace may have at once; expected a remove first");
      }
    } else if (change == NodeChange::slow) {
      if (!present.count(e.node)) {
        fail_at_line(origin, line,
                     "slows node " + quoted_excerpt(e.node) + ", which is not present; expected a node added earlier");
      }
    } else if (present.erase(e.node) == 0) {
      fail_at_line(origin, line,
                   "removes node " + quoted_excerpt(e.node) + ", which is not present; expected a node added earlier");
    }
    last_time = *time;
    last_line = line;
    trace.events.push_back({*time, change, std::string(e.node), factor});
  });
  if (trace.events.empty()) throw InputError(origin + ": no events, expected lines " + kEventFields);
  return trace;
}

// The count series of the Bamboo gcloud traces. Only rows where the count
// changes produce events, at that row's time relative to the first row.
// Rows may go back in time: the v100 file logs each count as three samples a
// minute apart, and the next count's first sample is often earlier than the
// previous count's last. The rows where the count changes are in order in the
// bundled files; should one be earlier than the change before it (or than the
// first row), it takes effect at that earlier change's time, so the events stay
// in order and the counts follow the file.
Trace parse_count_series(std::string_view text, const std::string& origin, const TraceLimits& limits) {
  Trace trace;
  trace.origin = origin;
  std::vector<std::string> present;  // most recently added last
  int next_name = 0;
  std::optional<long long> first_s;  // time of the first row, seconds
  long long count = 0;
  Milliseconds last_change_ms = 0;
  for_each_line(text, [&](int line, std::string_view raw) {
    const std::string_view body = trim_blanks(raw);
    if (body.empty()) return;
    const std::vector<std::string_view> fields = split(body, ',');
    if (fields.size() != 3) {
      fail_at_line(
          origin, line,
          "expected 3 comma-separated fields date, time, instance_count such as 2021-12-11, 11:11:30, 55, got " +
              std::to_string(fields.size()));
    }
    const std::string_view date_text = trim_blanks(fields[0]), clock_text = trim_blanks(fields[1]),
                           count_text = trim_blanks(fields[2]);
    const auto day = parse_date(date_text);
    if (!day) fail_at_line(origin, line, "expected a date YYYY-MM-DD, got " + quoted_excerpt(date_text));
    const auto clock = parse_clock(clock_text);
    if (!clock) fail_at_line(origin, line, "expected a time of day HH:MM:SS, got " + quoted_excerpt(clock_text));
    const auto row_count = parse_whole(count_text, limits.present_nodes);
    if (!row_count) {
      fail_at_line(origin, line,
                   "expected instance_count, a whole number from 0 to " + std::to_string(limits.present_nodes) +
                       ", got " + quoted_excerpt(count_text));
    }

    const long long seconds = *day * 86400 + *clock;
    if (!first_s) first_s = seconds;
    const Milliseconds time_ms = std::max(last_change_ms, static_cast<Milliseconds>((seconds - *first_s) * 1000));
    if (*row_count == count) return;
    // Checked before the events are made: one row may make a million.
    if (trace.events.size() + static_cast<std::size_t>(std::llabs(*row_count - count)) > limits.events) {
      fail_beyond_events(origin, line, limits);
    }
    last_change_ms = time_ms;
    for (; count < *row_count; ++count) {
      present.push_back(node_name(next_name++));
      trace.events.push_back({time_ms, NodeChange::add, present.back()});
    }
    for (; count > *row_count; --count) {
      trace.events.push_back({time_ms, NodeChange::remove, std::move(present.back())});
      present.pop_back();
    }
  });
  if (!first_s) throw InputError(origin + ": no rows, expected lines date, time, instance_count");
  if (trace.events.empty()) throw InputError(origin + ": no events, the instance count is 0 throughout");
  return trace;
}

Trace load_trace(const std::string& path, const TraceLimits& limits) {
  // Checked before reading: the text is held whole while it is parsed.
  std::error_code error;
  const std::uintmax_t bytes = std::filesystem::file_size(path, error);
  if (!error && bytes > limits.file_bytes) {
    throw InputError(path + ": " + std::to_string(bytes) + " bytes, more than the " +
                     std::to_string(limits.file_bytes) + " a trace file may have; expected a smaller file");
  }
  const std::string text = read_text_file(path);
  std::string_view first;
  for_each_line(text, [&](int, std::string_view line) {
    if (first.empty()) first = trim_blanks(line);
  });
  const std::vector<std::string_view> fields = split(first, ',');
  if (fields.size() == 3 && looks_like_date(trim_blanks(fields[0]))) return parse_count_series(text, path, limits);
  return parse_trace(text, path, limits);
}

std::string trace_to_csv(const Trace& trace) {
  std::string out;
  out.reserve(trace.events.size() * 24);
  for (const TraceEvent& e : trace.events) {
    out += format_decimal(e.time_ms);
    out += e.change == NodeChange::add ? ",add," : e.change == NodeChange::remove ? ",remove," : ",slow,";
    out += e.node;
    if (e.change == NodeChange::slow) out.append(",").append(format_decimal(e.factor));
    out += '\n';
  }
  return out;
}

// A number and a unit; a bare 0 is accepted too, since zero needs no unit
// (the command line's "--mttr 0" means never repaired).
Milliseconds parse_duration(std::string_view text, const std::string& what) {
  const std::string_view body = trim_blanks(text);
  const auto fail = [&]() -> Milliseconds {
    throw InputError(what + ": expected a duration such as 90m, 6h or 54d, got " + quoted_excerpt(text));
  };
  std::size_t unit_at = 0;
  while (unit_at < body.size() && (is_digit(body[unit_at]) || body[unit_at] == '.')) ++unit_at;
  const std::optional<double> number = parse_decimal(body.substr(0, unit_at));
  if (!number) return fail();
  const std::string_view unit = body.substr(unit_at);
  double scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = kMsPerHour;
  } else if (unit == "d") {
    scale = 24 * kMsPerHour;
  } else if (unit.empty() && *number == 0) {
    return 0;
  } else {
    return fail();
  }
  const double ms = *number * scale;
  if (!std::isfinite(ms)) return fail();
  return ms;
}

}  // namespace oobleck::sim
