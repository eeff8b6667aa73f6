// The project's small vocabulary, shared by every part: units, the errors
// that carry what a user must hear, exit statuses and progress reports.
//
// Units travel in names: `_ms` milliseconds, `_bytes` bytes,
// `_bytes_per_s` bytes per second.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string_view>

namespace oobleck {

using Milliseconds = double;
using Bytes = std::int64_t;

// Bad input: the message names the file, line or field and what was expected.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// No plan exists for the surviving nodes; training state must come from a
// checkpoint. The message says why (too few nodes, or layers without replica).
class NoPlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit statuses of every program.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;   // anything unexpected; a live run that could not go on
inline constexpr int kExitBadInput = 2;  // InputError
inline constexpr int kExitNoPlan = 3;    // NoPlanError

// One line of progress for people (stderr); may be empty.
using Progress = std::function<void(std::string_view)>;

}  // namespace oobleck
