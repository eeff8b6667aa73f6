// Derivation in interleaved_orders.h.
#include "interleaved_orders.h"

#include <algorithm>
#include <cstddef>

#include "shape_cache.h"

namespace oobleck::detail {
namespace {

InterleavedOrders make_orders(int devices, int chunks, int microbatches) {
  InterleavedOrders out{devices, chunks, microbatches, {}};
  for (int d = 0; d < devices; ++d) {
    std::vector<std::vector<int>> peaks;
    std::vector<int> held(static_cast<std::size_t>(chunks), 0);
    for (const PipelinePass& pass : interleaved_one_f_one_b(d, devices, chunks, microbatches)) {
      held[static_cast<std::size_t>(pass.chunk)] += pass.forward ? 1 : -1;
      if (!pass.forward) continue;
      const auto covers = [](const std::vector<int>& a, const std::vector<int>& b) {
        for (std::size_t c = 0; c < a.size(); ++c) {
          if (a[c] < b[c]) return false;
        }
        return true;
      };
      if (std::any_of(peaks.begin(), peaks.end(), [&](const auto& p) { return covers(p, held); })) continue;
      std::erase_if(peaks, [&](const auto& p) { return covers(held, p); });
      peaks.push_back(held);
    }
    out.in_flight.push_back(std::move(peaks));
  }
  return out;
}

}  // namespace

const InterleavedOrders& interleaved_orders(int devices, int chunks, int microbatches) {
  // A shape of D devices has 2 D v M passes; up to 2^21 of them are
  // counted as kept (what is kept of them is a few count vectors a device,
  // but a shape that long takes as long to make again).
  thread_local ShapeCache<InterleavedOrders> kept(std::size_t{1} << 21);
  return kept.get(devices, chunks, microbatches, [&] { return make_orders(devices, chunks, microbatches); });
}

}  // namespace oobleck::detail
