// Strict JSON input: what every reader of a user's file refuses, and how
// the message says so (file, line and column or field, a short excerpt).
#include <doctest/doctest.h>

#include <string>

#include "oobleck/common.h"
#include "oobleck/common/event_lines.h"
#include "oobleck/common/json_input.h"

namespace {

using namespace oobleck;
using json_input::FieldPath;
using json_input::json;

std::string parse_error(const std::string& text) {
  try {
    (void)json_input::parse(text, "f.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string nested_arrays(std::size_t depth, const std::string& inside = "") {
  return std::string(depth, '[') + inside + std::string(depth, ']');
}

template <typename Check>
std::string error_of(Check&& check) {
  try {
    check();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("json input: nesting deeper than 64 levels is refused with the line and column, at any depth") {
  CHECK(json_input::parse(nested_arrays(64, "1"), "f.json").is_array());
  CHECK(parse_error(nested_arrays(65)) ==
        "f.json:1:65: arrays and objects nested deeper than 64 levels; expected at most 64");
  // The bad value of the profile that once overflowed the stack: 100,000 arrays.
  const std::string profile =
      "{\"format\": \"oobleck.profile.v1\",\n \"microbatch_size\": " + nested_arrays(100000) + "}";
  CHECK(parse_error(profile) == "f.json:2:84: arrays and objects nested deeper than 64 levels; expected at most 64");
  CHECK(parse_error(nested_arrays(10000)).rfind("f.json:1:65: arrays and objects nested deeper", 0) == 0);
  // Objects count as levels too, and brackets inside strings do not.
  std::string objects = "\"[[[{{{\"";
  for (int level = 0; level < 70; ++level) objects = "{\"k\": " + objects + "}";
  CHECK(parse_error(objects) == "f.json:1:385: arrays and objects nested deeper than 64 levels; expected at most 64");
}

TEST_CASE("json input: a key twice in one object is refused, naming the key and where") {
  CHECK(parse_error("{\"a\": 1,\n \"b\": 2,\n \"a\": 3}") ==
        "f.json:3:2: key \"a\" appears twice in one object; expected each key once");
  // The same key spelled with an escape is the same key.
  CHECK(parse_error(R"({"layers": [{}, {"name": "x", "n\u0061me": "y"}]})") ==
        "f.json:1:31: layers[1]: key \"name\" appears twice in one object; expected each key once");
  // The same key in two objects is fine.
  const json ok = json_input::parse(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]})", "f.json");
  CHECK(ok["c"][1]["x"] == 4);
}

TEST_CASE("json input: numbers beyond double's range name the field") {
  CHECK(parse_error("{\"layers\": [{\"forward_ms\": 1e999}]}") ==
        "f.json:1:28: layers[0].forward_ms: expected a number between -1.8e308 and 1.8e308, got 1e999");
  CHECK(parse_error("[-1e999]") == "f.json:1:2: [0]: expected a number between -1.8e308 and 1.8e308, got -1e999");
  const std::string digits(400, '7');
  const std::string message = parse_error("{\"microbatch_size\": " + digits + "}");
  CHECK(message.rfind("f.json:1:21: microbatch_size: expected a number between", 0) == 0);
  CHECK(message.size() < 150);
  // Within range, large integers stay exact.
  CHECK(json_input::parse("18446744073709551615", "f.json").get<std::uint64_t>() == 18446744073709551615ull);
}

TEST_CASE("json input: syntax errors name the line and column and quote a short excerpt") {
  CHECK(parse_error("{\n  \"a\": tru\n}").rfind("f.json:2:11: not valid JSON (syntax error", 0) == 0);
  CHECK(parse_error("").rfind("f.json:1:1: not valid JSON", 0) == 0);
  // A megabyte-long string never closed: the token read last is cut short.
  const std::string message = parse_error("{\"a\": \"" + std::string(1 << 20, 'x'));
  CHECK(message.find("not valid JSON") != std::string::npos);
  CHECK(message.size() < 300);
}

TEST_CASE("json input: excerpts are short, whole characters, escaped, and stop where they are cut") {
  CHECK(json_input::describe(json("two")) == "string \"two\"");
  CHECK(json_input::describe(json(2.5)) == "number 2.5");
  CHECK(json_input::describe(json::parse(R"({"a": [1, null, true]})")) == "object {\"a\":[1,null,true]}");
  const std::string megabyte(1 << 20, 'y');
  CHECK(json_input::value_excerpt(json(megabyte)) == std::string("\"").append(36, 'y').append("..."));
  // 64 levels: the deepest the parser lets through, shown by its first brackets.
  const json deep = json_input::parse(nested_arrays(64, "1"), "f.json");
  CHECK(json_input::value_excerpt(deep) == std::string(37, '[') + "...");
  // A cut never splits a UTF-8 character; control characters are escaped.
  std::string accents;
  for (int i = 0; i < 30; ++i) accents += "\xc3\xa9";  // é
  const std::string shown = excerpt(accents);
  CHECK(shown.size() <= kExcerptBytes + 3);
  CHECK(shown.substr(shown.size() - 5) == "\xc3\xa9...");
  CHECK(quoted_excerpt("a\nb\x01") == "\"a\\nb\\x01\"");
  CHECK(quoted_excerpt(megabyte).size() == kExcerptBytes + 5);
}

TEST_CASE("json input: field paths cut keys from the file short") {
  const FieldPath root("f.json");
  CHECK(((root / "layers")[3] / "forward_ms").str() == "f.json: layers[3].forward_ms");
  const std::string key(1 << 20, 'k');
  CHECK((root / key).str() == "f.json: " + std::string(kExcerptBytes, 'k') + "...");
}

TEST_CASE("json input: integers out of range say the range, and nothing wraps") {
  const json hardware = json_input::parse(R"({"gpus_per_node": 2147483648, "big": 18446744073709551615,
    "float_whole": 1e10, "float_huge": 1e300, "half": 2.5, "negative": -1, "text": "8"})",
                                          "hw.json");
  const FieldPath where("hw.json");
  auto integer = [&](const char* key, std::int64_t min_value, std::int64_t max_value) {
    return error_of([&] { (void)json_input::require_integer(hardware, key, where, min_value, max_value); });
  };
  CHECK(integer("gpus_per_node", 1, 1024) ==
        "hw.json: gpus_per_node: expected an integer in [1, 1024], got 2147483648");
  CHECK(integer("big", 0, std::numeric_limits<std::int64_t>::max()) ==
        "hw.json: big: expected an integer in [0, 9223372036854775807], got 18446744073709551615");
  CHECK(integer("float_whole", 1, std::int64_t{1} << 46) == "no error");
  CHECK(json_input::require_integer(hardware, "float_whole", where, 1, std::int64_t{1} << 46) == 10000000000);
  CHECK(integer("float_huge", 1, std::int64_t{1} << 46) ==
        "hw.json: float_huge: expected an integer in [1, 70368744177664], got 1e+300");
  CHECK(integer("half", 0, 10) == "hw.json: half: expected an integer, got number 2.5");
  CHECK(integer("negative", 0, 10) == "hw.json: negative: expected an integer in [0, 10], got -1");
  CHECK(integer("text", 0, 10) == "hw.json: text: expected an integer, got string \"8\"");
  CHECK(integer("missing", 0, 10) == "hw.json: missing: missing (required field)");
}

TEST_CASE("json input: numbers and strings say what was expected") {
  const json doc = json_input::parse(R"({"name": 7, "ms": -1, "format": "x", "rate": 5})", "p.json");
  const FieldPath where("p.json");
  CHECK(error_of([&] { (void)json_input::optional_string(doc, "name", where, "fallback"); }) ==
        "p.json: name: expected a string, got number 7");
  CHECK(json_input::optional_string(doc, "absent", where, "fallback") == "fallback");
  CHECK(error_of([&] { (void)json_input::require_number(doc, "ms", where, 0, 1e9); }) ==
        "p.json: ms: expected a number in [0, 1000000000], got -1");
  CHECK(error_of([&] { (void)json_input::require_number(doc, "rate", where, 10); }) ==
        "p.json: rate: expected a number >= 10, got 5");
  CHECK(error_of([&] { json_input::require_format(doc, "oobleck.thing.v1", where); }) ==
        "p.json: format: expected \"oobleck.thing.v1\", got \"x\"");
  CHECK(error_of([&] { json_input::require_format(json::array(), "oobleck.thing.v1", where); }) ==
        "p.json: expected a JSON object with format \"oobleck.thing.v1\"");
}
