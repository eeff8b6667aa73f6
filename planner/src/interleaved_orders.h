// Each device's pass order in an interleaved pipeline, and the chunk-
// microbatches it holds in flight, kept for the layouts that share them.
//
// Playing a layout and checking its memory both need every device's order,
// which depends only on (devices, chunks, microbatches); a search plays
// many cuts of one shape, so the orders are made once per shape. A
// device's peak memory is the largest, over the points of its order, of
// sum_c in_flight[c] x bytes[c] (bytes: chunk c's activations of one
// microbatch); only the count vectors after a forward that no other such
// vector covers component by component can be largest, and in steady
// state they repeat, so a device has few of them.
#pragma once

#include <vector>

#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

struct InterleavedOrders {
  int devices = 0, chunks = 0, microbatches = 0;
  std::vector<std::vector<PipelinePass>> order;         // per device
  std::vector<std::vector<std::vector<int>>> in_flight;  // per device, the undominated counts per chunk
};

// The orders of this shape, made on first use and kept per thread
// (shape_cache.h; the reference stays valid until this thread makes the
// orders of a shape not kept).
[[nodiscard]] const InterleavedOrders& interleaved_orders(int devices, int chunks, int microbatches);

}  // namespace oobleck::detail
