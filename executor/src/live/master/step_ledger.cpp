#include "step_ledger.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace oobleck::executor {

StepLedger::Total StepLedger::total(int step) {
  Total out;
  std::vector<std::pair<int, int>> ranges;
  for (const auto& [rank, r] : reports_[step]) {
    out.loss += r.loss;
    for (const auto& range : r.samples) ranges.emplace_back(range.first, range.count);
  }
  reports_.erase(step);
  std::sort(ranges.begin(), ranges.end());
  for (const auto& [first, count] : ranges) {
    if (first != out.samples) {
      throw std::runtime_error("step " + std::to_string(step) + ": the pipelines' samples do not tile the batch (" +
                               std::to_string(first) + " where " + std::to_string(out.samples) + " was expected)");
    }
    out.samples += count;
  }
  if (out.samples != expected_) {
    throw std::runtime_error("step " + std::to_string(step) + ": " + std::to_string(out.samples) +
                             " samples, expected " + std::to_string(expected_));
  }
  return out;
}

}  // namespace oobleck::executor
