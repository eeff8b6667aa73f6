#include "oobleck/recovery/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace oobleck::recovery {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

StragglerDetector::StragglerDetector(StragglerOptions options) : o_(options) {
  o_.steps = std::max(1, o_.steps);
}

bool StragglerDetector::observe(const std::map<std::string, Milliseconds>& measured_ms,
                                const std::map<std::string, Milliseconds>& predicted_ms) {
  std::map<std::string, double> ratio;  // predicted / measured
  for (const auto& [node, measured] : measured_ms) {
    const auto p = predicted_ms.find(node);
    if (p == predicted_ms.end() || !(measured > 0) || !(p->second > 0) || !std::isfinite(measured)) continue;
    ratio[node] = p->second / measured;
  }
  if (ratio.empty()) return false;
  std::vector<double> values;
  for (const auto& [node, r] : ratio) values.push_back(r);
  const double typical = median(values);
  for (const auto& [node, r] : ratio) {
    const double speed = std::clamp(r / typical, kMinNodeSpeed, kMaxNodeSpeed);
    last_[node] = speed;
    auto& h = history_[node];
    h.push_back(speed);
    while (static_cast<int>(h.size()) > o_.steps) h.pop_front();
  }
  const NodeSpeeds before = flagged_;
  for (const auto& [node, h] : history_) {
    if (static_cast<int>(h.size()) < o_.steps) continue;
    const bool all_slow = std::all_of(h.begin(), h.end(), [&](double s) { return s < o_.slow_below; });
    const bool all_well = std::all_of(h.begin(), h.end(), [&](double s) { return s > o_.recovered_above; });
    const auto it = flagged_.find(node);
    if (it == flagged_.end()) {
      if (all_slow) flagged_[node] = median({h.begin(), h.end()});
    } else if (all_well) {
      flagged_.erase(it);
    } else {
      const double now = median({h.begin(), h.end()});
      if (std::abs(now - it->second) > o_.change * it->second && now < o_.recovered_above) it->second = now;
    }
  }
  return flagged_ != before;
}

void StragglerDetector::forget(const std::string& node) {
  history_.erase(node);
  last_.erase(node);
  flagged_.erase(node);
}

}  // namespace oobleck::recovery
