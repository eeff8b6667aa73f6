// 1F1B's steady-state period: how often a pipeline finishes a microbatch
// once it is full.
//
// Stage s of S (compute c_s: a microbatch's forward and backward) runs, after
// its warm-up, B(m) then F(m + S - s): it holds S - s microbatches in flight.
// Its forward of m + S - s therefore waits for its backward of m, and that
// backward for the round trip through every later stage: the transfer to
// s + 1 (C_s, one way), the forwards and backwards of stages s + 1 .. S - 1
// and the transfers between them, and the transfer back. Over S - s
// microbatches that cycle takes
//   R_s = c_s + ... + c_{S-1} + 2 (C_s + ... + C_{S-2}),
// so the period is at least R_s / (S - s) for every s.
//
// Every run of consecutive stages s..e cycles the same way, not only the
// suffixes: stage e runs F(j) then B(j - (S - e) + 1), and stage s runs
// B(i) then F(i + S - s), so from stage s's F(i) the forwards to e, e's
// next backward and the backwards back to s lead to stage s's F of
// i + (e - s + 1): the run's compute and transfers both ways,
//   R_{s,e} = c_s + ... + c_e + 2 (C_s + ... + C_{e-1}),
// over e - s + 1 microbatches. The period is also at least every link's
// C_s (a link carries one microbatch each way per period); the largest of
// these is the maximum cycle mean of 1F1B's dependency graph, which
// oobleck-sim plays. With short transfers the slowest stage (the run of
// one) sets it; where transfers are long beside the compute, a long run
// does: a run of k equal stages gives c + 2 (k - 1) / k x C.
//
// The exact template search bounds the suffixes' round trips alone
// (suffix_period_ms: the bound is then one on its own programme's value,
// template_search.cpp) and prices what it finds with every run (steady_period_ms).
#pragma once

#include <algorithm>
#include <vector>

#include "oobleck/common.h"

namespace oobleck::detail {

// The mean of run first..last: (c_first + ... + c_last + 2 (C_first + ... +
// C_{last-1})) / (last - first + 1), summed in that order.
inline Milliseconds run_mean_ms(const std::vector<Milliseconds>& compute, const std::vector<Milliseconds>& transfers,
                                std::size_t first, std::size_t last) {
  Milliseconds run = 0;
  for (std::size_t j = first; j <= last; ++j) run += compute[j] + (j < last ? 2 * transfers[j] : 0.0);
  return run / static_cast<double>(last - first + 1);
}

// The period and what sets it: the run of stages first..last, or (where
// a link's transfer is longer than every run's mean) link `first`.
struct SteadyPeriod {
  Milliseconds ms = 0;
  bool link = false;
  std::size_t first = 0, last = 0;
};

// compute: c_0..c_{S-1}; transfers: C_0..C_{S-2} (one way, s to s + 1).
// The run of greatest mean by Dinkelbach's method: from a mean lambda, the
// run with the greatest sum of (its terms - lambda) (a stage inside a run
// brings c_j + 2 C_j, its last stage c_e) is found in one pass, Kadane's;
// while that sum is positive its mean is larger, and lambda takes it. Each
// pass is O(S) and lambda only grows, so it ends, at the largest mean.
inline SteadyPeriod steady_period(const std::vector<Milliseconds>& compute,
                                  const std::vector<Milliseconds>& transfers) {
  SteadyPeriod link{0, true, 0, 0};
  for (std::size_t j = 0; j < transfers.size(); ++j) {
    if (transfers[j] > link.ms) link = {transfers[j], true, j, j};
  }
  const std::size_t count = compute.size();
  if (count == 0) return link;
  const auto widest = std::max_element(compute.begin(), compute.end());
  Milliseconds lambda = *widest;
  std::size_t run_first = static_cast<std::size_t>(widest - compute.begin()), run_last = run_first;
  while (true) {
    double best = 0, open = 0;  // open: the best sum of interior terms ending at the stage before
    std::size_t best_begin = 0, best_end = 0, open_begin = 0;
    bool better = false, any_open = false;
    for (std::size_t e = 0; e < count; ++e) {
      const bool extend = any_open && open > 0;
      const double gain = compute[e] - lambda + (extend ? open : 0.0);
      if (gain > best) {
        best = gain;
        best_begin = extend ? open_begin : e;
        best_end = e;
        better = true;
      }
      if (e + 1 < count) {
        const double inside = compute[e] + 2 * transfers[e] - lambda;
        if (extend) {
          open += inside;
        } else {
          open = inside;
          open_begin = e;
        }
        any_open = true;
      }
    }
    if (!better) break;
    const Milliseconds mean = run_mean_ms(compute, transfers, best_begin, best_end);
    if (!(mean > lambda)) break;  // rounding: no run is larger
    lambda = mean;
    run_first = best_begin;
    run_last = best_end;
  }
  if (link.ms > lambda) return link;
  return {lambda, false, run_first, run_last};
}

inline Milliseconds steady_period_ms(const std::vector<Milliseconds>& compute,
                                     const std::vector<Milliseconds>& transfers) {
  return steady_period(compute, transfers).ms;
}

// The same bound over the stages alone and the suffixes s..S-1. O(S).
inline Milliseconds suffix_period_ms(const std::vector<Milliseconds>& compute,
                                     const std::vector<Milliseconds>& transfers) {
  Milliseconds period = 0, round_trip = 0;
  for (Milliseconds c : transfers) period = std::max(period, c);
  const std::size_t count = compute.size();
  for (std::size_t s = count; s-- > 0;) {
    period = std::max(period, compute[s]);
    round_trip += compute[s] + (s + 1 < count ? 2 * transfers[s] : 0.0);
    period = std::max(period, round_trip / static_cast<double>(count - s));
  }
  return period;
}

}  // namespace oobleck::detail
