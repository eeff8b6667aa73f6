#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "oobleck/executor/blas_kernels.h"

// The tests compute with the kernels the programs they start use, so that
// results compare bit for bit.
int main(int argc, char** argv) {
  oobleck::executor::use_best_blas_kernels(argv);
  return doctest::Context(argc, argv).run();
}
