#include "oobleck/common/json_input.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "oobleck/common/event_lines.h"

namespace oobleck::json_input {
namespace {

bool is_json_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Where the n-th (from 1) opening bracket, or the n-th object key, starts
// in text that is valid JSON up to there. SAX events carry no position, so
// the few errors found at an event find theirs again by counting.
std::size_t offset_of(std::string_view text, bool keys, std::size_t n) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') {
      const std::size_t start = i;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      if (!keys) continue;
      std::size_t next = i + 1;
      while (next < text.size() && is_json_blank(text[next])) ++next;
      if (next < text.size() && text[next] == ':' && ++seen == n) return start;
    } else if (!keys && (text[i] == '[' || text[i] == '{') && ++seen == n) {
      return i;
    }
  }
  return text.size();
}

// Builds the document from nlohmann's SAX events (as its own DOM builder
// does), refusing what parse() refuses. The open arrays and objects stay on
// a stack, which also names the field in a message.
class StrictBuilder {
 public:
  StrictBuilder(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  bool null() { return add(json(nullptr)); }
  bool boolean(bool value) { return add(json(value)); }
  bool number_integer(json::number_integer_t value) { return add(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return add(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t&) { return add(json(value)); }
  bool string(json::string_t& value) { return add(json(std::move(value))); }
  bool binary(json::binary_t&) { return true; }  // only binary formats have these
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& key) {
    ++keys_;
    Open& object = open_.back();
    if (object.value->contains(key)) {
      const std::string where = field_path(open_.size() - 1);
      fail(offset_of(text_, true, keys_), (where.empty() ? "" : where + ": ") + "key " + quoted_excerpt(key) +
                                              " appears twice in one object; expected each key once");
    }
    object.key = std::move(key);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token, const json::exception& error) {
    if (error.id == 406) {  // a number beyond double's range: nlohmann throws out_of_range, not parse_error
      const std::string where = field_path(open_.size());
      fail(position >= last_token.size() ? position - last_token.size() : 0,
           (where.empty() ? "" : where + ": ") + "expected a number between -1.8e308 and 1.8e308, got " +
               oobleck::excerpt(last_token));
    }
    std::string what = error.what();
    if (auto at = what.find("syntax error"); at != std::string::npos) what.erase(0, at);
    // The token read last may be a whole megabyte-long string.
    const std::string token = "last read: '" + last_token + "'";
    if (auto at = what.find(token); at != std::string::npos) {
      what.replace(at, token.size(), "last read: " + quoted_excerpt(last_token));
    }
    fail(position > 0 ? position - 1 : 0, "not valid JSON (" + what + ")");
  }

  json take() { return std::move(root_); }

 private:
  struct Open {
    json* value;
    std::string key;  // of the member being read, in an object
  };

  bool add(json&& value) {
    (void)place(std::move(value));
    return true;
  }
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    return &(parent[open_.back().key] = std::move(value));
  }
  bool open(json&& container) {
    ++brackets_;
    if (open_.size() >= static_cast<std::size_t>(kMaxDepth)) {
      fail(offset_of(text_, false, brackets_), "arrays and objects nested deeper than " + std::to_string(kMaxDepth) +
                                                   " levels; expected at most " + std::to_string(kMaxDepth));
    }
    open_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  // The value being read in the `levels` outermost open arrays and objects,
  // as FieldPath writes it: "layers[3].forward_ms".
  [[nodiscard]] std::string field_path(std::size_t levels) const {
    std::string path;
    for (std::size_t i = 0; i < levels; ++i) {
      const Open& level = open_[i];
      if (level.value->is_array()) {
        // An array that holds an open one has placed it already.
        const bool holds_open = i + 1 < open_.size();
        path += '[';
        path += std::to_string(level.value->size() - (holds_open ? 1 : 0));
        path += ']';
      } else {
        if (!path.empty()) path += '.';
        path += oobleck::excerpt(level.key);
      }
    }
    return path;
  }

  [[noreturn]] void fail(std::size_t offset, const std::string& what) const {
    throw InputError(origin_ + ":" + line_and_column(text_, offset) + ": " + what);
  }

  std::string_view text_;
  const std::string& origin_;
  json root_;
  std::vector<Open> open_;
  std::size_t brackets_ = 0, keys_ = 0;
};

// A value's JSON text up to a budget, visiting no more of it than it
// writes: each level writes a bracket first, so the recursion stops within
// the budget however deep the value goes.
class ExcerptWriter {
 public:
  explicit ExcerptWriter(std::size_t budget) : budget_(budget) {}

  void write(const json& value) {
    if (full()) return;
    if (value.is_object()) {
      put("{");
      for (auto it = value.begin(); it != value.end() && !full(); ++it) {
        if (it != value.begin()) put(",");
        put(quoted_excerpt(it.key()) + ":");
        write(*it);
      }
      put("}");
    } else if (value.is_array()) {
      put("[");
      for (auto it = value.begin(); it != value.end() && !full(); ++it) {
        if (it != value.begin()) put(",");
        write(*it);
      }
      put("]");
    } else if (value.is_string()) {
      put(quoted_excerpt(value.get_ref<const std::string&>()));
    } else {
      put(value.dump());
    }
  }
  [[nodiscard]] bool full() const { return text_.size() > budget_; }
  [[nodiscard]] std::string text() const { return text_; }

 private:
  void put(const std::string& piece) {
    if (!full()) text_ += piece.substr(0, budget_ + 1 - text_.size());
  }

  std::size_t budget_;
  std::string text_;
};

[[nodiscard]] std::string show_double(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

}  // namespace

json parse(std::string_view text, const std::string& origin) {
  StrictBuilder builder(text, origin);
  json::sax_parse(text.begin(), text.end(), &builder);
  return builder.take();
}

std::string line_and_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string value_excerpt(const json& value) {
  ExcerptWriter writer(kExcerptBytes);
  writer.write(value);
  if (!writer.full()) return writer.text();
  std::string text = writer.text();
  std::size_t cut = kExcerptBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "...";
}

std::string describe(const json& value) { return std::string(value.type_name()) + " " + value_excerpt(value); }

FieldPath FieldPath::operator/(std::string_view key) const {
  return {origin_, path_.empty() ? oobleck::excerpt(key) : path_ + "." + oobleck::excerpt(key)};
}

FieldPath FieldPath::operator[](std::size_t index) const {
  return {origin_, path_ + "[" + std::to_string(index) + "]"};
}

const json& require(const json& object, std::string_view key, const FieldPath& where) {
  if (!object.is_object()) throw where.error("expected an object, got " + describe(object));
  auto it = object.find(std::string(key));
  if (it == object.end()) throw (where / key).error("missing (required field)");
  return *it;
}

const json& require_object(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_object()) throw (where / key).error("expected an object, got " + describe(value));
  return value;
}

const json& require_array(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_array()) throw (where / key).error("expected an array, got " + describe(value));
  return value;
}

