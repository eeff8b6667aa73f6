// The traces of an experiment, percentiles, and string formatting for the
// experiments' summaries.
#include "oobleck/sim/experiment.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "experiment_internal.h"

namespace oobleck::sim {

std::shared_ptr<const Trace> TraceSet::trace_for_run(int run) const {
  if (given) return given;
  return std::make_shared<const Trace>(
      generate_trace(spec, spec.seed + static_cast<std::uint64_t>(run), default_gpus_per_node));
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const auto high = std::min(values.size() - 1, low + 1);
  return values[low] + (values[high] - values[low]) * (position - static_cast<double>(low));
}

namespace experiment_internal {

std::string formatted(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(static_cast<std::size_t>(std::max(length, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.pop_back();  // the terminating NUL
  return out;
}

}  // namespace experiment_internal

}  // namespace oobleck::sim
