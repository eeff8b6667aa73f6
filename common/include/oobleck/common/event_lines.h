// Line-oriented text in, with messages that name origin:line. Failure
// traces and injected events share one format, `when,action,node` per line:
// LF or CRLF, a UTF-8 byte order mark skipped (spreadsheet exports), '#'
// starting a comment, blank lines ignored. What `when` and `action` may be
// is the caller's to check; the node name is checked here, once for both.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace oobleck {

// Calls `f(line_number, line)` for every line (1-based; a trailing newline
// ends the last line rather than starting an empty one).
void for_each_line(std::string_view text, const std::function<void(int, std::string_view)>& f);

// Spaces, tabs and a CR (of CRLF) trimmed from both ends.
[[nodiscard]] std::string_view trim_blanks(std::string_view text);

// Bad input shown in a message: cut short (at a character boundary) and
// with control characters escaped, so that a binary file or a megabyte-long
// field cannot flood or garble it. `excerpt` for names inside a field path,
// `quoted_excerpt` for a value.
inline constexpr std::size_t kExcerptBytes = 40;
[[nodiscard]] std::string excerpt(std::string_view text);
[[nodiscard]] std::string quoted_excerpt(std::string_view text);

[[noreturn]] void fail_at_line(const std::string& origin, int line, const std::string& what);

struct EventLine {
  int line = 0;
  std::string_view when, action, node;  // trimmed
  std::string_view factor;              // the 4th field of `slow` (empty otherwise)
};

// Every event line of `text`. `format` names the three fields in messages
// (e.g. "time_ms,add|remove,node_name"). A line without exactly three
// fields, or whose node is not a name (empty, longer than 255 bytes, with
// whitespace, quotes, slashes or control characters), is an InputError
// naming origin:line.
// A 4th field is taken only on lines whose action is `slow` (a node's
// speed factor): `time,slow,node,factor`.
void for_each_event_line(std::string_view text, const std::string& origin, std::string_view format,
                         const std::function<void(const EventLine&)>& f);

// The speed factor of a `slow` line, in [0.01, 1] (1 ends a slowdown); an
// InputError naming origin:line otherwise.
inline constexpr double kMinSlowFactor = 0.01;
[[nodiscard]] double slow_factor(const EventLine& line, const std::string& origin);

}  // namespace oobleck
