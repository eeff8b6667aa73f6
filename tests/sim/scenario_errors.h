// The message parse_scenario refuses a scenario with ("no error" when it
// takes it), for tests of bad input.
#pragma once

#include <string>

#include "oobleck/common.h"
#include "oobleck/sim/replay.h"

namespace oobleck::sim {

inline std::string scenario_error(const std::string& text, const std::string& origin) {
  try {
    (void)parse_scenario(text, origin);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace oobleck::sim
