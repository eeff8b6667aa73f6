// A lower bound on the steady period of every layout on a number of GPUs,
// which ends the template search's walks (period_floor.cpp).
#pragma once

#include <map>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

class PeriodFloor {
 public:
  explicit PeriodFloor(const CostModel& cost);
  // On n whole nodes, and on u GPUs (memoised).
  [[nodiscard]] double at(int nodes) { return on_gpus(nodes * gpus_); }
  [[nodiscard]] double on_gpus(int gpus);

 private:
  [[nodiscard]] long fewest_gpus(double limit);

  struct Variant {
    int degree;
    Recompute recompute;
  };
  int gpus_, layers_;
  std::vector<Variant> variants_;
  std::vector<std::vector<double>> compute_;  // prefix sums per variant
  std::vector<double> limits_;                // every stage's compute, sorted, distinct
  double gpu_time_ = 0;                       // every layer at its least GPU-time
  double layer_floor_ = 0;                    // the costliest layer at its cheapest
  std::map<int, double> cache_;
  std::vector<long> fewest_;
  std::vector<int> reach_;
};

}  // namespace oobleck::detail
