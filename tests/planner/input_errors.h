// The message a parser refuses its input with ("no error" when it takes
// it), for tests of bad profiles and plans.
#pragma once

#include <string>

#include "oobleck/planner.h"

namespace oobleck::test {

template <typename Parse>
[[nodiscard]] std::string input_error(Parse&& parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

[[nodiscard]] inline std::string profile_error(const std::string& text, const std::string& origin = "p.json") {
  return input_error([&] { (void)parse_profile(text, origin); });
}

[[nodiscard]] inline std::string plan_error(const std::string& text, const Profile& profile,
                                            const std::string& origin = "plan.json") {
  return input_error([&] { (void)parse_plan(text, origin, profile); });
}

}  // namespace oobleck::test
