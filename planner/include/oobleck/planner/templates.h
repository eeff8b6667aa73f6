// Pipeline templates: the fastest layout of the model on each node count.
// Part of the planner's vocabulary: include "oobleck/planner.h".
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "oobleck/common.h"  // Milliseconds, Bytes, InputError, NoPlanError, Progress
#include "oobleck/planner/cost_model.h"

namespace oobleck {

struct PipelineTemplate {
  int nodes = 0;
  // The GPUs it runs on: all of its nodes' (nodes x G), or, for a pipeline
  // that shares its one node with others, fewer (build_shared_node_template).
  int gpus = 0;
  int microbatches = 0;               // M the template was optimised for
  Milliseconds iteration_ms = 0;      // T(M)
  Milliseconds first_microbatch_ms = 0;
  Milliseconds bottleneck_ms = 0;
  int max_microbatches = 0;           // memory limit on microbatches; 0 = none
  std::vector<Stage> stages;
  // Model chunks a device holds (interleaved 1F1B, as Pipeline::interleave;
  // 1: none). Then iteration_ms is the pipeline played at M, and
  // first_microbatch_ms + (m - 1) bottleneck_ms a line through it whose
  // slope is the busiest device's passes per microbatch.
  int interleave = 1;

  [[nodiscard]] Milliseconds iteration_ms_for(int microbatches_given) const {
    return first_microbatch_ms + (microbatches_given - 1) * bottleneck_ms;
  }
};

struct TemplateSet {
  int microbatches = 0;
  int max_nodes = 0;                      // node counts 1..max_nodes were searched
  std::vector<PipelineTemplate> templates;  // feasible ones, by increasing nodes
  // The work the search did, counted so that the benchmarks can tell a
  // slower search apart from a noisy machine: its dynamic-programme runs (one
  // per stage bound) and the states they swept.
  std::int64_t search_solves = 0;
  std::int64_t search_states = 0;
  std::int64_t search_shared_levels = 0;  // stage counts whose rows threads shared (set_search_threads)
  std::int64_t search_updates = 0;        // solves that updated the last one's table instead of sweeping anew
  std::int64_t search_shared_update_levels = 0;  // of the shared stage counts, those of updates
  [[nodiscard]] const PipelineTemplate* find(int nodes) const;
  [[nodiscard]] int min_nodes() const { return templates.empty() ? 0 : templates.front().nodes; }
};

// For every node count 1..max_nodes, the template minimising T(M) exactly;
// counts with no feasible template are absent. Where the cost model lets
// templates interleave (set_interleave(V)), a node count's interleaved
// layouts of 2..V chunks a device (interleaved.cpp: equal devices, chunks
// of least largest compute) replace its template where one plays faster at
// M than the template does, the fastest of them. `earlier`: templates of
// the same model searched at another M, each a starting point for its node
// count's walk where it fits at this M (fewer solves; the same exactness).
[[nodiscard]] TemplateSet build_templates(const CostModel& cost, int max_nodes,
                                          const Progress& progress = {}, const TemplateSet* earlier = nullptr);

// Threads the template search may use (1 until this is called; 0: the
// machine's cores, at most 8). Its dynamic programme hands them the rows
// of one stage count where there are many, tens of thousands of times a
// search, microseconds apart: worth it only on cores no other program is
// busy on. Unless set_finishing_threads says otherwise, they also take
// node counts in turn to finish their templates (below). The templates do
// not depend on it. InputError outside 0..256.
void set_search_threads(int threads);

// Threads that finish node counts' templates: their local moves and, with
// interleaving, their interleaved layouts, each node count on its own
// (no thread waits on another, so they pay on a busy machine too). Those
// beyond the search's threads start on a node count as soon as its walk
// has ended, while the search sweeps on for the others. -1,
// and until this is called: as set_search_threads; 0: the machine's
// cores, at most 8. The templates do not depend on it. InputError
// outside -1..256.
void set_finishing_threads(int threads);

// The template minimising T(M) exactly on `gpus` GPUs of one node (fewer
// than its G), for pipelines that share a node: stages inside the node
// whose degrees add up to `gpus`. nullopt when no layout fits in memory.
// InputError unless `gpus` is in 1..G-1.
[[nodiscard]] std::optional<PipelineTemplate> build_shared_node_template(const CostModel& cost, int gpus);

// The fastest interleaved layout on `nodes` nodes with `chunks` (2 or more)
// model chunks a device, played at the cost model's M (interleaved.cpp:
// devices of one degree filling the nodes, the layers cut into D x chunks
// chunks of least largest compute); nullopt when none fits or there are
// too few layers (each virtual stage needs one).
[[nodiscard]] std::optional<PipelineTemplate> build_interleaved_template(const CostModel& cost, int nodes, int chunks);

// The M to optimise templates for when none is given: the most stages a
// template on up to `max_nodes` nodes can have, min(layers, max_nodes x
// gpus_per_node), so that every stage holds its full 1F1B load.
[[nodiscard]] int default_template_microbatches(const Profile& profile, int max_nodes);

// Node counts in 1..max_nodes with no template, as inclusive ranges
// [first, last] in increasing order.
[[nodiscard]] std::vector<std::pair<int, int>> nodes_without_template(const TemplateSet& templates);

}  // namespace oobleck
