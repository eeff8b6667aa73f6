// Which pipeline counts the templates can form on a given node count
// (node_counts.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// A bitset over pipeline counts 0..max_count.
using CountSet = std::vector<std::uint64_t>;

[[nodiscard]] inline bool has(const CountSet& bits, int c) {
  return (bits[static_cast<std::size_t>(c) / 64] >> (c % 64)) & 1u;
}

// The pipeline counts, up to `max_count`, with which templates add up to
// exactly `nodes` nodes.
[[nodiscard]] CountSet counts_for(const TemplateSet& templates, int nodes, int max_count);

// Pipelines of the smallest template that fit on `nodes` nodes, at most
// `global_microbatches` (every pipeline takes one at least); 0 when none.
[[nodiscard]] int pipeline_limit(const TemplateSet& templates, int nodes, int global_microbatches);

}  // namespace oobleck::detail
