// A test that cannot run here says so and is reported as skipped, not
// passed: CTest marks a test skipped when its output has "SKIPPED: "
// (tests/CMakeLists.txt), which only this macro prints.
#pragma once

#include <doctest/doctest.h>

#define OOBLECK_SKIP(reason)          \
  do {                                \
    MESSAGE("SKIPPED: " << reason);   \
    return;                           \
  } while (false)
