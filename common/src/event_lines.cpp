#include "oobleck/common/event_lines.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "oobleck/common.h"

namespace oobleck {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// What is wrong with a node name, or nothing. Node names become host names,
// process arguments and file names.
std::string node_name_problem(std::string_view name) {
  constexpr std::size_t kLongest = 255;
  if (name.empty()) return "empty node name, expected a name such as node1";
  const std::string shown = "node name " + quoted_excerpt(name);
  if (name.size() > kLongest) return shown + " is longer than 255 bytes, expected a shorter name";
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ' ' || c == '\t') return shown + " contains whitespace, expected a name without spaces";
    if (u < ' ' || u == 0x7f) return shown + " contains a control character, expected a printable name";
    if (c == '"' || c == '\'' || c == '\\' || c == '/') {
      return shown + " contains quotes or slashes, expected a name such as node1";
    }
  }
  return {};
}

}  // namespace

void for_each_line(std::string_view text, const std::function<void(int, std::string_view)>& f) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  int number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    f(++number, text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

std::string excerpt(std::string_view text) {
  std::size_t shown = std::min(text.size(), kExcerptBytes);
  // Not through the middle of a UTF-8 sequence: back up over continuation bytes.
  while (shown < text.size() && shown > 0 && (static_cast<unsigned char>(text[shown]) & 0xC0) == 0x80) --shown;
  std::string out;
  for (const char c : text.substr(0, shown)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < ' ' || u == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    } else {
      out += c;
    }
  }
  if (shown < text.size()) out += "...";
  return out;
}

std::string quoted_excerpt(std::string_view text) {
  std::string out = "\"";
  out += excerpt(text);
  out += '"';
  return out;
}

void fail_at_line(const std::string& origin, int line, const std::string& what) {
  throw InputError(origin + ":" + std::to_string(line) + ": " + what);
}

void for_each_event_line(std::string_view text, const std::string& origin, std::string_view format,
                         const std::function<void(const EventLine&)>& f) {
  for_each_line(text, [&](int line, std::string_view raw) {
    std::string_view body = raw.substr(0, raw.find('#'));
    body = trim_blanks(body);
    if (body.empty()) return;
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
      const std::size_t comma = body.find(',', start);
      fields.push_back(trim_blanks(body.substr(start, comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    const bool slow = fields.size() >= 2 && fields[1] == "slow";
    if (fields.size() != 3 && !(slow && fields.size() == 4)) {
      fail_at_line(origin, line,
                   "expected 3 comma-separated fields " + std::string(format) +
                       (slow ? ", and a 4th for slow (its speed factor)" : "") + ", got " +
                       std::to_string(fields.size()));
    }
    if (const std::string problem = node_name_problem(fields[2]); !problem.empty()) fail_at_line(origin, line, problem);
    f(EventLine{line, fields[0], fields[1], fields[2], fields.size() == 4 ? fields[3] : std::string_view()});
  });
}

double slow_factor(const EventLine& line, const std::string& origin) {
  double factor = 0;
  const auto [end, error] = std::from_chars(line.factor.data(), line.factor.data() + line.factor.size(), factor);
  if (line.factor.empty() || error != std::errc() || end != line.factor.data() + line.factor.size() ||
      !(factor >= kMinSlowFactor && factor <= 1)) {
    fail_at_line(origin, line.line,
                 "slow takes a 4th field, the node's speed factor: a number in [0.01, 1] such as 0.4 (1 ends the "
                 "slowdown), got " + (line.factor.empty() ? std::string("none") : quoted_excerpt(line.factor)));
  }
  return factor;
}

}  // namespace oobleck
