// Exact feasibility of a pipeline count within a time limit (tube_search.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipeline_kinds.h"

namespace oobleck::detail {

// A dynamic programme over (pipelines so far, nodes so far) in the Steinitz
// tube. Reusable: its tables keep their memory between calls.
class TubeSearch {
 public:
  // Counts per kind of `pipelines` pipelines of total size `nodes` that take
  // at least `target` microbatches when kind i takes at most caps[i] (0:
  // unusable); nullopt when there are none.
  std::optional<std::vector<int>> solve(const std::vector<Kind>& kinds, const std::vector<int>& caps, int nodes,
                                        int pipelines, int target);

 private:
  [[nodiscard]] int cell(std::int64_t k, std::int64_t s) const { return value_[offset_[k] + (s - lo_[k])]; }

  std::vector<int> usable_;
  std::vector<std::int64_t> lo_, hi_, offset_;
  std::vector<int> value_;
};

}  // namespace oobleck::detail
