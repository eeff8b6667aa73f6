// The chunk-microbatches each device of an interleaved pipeline holds in
// flight, kept for the layouts that share them.
//
// Checking a layout's memory needs them for every device, and they depend
// only on (devices, chunks, microbatches); a search checks many cuts of
// one shape, so they are made once per shape. A device's peak memory is
// the largest, over the points of its order, of sum_c in_flight[c] x
// bytes[c] (bytes: chunk c's activations of one microbatch); only the
// count vectors after a forward that no other such vector covers
// component by component can be largest, and in steady state they repeat,
// so a device has few of them.
#pragma once

#include <vector>

#include "oobleck/common/one_f_one_b.h"

namespace oobleck::detail {

struct InterleavedOrders {
  int devices = 0, chunks = 0, microbatches = 0;
  std::vector<std::vector<std::vector<int>>> in_flight;  // per device, the undominated counts per chunk
};

// The counts in flight of this shape's devices (in their orders,
// interleaved_one_f_one_b), made on first use and kept per thread
// (shape_cache.h; the reference stays valid until this thread makes those
// of a shape not kept). A play keeps its own order of the passes
// (played_pipeline.cpp), not the devices'.
[[nodiscard]] const InterleavedOrders& interleaved_orders(int devices, int chunks, int microbatches);

}  // namespace oobleck::detail
