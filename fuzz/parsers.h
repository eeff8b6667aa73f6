// Every parser of hostile input, behind one signature: the fuzz targets of
// this folder and the regression test (tests/fuzz) feed them bytes.
#pragma once

#include <span>
#include <string_view>

namespace oobleck::fuzz {

// Parses `input` as a file of the target's kind. Returns on success and on
// the documented errors of bad input (InputError; NoPlanError for plans);
// anything else escapes: that is a finding.
using Parse = void (*)(std::string_view input);

struct ParserTarget {
  std::string_view name;  // also the folder of its seed corpus and regression inputs
  Parse parse;
};

[[nodiscard]] std::span<const ParserTarget> parser_targets();
// nullptr for an unknown name.
[[nodiscard]] const ParserTarget* find_parser_target(std::string_view name);

}  // namespace oobleck::fuzz
