// What reading and generating traces share: the limits every trace keeps,
// node names and how times print.
#pragma once

#include <cstddef>
#include <string>

#include "oobleck/sim/trace.h"

namespace oobleck::sim::trace_internal {

// Whole milliseconds up to 2^53 are exact in a double and in llround, so every
// time we produce prints and parses back unchanged.
inline constexpr double kMaxTraceMs = 9007199254740992.0;
// Generators refuse to build traces larger than a file may hold rather than
// exhaust memory on a mistyped rate or duration.
inline constexpr std::size_t kMaxGeneratedEvents = kTraceLimits.events;
inline constexpr double kMsPerHour = 3'600'000.0;

// Shortest decimal that parses back to the same double, never in exponent
// form (so the trace reader accepts it): integers print without a point.
[[nodiscard]] std::string format_decimal(double value);

// "node1", "node2", ... for index 0, 1, ...
[[nodiscard]] std::string node_name(int index);

}  // namespace oobleck::sim::trace_internal
