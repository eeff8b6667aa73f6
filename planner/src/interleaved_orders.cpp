// Derivation in interleaved_orders.h.
#include "interleaved_orders.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>

namespace oobleck::detail {
namespace {

InterleavedOrders make_orders(int devices, int chunks, int microbatches) {
  InterleavedOrders out{devices, chunks, microbatches, {}, {}};
  for (int d = 0; d < devices; ++d) {
    out.order.push_back(interleaved_one_f_one_b(d, devices, chunks, microbatches));
    std::vector<std::vector<int>> peaks;
    std::vector<int> held(static_cast<std::size_t>(chunks), 0);
    for (const PipelinePass& pass : out.order.back()) {
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
  // Round robin over a few shapes: a search plays one shape many times in
  // a row, and an order of D devices holds 2 D v M passes.
  constexpr std::size_t kKept = 8;
  thread_local std::array<std::unique_ptr<InterleavedOrders>, kKept> kept;
  thread_local std::size_t oldest = 0;
  for (const auto& k : kept) {
    if (k && k->devices == devices && k->chunks == chunks && k->microbatches == microbatches) return *k;
  }
  auto& slot = kept[oldest];
  oldest = (oldest + 1) % kKept;
  slot = std::make_unique<InterleavedOrders>(make_orders(devices, chunks, microbatches));
  return *slot;
}

}  // namespace oobleck::detail
