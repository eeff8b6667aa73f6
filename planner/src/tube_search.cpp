// Exact feasibility for the instantiation search (composition.cpp): can p
// pipelines whose sizes add up to N take B microbatches, when a pipeline of
// kind i takes at most c_i within the time limit?
//
// A dynamic programme over (pipelines so far, nodes so far) keeps the most
// microbatches reachable. By the one-dimensional Steinitz lemma the
// pipelines of any solution can be ordered so that after k of them the node
// count stays within [k N/p - (N/p - n_min), k N/p + (n_max - N/p)], so only
// that tube is stored: O(p (n_max - n_min + 1) K) for K kinds.
#include "tube_search.h"

#include <algorithm>
#include <climits>

namespace oobleck::detail {
namespace {

[[nodiscard]] std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
[[nodiscard]] std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

}  // namespace

std::optional<std::vector<int>> TubeSearch::solve(const std::vector<Kind>& kinds, const std::vector<int>& caps,
                                                  int nodes, int pipelines, int target) {
  usable_.clear();
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (caps[i] > 0) usable_.push_back(static_cast<int>(i));
  }
  if (usable_.empty()) return std::nullopt;
  std::int64_t n_lo = INT_MAX, n_hi = 0;
  for (int i : usable_) {
    n_lo = std::min<std::int64_t>(n_lo, kinds[i].nodes);
    n_hi = std::max<std::int64_t>(n_hi, kinds[i].nodes);
  }
  const std::int64_t N = nodes, p = pipelines;
  if (p * n_lo > N || p * n_hi < N) return std::nullopt;
  lo_.assign(p + 1, 0);
  hi_.assign(p + 1, 0);
  offset_.assign(p + 2, 0);
  for (std::int64_t k = 0; k <= p; ++k) {
    lo_[k] = std::max({k * n_lo, N - (p - k) * n_hi, ceil_div(k * N - (N - p * n_lo), p)});
    hi_[k] = std::min({k * n_hi, N - (p - k) * n_lo, floor_div(k * N + (p * n_hi - N), p)});
    if (hi_[k] < lo_[k]) return std::nullopt;
    offset_[k + 1] = offset_[k] + (hi_[k] - lo_[k] + 1);
  }
  constexpr int kUnreachable = INT_MIN / 2;
  const int B = std::max(target, 0);  // values saturate here
  value_.assign(offset_[p + 1], kUnreachable);
  value_[0] = 0;
  for (std::int64_t k = 1; k <= p; ++k) {
    int* cur = value_.data() + offset_[k];
    const int* prev = value_.data() + offset_[k - 1];
    for (int i : usable_) {
      const std::int64_t n = kinds[i].nodes;
      const int c = caps[i];
      const std::int64_t s_begin = std::max(lo_[k], lo_[k - 1] + n);
      const std::int64_t s_end = std::min(hi_[k], hi_[k - 1] + n);
      for (std::int64_t s = s_begin; s <= s_end; ++s) {
        const int candidate = std::min(B, prev[s - n - lo_[k - 1]] + c);
        int& slot = cur[s - lo_[k]];
        slot = std::max(slot, candidate);
      }
    }
    for (std::int64_t s = 0; s <= hi_[k] - lo_[k]; ++s) {
      if (cur[s] < 0) cur[s] = kUnreachable;
    }
  }
  if (cell(p, N) < B) return std::nullopt;
  // Walk back: any kind whose predecessor explains the value.
  std::vector<int> counts(kinds.size(), 0);
  std::int64_t s = N;
  for (std::int64_t k = p; k >= 1; --k) {
    const int v = cell(k, s);
    bool found = false;
    for (int i : usable_) {
      const std::int64_t prev_s = s - kinds[i].nodes;
      if (prev_s < lo_[k - 1] || prev_s > hi_[k - 1]) continue;
      const int pv = cell(k - 1, prev_s);
      if (pv >= 0 && std::min(B, pv + caps[i]) == v) {
        ++counts[i];
        s = prev_s;
        found = true;
        break;
      }
    }
    if (!found) return std::nullopt;  // unreachable by construction
  }
  return counts;
}

}  // namespace oobleck::detail