std::string require_string(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_string()) throw (where / key).error("expected a string, got " + describe(value));
  return value.get<std::string>();
}

std::string optional_string(const json& object, std::string_view key, const FieldPath& where, std::string fallback) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return require_string(object, key, where);
}

void require_format(const json& root, std::string_view format, const FieldPath& where) {
  if (!root.is_object()) throw where.error("expected a JSON object with format \"" + std::string(format) + "\"");
  const std::string found = require_string(root, "format", where);
  if (found != format) {
    throw (where / "format").error("expected \"" + std::string(format) + "\", got " + quoted_excerpt(found));
  }
}

double as_number(const json& value, const FieldPath& where, double min_value, double max_value) {
  if (!value.is_number()) throw where.error("expected a number, got " + describe(value));
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < min_value || number > max_value) {
    std::string range;
    if (max_value < std::numeric_limits<double>::max()) {
      range = "a number in [" + show_double(min_value) + ", " + show_double(max_value) + "]";
    } else {
      range = min_value == 0 ? "a non-negative number" : "a number >= " + show_double(min_value);
    }
    throw where.error("expected " + range + ", got " + value_excerpt(value));
  }
  return number;
}

double require_number(const json& object, std::string_view key, const FieldPath& where, double min_value,
                      double max_value) {
  return as_number(require(object, key, where), where / key, min_value, max_value);
}

std::int64_t as_integer(const json& value, const FieldPath& where, std::int64_t min_value, std::int64_t max_value) {
  const auto out_of_range = [&] {
    return where.error("expected an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) +
                       "], got " + value_excerpt(value));
  };
  if (value.is_number_unsigned()) {
    const std::uint64_t number = value.get<std::uint64_t>();
    if (max_value < 0 || number > static_cast<std::uint64_t>(max_value) ||
        (min_value > 0 && number < static_cast<std::uint64_t>(min_value))) {
      throw out_of_range();
    }
    return static_cast<std::int64_t>(number);
  }
  if (value.is_number_integer()) {
    const std::int64_t number = value.get<std::int64_t>();
    if (number < min_value || number > max_value) throw out_of_range();
    return number;
  }
  if (!value.is_number_float() || value.get<double>() != std::floor(value.get<double>())) {
    throw where.error("expected an integer, got " + describe(value));
  }
  const double number = value.get<double>();
  // Whole numbers written as floats (1e10): exact up to 2^53.
  constexpr double kExactUpTo = 9007199254740992.0;
  if (std::fabs(number) > kExactUpTo || number < static_cast<double>(min_value) ||
      number > static_cast<double>(max_value)) {
    throw out_of_range();
  }
  return static_cast<std::int64_t>(number);
}

std::int64_t require_integer(const json& object, std::string_view key, const FieldPath& where, std::int64_t min_value,
                             std::int64_t max_value) {
  return as_integer(require(object, key, where), where / key, min_value, max_value);
}

}  // namespace oobleck::json_input
