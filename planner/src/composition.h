// Choosing how many pipelines of each template to run and how to split the
// global batch among them: shared by instantiation and reconfiguration.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// One pipeline per entry: its template's node count and its microbatches.
struct Composition {
  std::vector<int> template_nodes;  // by decreasing size
  std::vector<int> microbatches;
  Milliseconds pipelines_ms = 0;  // slowest pipeline, played (played_pipeline.h)
  std::vector<Milliseconds> pipeline_ms;  // each pipeline's passes, played
  Milliseconds sync_ms = 0;       // iteration_ms - pipelines_ms
  Milliseconds iteration_ms = 0;  // the synchronised iteration (synced_iteration.h)
  std::int64_t steps = 0;  // the search's work: evaluations of its relaxations and feasibility tests
};

// The integer split of `global_microbatches` (each pipeline at least one, at
// most its memory limit) minimising the slowest pipeline; empty if none.
[[nodiscard]] std::vector<int> split_microbatches(const std::vector<const PipelineTemplate*>& pipelines,
                                                  int global_microbatches);

// Largest pipeline count formable from at most `nodes` nodes, at most `limit`.
[[nodiscard]] int most_pipelines(const TemplateSet& templates, int nodes, int limit);

// Templates' iteration tails (CostModel::iteration_tail_ms) at the
// pipeline counts a search priced them at, kept for the next search: a tail
// depends on the template's stages and on the cost model's synchronisation
// and optimizer, not on M, and instantiation's rounds over M search
// templates that are mostly the same (GPT-3 175B on 2,048 nodes at K = 2:
// 93, then 179, of 192). One memo serves searches with one profile and
// one synchronisation only.
class TailMemo {
 public:
  // The kept tails of `stages` by pipeline count; NaN where not priced yet.
  [[nodiscard]] std::vector<double>& of(const std::vector<Stage>& stages);

 private:
  std::map<std::vector<Stage>, std::vector<double>> kept_;
};

// The composition of exactly `nodes` nodes into pipelines that, next to the
// pipelines of `fixed_sizes` (there regardless, their nodes not counted in
// `nodes`), makes at least `min_pipelines` pipelines and minimises the
// iteration time; nullopt when none exists. Tails are taken from and kept
// in `tails`, if given.
[[nodiscard]] std::optional<Composition> best_composition(const CostModel& cost, const TemplateSet& templates,
                                                          int nodes, int min_pipelines, int global_microbatches,
                                                          const std::vector<int>& fixed_sizes = {},
                                                          TailMemo* tails = nullptr);

// The most nodes, at most `nodes`, that some composition with at least
// `min_pipelines` pipelines (and at most `global_microbatches`) uses; 0 if none.
[[nodiscard]] int usable_nodes(const TemplateSet& templates, int nodes, int min_pipelines, int global_microbatches);

// The best composition with at least `min_pipelines` pipelines on as many of
// `nodes` nodes as any such composition can use (memory limits on
// microbatches may rule out the largest node counts); nullopt when none.
[[nodiscard]] std::optional<Composition> best_composition_on_most_nodes(const CostModel& cost,
                                                                       const TemplateSet& templates, int nodes,
                                                                       int min_pipelines, int global_microbatches,
                                                                       TailMemo* tails = nullptr);

// False when no composition of at most `nodes` nodes can take B microbatches
// within the templates' memory limits on microbatches (a quick bound).
[[nodiscard]] bool may_take(const TemplateSet& templates, int nodes, int global_microbatches);

[[nodiscard]] Composition evaluate_composition(const CostModel& cost, const TemplateSet& templates,
                                               std::vector<int> template_nodes, int global_microbatches);

}  // namespace oobleck::detail
