// Typed access to JSON fields with messages that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "oobleck/planner.h"

namespace oobleck::detail {

using nlohmann::json;

// "file.json: layers[3].forward_ms"
class FieldPath {
 public:
  FieldPath(std::string origin, std::string path = {}) : origin_(std::move(origin)), path_(std::move(path)) {}
  [[nodiscard]] FieldPath operator/(std::string_view key) const {
    return {origin_, path_.empty() ? std::string(key) : path_ + "." + std::string(key)};
  }
  [[nodiscard]] FieldPath operator[](std::size_t index) const {
    return {origin_, path_ + "[" + std::to_string(index) + "]"};
  }
  [[nodiscard]] std::string str() const { return path_.empty() ? origin_ : origin_ + ": " + path_; }
  [[nodiscard]] InputError error(std::string_view expected) const {
    return InputError(str() + ": " + std::string(expected));
  }

 private:
  std::string origin_;
  std::string path_;
};

[[nodiscard]] inline std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + text;
}

// Parses JSON text; a syntax error names the line and column.
[[nodiscard]] inline json parse_json(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    std::size_t line = 1, column = 1;
    const std::size_t end = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    if (auto pos = what.find("syntax error"); pos != std::string::npos) what = what.substr(pos);
    throw InputError(origin + ":" + std::to_string(line) + ":" + std::to_string(column) +
                     ": not valid JSON (" + what + ")");
  }
}

[[nodiscard]] inline const json& require(const json& object, std::string_view key, const FieldPath& where) {
  if (!object.is_object()) throw where.error("expected an object, got " + describe(object));
  auto it = object.find(std::string(key));
  if (it == object.end()) throw (where / key).error("missing (required field)");
  return *it;
}

[[nodiscard]] inline const json& require_object(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_object()) throw (where / key).error("expected an object, got " + describe(value));
  return value;
}

[[nodiscard]] inline const json& require_array(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_array()) throw (where / key).error("expected an array, got " + describe(value));
  return value;
}

[[nodiscard]] inline std::string require_string(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_string()) throw (where / key).error("expected a string, got " + describe(value));
  return value.get<std::string>();
}

// Checks that `root` is an object whose "format" is `format`.
inline void require_format(const json& root, std::string_view format, const FieldPath& where) {
  if (!root.is_object()) throw where.error("expected a JSON object with format \"" + std::string(format) + "\"");
  const std::string found = require_string(root, "format", where);
  if (found != format) {
    throw (where / "format").error("expected \"" + std::string(format) + "\", got \"" + found + "\"");
  }
}

[[nodiscard]] inline double as_number(const json& value, const FieldPath& where, double min_value, double max_value) {
  if (!value.is_number()) throw where.error("expected a number, got " + describe(value));
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < min_value || number > max_value) {
    auto show = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%.15g", v);
      return std::string(text);
    };
    std::string range;
    if (max_value < std::numeric_limits<double>::max()) {
      range = "a number in [" + show(min_value) + ", " + show(max_value) + "]";
    } else {
      range = min_value == 0 ? "a non-negative number" : "a number >= " + show(min_value);
    }
    throw where.error("expected " + range + ", got " + value.dump());
  }
  return number;
}

[[nodiscard]] inline double require_number(const json& object, std::string_view key, const FieldPath& where,
                                           double min_value = 0,
                                           double max_value = std::numeric_limits<double>::max()) {
  return as_number(require(object, key, where), where / key, min_value, max_value);
}

[[nodiscard]] inline std::int64_t as_integer(const json& value, const FieldPath& where, std::int64_t min_value,
                                             std::int64_t max_value) {
  bool integral = value.is_number_integer();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    integral = std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
  }
  if (!integral) throw where.error("expected an integer, got " + describe(value));
  const std::int64_t number = value.is_number_float() ? static_cast<std::int64_t>(value.get<double>())
                              : value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                                  ? INT64_MAX
                                  : value.get<std::int64_t>();
  if (number < min_value || number > max_value) {
    throw where.error("expected an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) +
                      "], got " + value.dump());
  }
  return number;
}

[[nodiscard]] inline std::int64_t require_integer(const json& object, std::string_view key, const FieldPath& where,
                                                  std::int64_t min_value = 0,
                                                  std::int64_t max_value = std::numeric_limits<std::int64_t>::max()) {
  return as_integer(require(object, key, where), where / key, min_value, max_value);
}

}  // namespace oobleck::detail
