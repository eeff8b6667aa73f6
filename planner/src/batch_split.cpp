// Splitting the global batch among pipelines: the min-max split by kind,
// per pipeline, and the iteration time of a composition it gives.
#include <algorithm>
#include <functional>
#include <map>
#include <queue>

#include "composition.h"
#include "played_pipeline.h"
#include "pipeline_kinds.h"
#include "synced_iteration.h"

namespace oobleck::detail {

// A greedy that raises the pipelines of one kind a level at a time.
KindSplit split_by_kind(const std::vector<Kind>& kinds, const std::vector<int>& counts, int B) {
  using Entry = std::pair<double, int>;  // next slot time, kind
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  KindSplit out{std::vector<int>(kinds.size(), 1), std::vector<int>(kinds.size(), 0), 0};
  long long assigned = 0;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (counts[i] == 0) continue;
    assigned += counts[i];
    out.slowest_ms = std::max(out.slowest_ms, slot_time(kinds[i], 1));
    if (kinds[i].limit > 1) next.push({slot_time(kinds[i], 2), static_cast<int>(i)});
  }
  if (assigned > B) out.slowest_ms = kInfinity;
  // Each pop raises pipelines of that kind from `level` to level + 1.
  while (assigned < B) {
    if (next.empty()) {
      out.slowest_ms = kInfinity;
      return out;
    }
    const auto [time, i] = next.top();
    next.pop();
    const int take = static_cast<int>(std::min<long long>(counts[i] - out.raised[i], B - assigned));
    assigned += take;
    out.raised[i] += take;
    out.slowest_ms = std::max(out.slowest_ms, time);
    if (out.raised[i] == counts[i]) {
      out.level[i] += 1;
      out.raised[i] = 0;
      if (out.level[i] < kinds[i].limit) next.push({slot_time(kinds[i], out.level[i] + 1), i});
    } else {
      next.push({time, i});
    }
  }
  return out;
}

std::vector<int> split_microbatches(const std::vector<const PipelineTemplate*>& pipelines, int global_microbatches) {
  // One kind per distinct template.
  std::vector<const PipelineTemplate*> distinct;
  std::vector<std::size_t> kind_of(pipelines.size());
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    auto it = std::find(distinct.begin(), distinct.end(), pipelines[p]);
    kind_of[p] = static_cast<std::size_t>(it - distinct.begin());
    if (it == distinct.end()) distinct.push_back(pipelines[p]);
  }
  std::vector<Kind> kinds;
  std::vector<int> counts(distinct.size(), 0);
  for (const auto* t : distinct) kinds.push_back(kind_of_template(*t, global_microbatches));
  for (std::size_t k : kind_of) counts[k] += 1;
  KindSplit split = split_by_kind(kinds, counts, global_microbatches);
  if (pipelines.empty() || split.slowest_ms == kInfinity) return {};
  std::vector<int> given(pipelines.size());
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    const std::size_t k = kind_of[p];
    given[p] = split.level[k] + (split.raised[k] > 0 ? 1 : 0);
    if (split.raised[k] > 0) split.raised[k] -= 1;
  }
  return given;
}

Composition evaluate_composition(const CostModel& cost, const TemplateSet& templates, std::vector<int> template_nodes,
                                 int global_microbatches) {
  std::sort(template_nodes.begin(), template_nodes.end(), std::greater<>());
  Composition out;
  std::vector<const PipelineTemplate*> chosen;
  for (int n : template_nodes) chosen.push_back(templates.find(n));
  out.template_nodes = std::move(template_nodes);
  out.microbatches = split_microbatches(chosen, global_microbatches);
  if (out.microbatches.empty()) {
    out.iteration_ms = kInfinity;
    return out;
  }
  // The search weighs T(q) = first + (q - 1) x period; the plan is priced
  // as its pipelines play (played_pipeline.h), each template's by its
  // pipeline of the most microbatches, the last to end.
  std::map<std::pair<const PipelineTemplate*, int>, PlayedPipeline> played;
  std::map<const PipelineTemplate*, const PlayedPipeline*> longest;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    auto [it, fresh] = played.try_emplace({chosen[i], out.microbatches[i]});
    if (fresh) it->second = play_pipeline(cost, chosen[i]->stages, out.microbatches[i], nullptr, chosen[i]->interleave);
    out.pipeline_ms.push_back(it->second.end_ms);
    out.pipelines_ms = std::max(out.pipelines_ms, it->second.end_ms);
    const PlayedPipeline*& most = longest[chosen[i]];
    if (!most || it->second.end_ms > most->end_ms) most = &it->second;
  }
  std::vector<TemplateRun> runs;
  for (const auto& [t, run] : longest) runs.push_back({&t->stages, run->end_ms, nullptr, &run->last_backward_ms});
  out.iteration_ms = synced_iteration_ms(cost, runs, static_cast<int>(chosen.size()));
  out.sync_ms = out.iteration_ms - out.pipelines_ms;
  return out;
}

}  // namespace oobleck::detail
