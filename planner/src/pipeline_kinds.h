// Templates as the composition search sees them: a pipeline kind's slot
// times T(q) = T(1) + (q-1) x bottleneck, how many microbatches it finishes
// within a time, and the min-max split of a batch over pipelines of given
// kinds. Small and inline: the search calls them in its inner loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A pipeline's time with q microbatches is T(q) = first + (q-1) x step.
struct Kind {
  int nodes = 0;
  double first = 0;  // T(1)
  double step = 0;   // bottleneck: T(q+1) - T(q)
  int limit = 0;     // most microbatches (memory, and never more than B); 0: not allowed
};

[[nodiscard]] inline Kind kind_of_template(const PipelineTemplate& t, int global_microbatches) {
  const int limit = t.max_microbatches > 0 ? std::min(t.max_microbatches, global_microbatches) : global_microbatches;
  return {t.nodes, t.first_microbatch_ms, t.bottleneck_ms, limit};
}

// The kinds of the templates with at most `max_nodes` nodes, by increasing size.
[[nodiscard]] inline std::vector<Kind> kinds_of(const TemplateSet& templates, int max_nodes, int global_microbatches) {
  std::vector<Kind> kinds;
  for (const auto& t : templates.templates) {
    if (t.nodes <= max_nodes) kinds.push_back(kind_of_template(t, global_microbatches));
  }
  return kinds;
}

[[nodiscard]] inline double slot_time(const Kind& k, int q) { return k.first + (q - 1) * k.step; }

// Microbatches a pipeline of kind k can finish within `limit_ms`.
[[nodiscard]] inline int capacity(const Kind& k, double limit_ms) {
  if (!(k.first <= limit_ms)) return 0;
  if (k.step <= 0 || limit_ms == kInfinity) return k.limit;
  const double estimate = std::floor((limit_ms - k.first) / k.step) + 1;
  int q = estimate >= k.limit ? k.limit : std::max(1, static_cast<int>(estimate));
  while (q > 1 && slot_time(k, q) > limit_ms) --q;
  while (q < k.limit && slot_time(k, q + 1) <= limit_ms) ++q;
  return q;
}

// The min-max split of B microbatches over counts[i] pipelines of kind i,
// each at least one and at most its limit. Pipelines of one kind are
// interchangeable, so per kind all run `level` microbatches except `raised`
// of them, which run level + 1.
struct KindSplit {
  std::vector<int> level, raised;
  double slowest_ms = kInfinity;  // infinite when B does not fit
};

[[nodiscard]] KindSplit split_by_kind(const std::vector<Kind>& kinds, const std::vector<int>& counts, int B);

}  // namespace oobleck::detail
