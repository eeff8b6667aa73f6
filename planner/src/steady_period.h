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
// so the period is at least R_s / (S - s) for every s. It is also at least
// every stage's own c_s (one forward and one backward per microbatch) and
// every link's C_s (a link carries one microbatch each way per period). The
// period is the largest of these (the maximum cycle mean of 1F1B's
// dependency graph; oobleck-sim plays it). With short transfers the slowest
// stage sets it; where transfers are long beside the compute, the round trip
// does: stage 0's R_0 / S = mean compute + 2 (S - 1) / S x mean transfer.
#pragma once

#include <algorithm>
#include <vector>

#include "oobleck/common.h"

namespace oobleck::detail {

// compute: c_0..c_{S-1}; transfers: C_0..C_{S-2} (one way, s to s + 1).
inline Milliseconds steady_period_ms(const std::vector<Milliseconds>& compute,
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
