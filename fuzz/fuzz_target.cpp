// One libFuzzer target: the parser named by OOBLECK_FUZZ_TARGET (parsers.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "parsers.h"

namespace {

const oobleck::fuzz::ParserTarget& this_target() {
  static const oobleck::fuzz::ParserTarget* target = [] {
    const auto* found = oobleck::fuzz::find_parser_target(OOBLECK_FUZZ_TARGET);
    if (!found) {
      std::fprintf(stderr, "fuzz: no parser named %s\n", OOBLECK_FUZZ_TARGET);
      std::abort();
    }
    return found;
  }();
  return *target;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  this_target().parse(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
