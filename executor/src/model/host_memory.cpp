#include "model/host_memory.h"

#include <malloc.h>

namespace oobleck::executor {

void keep_freed_host_memory() {
  // Large blocks come from the heap, not from their own mappings, and the
  // heap's top is never given back: a step's peak stays allocated.
  constexpr int kLargest = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kLargest);
  mallopt(M_TRIM_THRESHOLD, kLargest);
}

}  // namespace oobleck::executor
