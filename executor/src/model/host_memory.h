// Host memory for training on CPU. A step allocates and frees the same large
// tensors every microbatch (activations, logits, gradients). By default
// glibc hands such blocks back to the kernel when they are freed (munmap,
// heap trimming), so every microbatch page-faults them in again: on this
// project's 2-core machine that made a 2-stage GPT-mini pipeline's step
// 2,050 ms instead of 1,330 ms, and a worker's passes 2x slower than the
// same layers measured alone. Keeping freed memory in the process for reuse,
// as libtorch's CUDA caching allocator does on a GPU, removes that.
#pragma once

namespace oobleck::executor {

// Every process that trains or measures calls this first; idempotent.
void keep_freed_host_memory();

}  // namespace oobleck::executor
