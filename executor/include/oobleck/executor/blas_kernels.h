// OpenBLAS picks its matrix kernels by the CPU's model number. On a CPU it
// does not know, such as a virtual machine's "Intel(R) Xeon(R) Processor",
// it falls back to its oldest SSE3 kernels ("Prescott"), which run 4x slower
// than its AVX-512 ones on the same core. It reads OPENBLAS_CORETYPE once,
// as it loads, before main() runs.
#pragma once

namespace oobleck::executor {

// The OpenBLAS core type this CPU's instruction sets call for ("SkylakeX"
// with AVX-512 F, BW, DQ and VL; "Haswell" with AVX2 and FMA), or "" where
// neither applies.
[[nodiscard]] const char* best_blas_core_type();

// Called first thing in main(): where OpenBLAS is loaded with kernels older
// than the CPU's best and OPENBLAS_CORETYPE is unset, sets it and executes
// this program again with the same arguments, once. Processes it starts
// inherit the setting, so every process of a run computes with the same
// kernels (the same rounding). Does nothing under another BLAS, or when
// OPENBLAS_CORETYPE is already set (to anything: the user's choice stands).
void use_best_blas_kernels(char** argv);

}  // namespace oobleck::executor
