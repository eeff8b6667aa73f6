// Strict JSON input, for every reader of a file a user hands over. Bad
// input is an InputError (exit status 2) whose message names the file, the
// line and column or the field, and what was expected, and quotes at most
// a short excerpt of the bad value; never a crash. Refused while parsing:
// - nesting deeper than kMaxDepth arrays and objects (nlohmann's dump()
//   and comparisons recurse, and overflow the stack on 100,000 brackets);
// - a key twice in one object (which of the two counts would be a guess);
// - numbers beyond double's range (1e999, integers of 400 digits).
//
// Typical use:
//   const json root = json_input::parse(read_text_file(path), path);
//   const FieldPath where(path);
//   require_format(root, "oobleck.thing.v1", where);
//   const int count = static_cast<int>(require_integer(root, "count", where, 1, 1000));
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "oobleck/common.h"

namespace oobleck::json_input {

using nlohmann::json;

// Every oobleck format nests fewer than ten levels; 64 leaves room for
// free-form sections (a profile's model) without risking the stack.
inline constexpr int kMaxDepth = 64;

// The whole document; InputError "origin:line:column: ..." when it is not
// valid JSON, nests deeper than kMaxDepth, repeats a key or holds a number
// beyond double's range (the last two also name the field).
[[nodiscard]] json parse(std::string_view text, const std::string& origin);

// "line:column" (both from 1) of a byte offset in text.
[[nodiscard]] std::string line_and_column(std::string_view text, std::size_t offset);

// A value as a message quotes it: its JSON text cut to about 40 bytes
// ("[[[[[[...", "\"abc...\""), built without visiting more of the value
// than it shows.
[[nodiscard]] std::string value_excerpt(const json& value);
// Its type and excerpt: `string "two"`, `number 2.5`, `array [[[...`.
[[nodiscard]] std::string describe(const json& value);

// Where a field is, for messages: "file.json: layers[3].forward_ms". Keys
// from the input are cut short and escaped like any quoted value.
class FieldPath {
 public:
  FieldPath(std::string origin, std::string path = {}) : origin_(std::move(origin)), path_(std::move(path)) {}
  [[nodiscard]] FieldPath operator/(std::string_view key) const;
  [[nodiscard]] FieldPath operator[](std::size_t index) const;
  [[nodiscard]] std::string str() const { return path_.empty() ? origin_ : origin_ + ": " + path_; }
  [[nodiscard]] InputError error(std::string_view expected) const {
    return InputError(str() + ": " + std::string(expected));
  }

 private:
  std::string origin_;
  std::string path_;
};

// object[key]; throws when `object` is not an object or lacks the key.
[[nodiscard]] const json& require(const json& object, std::string_view key, const FieldPath& where);
[[nodiscard]] const json& require_object(const json& object, std::string_view key, const FieldPath& where);
[[nodiscard]] const json& require_array(const json& object, std::string_view key, const FieldPath& where);
[[nodiscard]] std::string require_string(const json& object, std::string_view key, const FieldPath& where);
// object[key] when present, `fallback` when absent; throws when it is there but not a string.
[[nodiscard]] std::string optional_string(const json& object, std::string_view key, const FieldPath& where,
                                          std::string fallback);

// Checks that `root` is an object whose "format" is `format`.
void require_format(const json& root, std::string_view format, const FieldPath& where);

// A finite number in [min_value, max_value]; the message says the range.
[[nodiscard]] double as_number(const json& value, const FieldPath& where, double min_value, double max_value);
[[nodiscard]] double require_number(const json& object, std::string_view key, const FieldPath& where,
                                    double min_value = 0, double max_value = std::numeric_limits<double>::max());

// A whole number in [min_value, max_value] (1e10 counts as whole, 2.5 does
// not); the message says the range, so that nothing wraps when narrowed.
[[nodiscard]] std::int64_t as_integer(const json& value, const FieldPath& where, std::int64_t min_value,
                                      std::int64_t max_value);
[[nodiscard]] std::int64_t require_integer(const json& object, std::string_view key, const FieldPath& where,
                                           std::int64_t min_value, std::int64_t max_value);

}  // namespace oobleck::json_input
