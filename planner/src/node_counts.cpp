// Node and pipeline counts that compositions of templates can reach: bitsets
// over pipeline counts per node count, and the quick bounds built on them.
#include "node_counts.h"

#include <algorithm>

#include "composition.h"

namespace oobleck::detail {
namespace {

// Pipeline counts with which templates add up to exactly m nodes, as a bitset
// over counts 0..max_count, for m = 0, 1, ..., nodes in turn. Only the last
// n_max + 1 sets are kept, so memory stays O(n_max * max_count).
class CountSets {
 public:
  CountSets(const TemplateSet& templates, int max_count) : words_(static_cast<std::size_t>(max_count) / 64 + 1) {
    for (const auto& t : templates.templates) sizes_.push_back(t.nodes);
    span_ = sizes_.empty() ? 1 : sizes_.back() + 1;
    ring_.assign(static_cast<std::size_t>(span_), std::vector<std::uint64_t>(words_, 0));
    tail_mask_ = (static_cast<unsigned>(max_count % 64) + 1 < 64)
                     ? (std::uint64_t{1} << (static_cast<unsigned>(max_count % 64) + 1)) - 1
                     : ~std::uint64_t{0};
  }

  // Calls visit(m, bits) for m = 0..nodes.
  template <typename Visit>
  void run(int nodes, Visit&& visit) {
    for (int m = 0; m <= nodes; ++m) {
      auto& bits = ring_[static_cast<std::size_t>(m % span_)];
      std::fill(bits.begin(), bits.end(), 0);
      if (m == 0) bits[0] = 1;
      for (int n : sizes_) {
        if (n > m) break;
        const auto& from = ring_[static_cast<std::size_t>((m - n) % span_)];
        std::uint64_t carry = 0;
        for (std::size_t w = 0; w < words_; ++w) {  // bits << 1: one more pipeline
          bits[w] |= (from[w] << 1) | carry;
          carry = from[w] >> 63;
        }
      }
      bits[words_ - 1] &= tail_mask_;
      visit(m, bits);
    }
  }

 private:
  std::size_t words_;
  std::vector<int> sizes_;  // increasing
  int span_ = 1;
  std::vector<std::vector<std::uint64_t>> ring_;
  std::uint64_t tail_mask_;
};

}  // namespace

CountSet counts_for(const TemplateSet& templates, int nodes, int max_count) {
  const int n_min = templates.min_nodes();
  const int n_max = templates.templates.empty() ? 0 : templates.templates.back().nodes;
  if (!templates.templates.empty() && static_cast<int>(templates.templates.size()) == n_max - n_min + 1) {
    // Every size in [n_min, n_max]: c pipelines make exactly the node
    // counts in [c n_min, c n_max] (usable_nodes below).
    CountSet out(static_cast<std::size_t>(max_count) / 64 + 1, 0);
    for (int c = nodes == 0 ? 0 : 1; c <= max_count; ++c) {
      if (static_cast<long long>(c) * n_min <= nodes && nodes <= static_cast<long long>(c) * n_max) {
        out[static_cast<std::size_t>(c) / 64] |= std::uint64_t{1} << (static_cast<unsigned>(c) % 64);
      }
    }
    return out;
  }
  CountSet out;
  CountSets(templates, max_count).run(nodes, [&](int m, const std::vector<std::uint64_t>& bits) {
    if (m == nodes) out = bits;
  });
  return out;
}

int pipeline_limit(const TemplateSet& templates, int nodes, int global_microbatches) {
  const int smallest = templates.min_nodes();
  if (smallest <= 0 || nodes < smallest) return 0;
  return std::min(global_microbatches, nodes / smallest);
}

int most_pipelines(const TemplateSet& templates, int nodes, int limit) {
  // Nodes may stay unused, so pipelines of the smallest template are the most.
  return pipeline_limit(templates, nodes, limit);
}

int usable_nodes(const TemplateSet& templates, int nodes, int min_pipelines, int global_microbatches) {
  const int count_limit = pipeline_limit(templates, nodes, global_microbatches);
  if (count_limit == 0 || count_limit < min_pipelines) return 0;
  const int n_min = templates.min_nodes();
  const int n_max = templates.templates.back().nodes;
  if (static_cast<int>(templates.templates.size()) == n_max - n_min + 1) {
    // Every size in [n_min, n_max]: c pipelines make exactly the node counts
    // in [c n_min, c n_max].
    for (int m = nodes; m >= 1; --m) {
      const int c_lo = std::max({min_pipelines, 1, (m + n_max - 1) / n_max});
      const int c_hi = std::min(count_limit, m / n_min);
      if (c_lo <= c_hi) return m;
    }
    return 0;
  }
  int best = 0;
  CountSets(templates, count_limit).run(nodes, [&](int m, const std::vector<std::uint64_t>& bits) {
    for (int c = std::max(min_pipelines, 1); c <= count_limit; ++c) {
      if (has(bits, c)) {
        best = m;
        return;
      }
    }
  });
  return best;
}

bool may_take(const TemplateSet& templates, int nodes, int global_microbatches) {
  long long most_each = 0;
  for (const auto& t : templates.templates) {
    if (t.nodes > nodes) continue;
    if (t.max_microbatches == 0) return true;  // no memory limit on microbatches
    most_each = std::max<long long>(most_each, t.max_microbatches);
  }
  const int smallest = templates.min_nodes();
  if (smallest <= 0 || nodes < smallest) return false;
  return static_cast<long long>(nodes / smallest) * most_each >= global_microbatches;
}

}  // namespace oobleck::detail
