#include "oobleck/common/host_list.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "oobleck/common.h"

namespace oobleck {
namespace {

// A host name has at most 253 characters (DNS); a little room beyond.
constexpr std::size_t kLongestName = 255;

struct Expander {
  const std::string& origin;
  std::size_t max_hosts;

  [[noreturn]] void fail(std::string_view what, std::string_view where) const {
    throw InputError(origin + ": " + std::string(what) + " in the host list at \"" +
                     std::string(where.substr(0, 40)) + "\"");
  }

  // "03" -> 3 with width 2; digits only.
  std::pair<unsigned long long, std::size_t> number(std::string_view digits, std::string_view where) const {
    unsigned long long value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || digits.size() > 18) {
      fail("expected a number or a range of numbers", where);
    }
    return {value, digits.size()};
  }

  // The values of a bracket's contents: "1-3,07" -> 1, 2, 3, 07.
  std::vector<std::string> values(std::string_view inside) const {
    std::vector<std::string> out;
    while (true) {
      const std::size_t comma = std::min(inside.find(','), inside.size());
      const std::string_view item = inside.substr(0, comma);
      const std::size_t dash = item.find('-');
      const auto [first, width] = number(item.substr(0, dash), item);
      const auto last = dash == std::string_view::npos ? first : number(item.substr(dash + 1), item).first;
      if (last < first) fail("a range running backwards", item);
      if (last - first >= max_hosts) fail("more hosts than " + std::to_string(max_hosts), item);
      for (auto v = first; v <= last; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
        out.push_back(std::move(digits));
        if (out.size() > max_hosts) fail("more hosts than " + std::to_string(max_hosts), item);
      }
      if (comma == inside.size()) return out;
      inside.remove_prefix(comma + 1);
    }
  }

  void check_length(const std::vector<std::string>& made, std::string_view name) const {
    if (std::any_of(made.begin(), made.end(), [](const std::string& m) { return m.size() > kLongestName; })) {
      fail("a name longer than " + std::to_string(kLongestName) + " characters", name);
    }
  }

  // One name with its bracket groups multiplied out.
  void expand(std::string_view name, std::vector<std::string>& out) const {
    std::vector<std::string> made = {""};
    std::size_t at = 0;
    while (at < name.size()) {
      const std::size_t open = name.find('[', at);
      const std::string_view text = name.substr(at, open - at);
      if (text.find(']') != std::string_view::npos) fail("a ']' without its '['", name);
      for (auto& m : made) m += text;
      check_length(made, name);
      if (open == std::string_view::npos) break;
      const std::size_t close = name.find(']', open);
      if (close == std::string_view::npos) fail("a '[' without its ']'", name);
      const std::string_view inside = name.substr(open + 1, close - open - 1);
      if (inside.find('[') != std::string_view::npos) fail("brackets within brackets", name);
      const auto vals = values(inside);
      if (made.size() * vals.size() > max_hosts) fail("more hosts than " + std::to_string(max_hosts), name);
      std::vector<std::string> next;
      for (const auto& m : made) {
        for (const auto& v : vals) next.push_back(m + v);
      }
      made = std::move(next);
      check_length(made, name);
      at = close + 1;
    }
    for (auto& m : made) out.push_back(std::move(m));
  }
};

}  // namespace

std::vector<std::string> expand_host_list(std::string_view list, const std::string& origin, std::size_t max_hosts) {
  const Expander expander{origin, max_hosts};
  std::vector<std::string> names;
  // Names are separated by commas outside brackets.
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']') --depth;
    if (i < list.size() && (list[i] != ',' || depth > 0)) continue;
    const std::string_view name = list.substr(start, i - start);
    if (name.empty()) expander.fail("an empty name", list.substr(start == 0 ? 0 : start - 1));
    expander.expand(name, names);
    if (names.size() > max_hosts) expander.fail("more hosts than " + std::to_string(max_hosts), name);
    start = i + 1;
  }
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (auto& n : names) {
    if (seen.insert(n).second) out.push_back(std::move(n));
  }
  return out;
}

}  // namespace oobleck
