// Pipeline-template search, exact for the suffixes' period.
//
// For n nodes of G GPUs, a template is a sequence of stages (contiguous layer
// ranges, each on a tensor-parallel degree t that divides G, or where the
// cost model allows it a multiple k G: k whole nodes) laid out over the
// nodes in order: a node holds consecutive stages whose degrees add up to G,
// or is one of the k nodes of one stage.
// It minimises T(M) = sigma + (M-1) mu, where sigma = sum of stage compute plus
// twice the transfers and mu = 1F1B's steady period (steady_period.h) as
// bounded by the suffixes: the largest of every stage's compute, every
// transfer (one way) and, for every stage s of S, the round trip
// R_s / (S - s), R_s being the sigma of the suffix of stages s..S-1.
// Every layout the walk below visits is priced with 1F1B's full period
// (every run of stages, not only the suffixes), and the fastest so priced
// is kept, then moved while a single move prices it faster (a boundary by a
// layer, or two neighbours' degrees exchanged: layout_moves.h): it is the
// fastest of all layouts wherever its price equals the least T(M) over the
// suffixes, a lower bound on every layout's price.
//
// The max terms do not decompose, so the search is parametric in a bound K
// on mu: a dynamic programme finds, for every n at once, the least sigma
// with every stage, every transfer and every suffix's R / (its stage count)
// strictly under K. The suffix condition is one on the programme's own
// value: the least sigma of a state of m stages must be under K m, or no
// suffix through that state meets it. Lowering K below the mu of each
// answer walks the Pareto front of (sigma, mu) from the top.
// Templates not yet seen have sigma >= the last answer's, so the walk for n
// jumps to K = (best T - sigma) / (M-1) and stops once sigma + (M-1) * (a lower
// bound on mu) cannot beat the best. Any bound from that jump up to just
// below the answer's mu finds the same useful points (the front's points in
// between cannot beat the best), so a solve at the highest bound open
// serves every walk whose range holds it: walks in step share solves. It
// sweeps the rows of the largest node count whose walk asked for that very
// bound, a tenth more, and serves the walks up to there (sweeping every row
// for walks that only happen to be in range costs more than their own
// solves later). It sweeps further, without serving more, up to the
// largest node count whose walk is sure to be solved before the bound
// passes a stage's compute or a link: those solves then update its table
// instead of sweeping anew (template_search_reuse.cpp), which a solve on more
// GPUs than the last cannot. A balanced layout (min-max split with equal degrees, or
// with the fewest stages over several nodes where no one degree fills them)
// seeds the best T, so that on fronts where sigma is flat (uniform layers) the walk starts
// near its bottom instead of stepping down through every tie. Where stages
// may span nodes, a search with no earlier answers also seeds each walk
// from a solve just above its node count's period floor
// (probe_near_floors): a layout of nearly the least period, which at large
// M lets the walk jump past most of the front (within nodes the balanced
// seed does as well). Every solve's answers are kept (solve_memo.h): a
// search at another M of the same programme takes them wherever they hold
// in a walk's range of bounds, as instantiation's rounds over M do. Those
// kept at a higher cap on the microbatches in flight (min(M, layers)) are
// taken only at the very bound of a solve, in its place for the node counts
// they answer (the solve then sweeps the rows of the others alone): the
// walks go exactly as they would without them, and the rounds at M below
// the layer count (GPT-3 175B on 2,048 nodes at K = 4: 78, then 64) solve
// 275 and 136 times instead of 357 and 326.
//
// The dynamic programme itself is in template_search.cpp.
#include <algorithm>
#include <optional>
#include <sstream>

#include "oobleck/planner.h"
#include "finishing_pool.h"
#include "interleaved.h"
#include "layout_moves.h"
#include "period_floor.h"
#include "row_workers.h"
#include "solve_memo.h"
#include "template_search.h"
#include "template_walk.h"

namespace oobleck {
namespace {

using detail::seeded_walks;
using detail::TemplateSearch;
using detail::step_down;
using detail::Walk;

PipelineTemplate make_template(const CostModel& cost, int nodes, std::vector<Stage> stages) {
  PipelineTemplate out;
  out.nodes = nodes;
  out.gpus = 0;
  for (const Stage& stage : stages) out.gpus += stage.gpus;
  out.microbatches = cost.microbatches();
  out.first_microbatch_ms = cost.first_microbatch_ms(stages);
  out.bottleneck_ms = cost.bottleneck_ms(stages);
  out.iteration_ms = out.iteration_ms_for(out.microbatches);
  // Past S microbatches, 1F1B keeps no more in flight; below, memory may cap them.
  const int count = static_cast<int>(stages.size());
  int cap = 0;
  for (int s = 0; s < count; ++s) {
    const int limit =
        cost.stage_max_in_flight(stages[s].layer_begin, stages[s].layer_end, stages[s].gpus, stages[s].recompute);
    if (limit < count - s) cap = (cap == 0) ? limit : std::min(cap, limit);
  }
  out.max_microbatches = cap;
  out.stages = std::move(stages);
  return out;
}

using Answer = std::optional<std::pair<double, std::vector<Stage>>>;

// For each of the node counts `counts`, what a solve at `bound` finds, where
// an answer kept from a search at a higher cap on the microbatches in
// flight holds there (solve_memo.h), and the GPUs a solve needs to find
// the others: 0 where none is needed. (A count's answer does not depend on
// the GPU limit it is solved under.)
struct KeptAnswers {
  std::vector<std::optional<Answer>> answers;
  int gpus_to_solve = 0;
};
KeptAnswers kept_answers(const detail::SolveMemo& memo, const std::vector<int>& counts, double bound, int gpus) {
  KeptAnswers out;
  for (const int n : counts) {
    auto hit = memo.find_at(n, bound);
    if (!hit) out.gpus_to_solve = std::max(out.gpus_to_solve, n * gpus);
    out.answers.push_back(hit ? std::optional<Answer>(std::move(hit->found)) : std::nullopt);
  }
  return out;
}

// The lowest cap on the microbatches in flight down to which the answers
// at `bound` hold (solve_memo.h): the solve's own where there was one
// (kept.gpus_to_solve), else worked out without solving.
int same_down_to_at(const TemplateSearch& search, const KeptAnswers& kept, double bound) {
  return kept.gpus_to_solve > 0 ? search.same_down_to_in_flight() : search.same_down_to_in_flight_at(bound);
}

// Probes near the bottom of each node count's front: a solve at a bound
// a little above its period floor finds the least sigma among the layouts
// of nearly the least period, one that plays well where M is large. Taken
// as the walk's best so far, it lets the walk jump past most of the front
// above it, where a balanced layout would have it step down through every
// point (GPT-3 175B over up to 4 nodes at M = 820: 1,463 solves to 578).
// Node counts whose floors lie within that margin of each other share a
// solve. Its answers join the memo: they are solves like any other.
// Returns the number of solves. Made only where stages may span nodes:
// within nodes the balanced layout is a start as good, and the probes cost
// more solves than they save (175B to 32 nodes: 31 solves to 48).
int probe_near_floors(const CostModel& cost, TemplateSearch& search, detail::PeriodFloor& floors,
                      detail::SolveMemo& memo, std::vector<Walk>& walk) {
  constexpr double kMargin = 0.005;
  std::vector<std::pair<double, int>> targets;  // (bound, node count), by bound
  for (int n = 1; n < static_cast<int>(walk.size()); ++n) {
    if (walk[n].active) targets.emplace_back(floors.at(n) * (1 + kMargin), n);
  }
  std::sort(targets.begin(), targets.end());
  int solves = 0;
  for (std::size_t i = 0; i < targets.size();) {
    std::size_t j = i + 1;
    int largest = targets[i].second;
    for (; j < targets.size() && targets[j].first <= targets[i].first * (1 + kMargin); ++j) {
      largest = std::max(largest, targets[j].second);
    }
    const double bound = targets[j - 1].first;
    std::vector<int> counts;
    for (std::size_t k = i; k < j; ++k) counts.push_back(targets[k].second);
    KeptAnswers kept = kept_answers(memo, counts, bound, cost.gpus_per_node());
    if (kept.gpus_to_solve > 0) {
      search.solve(bound, kept.gpus_to_solve);
      ++solves;
    }
    const int same_down_to = same_down_to_at(search, kept, bound);
    for (std::size_t k = 0; i < j; ++i, ++k) {
      const int n = targets[i].second;
      auto found = kept.answers[k] ? std::move(*kept.answers[k]) : search.best(n);
      memo.record(n, bound, found, cost, same_down_to);
      if (found) detail::offer_seed(walk[n], std::move(found->second), cost);
    }
  }
  return solves;
}

}  // namespace

const PipelineTemplate* TemplateSet::find(int nodes) const {
  auto it = std::lower_bound(templates.begin(), templates.end(), nodes,
                             [](const PipelineTemplate& t, int n) { return t.nodes < n; });
  return (it != templates.end() && it->nodes == nodes) ? &*it : nullptr;
}

TemplateSet build_templates(const CostModel& cost, int max_nodes, const Progress& progress,
                            const TemplateSet* earlier) {
  detail::SolveMemo memo;
  return detail::build_templates_remembering(cost, max_nodes, progress, earlier, memo);
}

TemplateSet detail::build_templates_remembering(const CostModel& cost, int max_nodes, const Progress& progress,
                                                const TemplateSet* earlier, SolveMemo& memo, SearchScratch* scratch) {
  if (max_nodes < 1) throw InputError("max-nodes: expected at least 1, got " + std::to_string(max_nodes));
  TemplateSet set;
  set.microbatches = cost.microbatches();
  set.max_nodes = max_nodes;
  // Every stage holds at least one layer on at most tensor_parallel_nodes() nodes.
  const int searched = static_cast<int>(
      std::min<std::int64_t>(max_nodes, std::int64_t{cost.layers()} * cost.tensor_parallel_nodes()));
  const int gpus = cost.gpus_per_node();
  TemplateSearch search(cost, searched, scratch ? &scratch->table : nullptr);  // (first: it refuses tables too large)
  detail::PeriodFloor mu_floors(cost);
  std::vector<Walk> walk = seeded_walks(cost, searched, scratch ? &scratch->splits : nullptr);
  const bool answered = memo.serve(cost);
  if (earlier) {
    for (const PipelineTemplate& t : earlier->templates) {
      const bool plain = t.interleave == 1 && t.gpus == t.nodes * gpus;  // not interleaved, not on part of a node
      if (plain && t.nodes <= searched) detail::offer_seed(walk[t.nodes], t.stages, cost);
    }
  }
  // A walk takes earlier answers while one holds in its range of bounds.
  const auto walk_on_answers = [&](int n) {
    Walk& w = walk[n];
    while (w.active) {
      auto hit = memo.find(n, w.bound, w.highest_bound);
      if (!hit) return;
      w.bound = hit->bound;
      step_down(w, std::move(hit->found), cost, mu_floors.at(n));
    }
  };
  // Each node count's walk result, moved to its local optimum (and, with
  // interleaving, raced against interleaved layouts: most of such a
  // search's time), on its own: once its walk has ended, on the finishing
  // threads the rows leave free (set_finishing_threads) while the search
  // goes on, then on all of them, the largest (slowest) first. (Without
  // interleaving, a tenth of instantiating 2,048 nodes at K = 8.)
  std::vector<std::optional<PipelineTemplate>> chosen(static_cast<std::size_t>(searched) + 1);
  const auto finish = [&](int n) {
    auto& out = chosen[static_cast<std::size_t>(n)];
    if (!walk[n].stages.empty()) {
      detail::move_to_local_optimum(cost, walk[n].stages);
      out = make_template(cost, n, std::move(walk[n].stages));
    }
    if (cost.interleave() > 1) detail::keep_faster_interleaved(cost, n, out);
  };
  const int finishing = std::min(detail::finishing_threads(), searched);
  detail::FinishingPool finishing_pool(finish, std::max(0, finishing - detail::search_threads()));
  std::vector<char> handed_over(static_cast<std::size_t>(searched) + 1, 0);
  const auto hand_over_ended_walks = [&] {
    for (int n = 1; n <= searched; ++n) {
      if (!walk[n].active && !handed_over[n]) {
        handed_over[n] = 1;
        finishing_pool.hand_over(n);
      }
    }
  };
  int runs = 0;
  if (!answered && cost.tensor_parallel_nodes() > 1) runs += probe_near_floors(cost, search, mu_floors, memo, walk);
  // Each solve is at the highest bound still open, over the rows of the
  // largest node count whose walk is at it (and a tenth more), and serves
  // every walk up to there whose range of bounds holds it.
  const auto serves = [](const Walk& w, double bound) {
    return w.active && w.bound <= bound && bound <= w.highest_bound;
  };
  // A walk takes earlier answers only after its range or its node count's
  // answers changed, and both change only when a solve serves it: after
  // the first round, only the walks the last solve served look again.
  std::vector<int> to_look;
  for (int n = 1; n <= searched; ++n) to_look.push_back(n);
  while (true) {
    for (const int n : to_look) walk_on_answers(n);
    to_look.clear();
    hand_over_ended_walks();
    double bound = -1;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound > bound) bound = walk[n].bound;
    }
    if (bound < 0) break;
    int gpu_limit = 0;
    for (int n = 1; n <= searched; ++n) {
      if (walk[n].active && walk[n].bound == bound) gpu_limit = n * gpus;
    }
    // A tenth more rows serve the walks in range just above: their rows
    // cost little beside the solves they would need on their own.
    const int extended = gpu_limit + gpu_limit / 10;
    for (int n = 1; n <= searched && n * gpus <= extended; ++n) {
      if (serves(walk[n], bound)) gpu_limit = std::max(gpu_limit, n * gpus);
    }
    std::vector<int> counts;
    for (int n = 1; n <= searched && n * gpus <= gpu_limit; ++n) {
      if (serves(walk[n], bound)) counts.push_back(n);
    }
    KeptAnswers kept = kept_answers(memo, counts, bound, gpus);
    if (kept.gpus_to_solve > 0) {
      // Walks whose next solves are sure to stay where this bound's stages
      // and links hold may update this table (TemplateSearch::solve) if it
      // spans their rows: sweep those now.
      int rows = kept.gpus_to_solve;
      const double band = search.last_change_below(bound);
      for (int n = searched; n * gpus > rows; --n) {
        if (walk[n].active && walk[n].bound > band) {
          rows = n * gpus;
          break;
        }
      }
      search.solve(bound, rows);
      ++runs;
    }
    const int same_down_to = same_down_to_at(search, kept, bound);
    int still_active = 0;
    std::size_t k = 0;
    for (int n = 1; n <= searched; ++n) {
      Walk& w = walk[n];
      if (!serves(w, bound) || n * gpus > gpu_limit) {
        still_active += w.active;
        continue;
      }
      w.bound = bound;
      to_look.push_back(n);
      auto found = kept.answers[k] ? std::move(*kept.answers[k]) : search.best(n);
      ++k;
      memo.record(n, bound, found, cost, same_down_to);
      still_active += step_down(w, std::move(found), cost, mu_floors.at(n));
    }
    if (progress) {
      std::ostringstream line;
      line << "templates: search " << runs << " (period bound " << bound << " ms), " << still_active
           << " node counts still open";
      progress(line.str());
    }
  }
  hand_over_ended_walks();  // (all of them by now)
  finishing_pool.finish_all(finishing);
  for (auto& t : chosen) {
    if (t) set.templates.push_back(std::move(*t));
  }
  set.search_solves = runs;
  set.search_states = search.states();
  set.search_shared_levels = search.shared_levels();
  set.search_updates = search.tightened_solves();
  set.search_shared_update_levels = search.shared_update_levels();
  return set;
}

std::optional<PipelineTemplate> build_shared_node_template(const CostModel& cost, int gpus) {
  const int per_node = cost.gpus_per_node();
  if (gpus < 1 || gpus >= per_node) {
    throw InputError("shared-node template: expected 1 to " + std::to_string(per_node - 1) + " GPUs, got " +
                     std::to_string(gpus));
  }
  // The same walk down the Pareto front as a node count's, on the rows of
  // `gpus` GPUs (the programme's suffix states on part of a node).
  TemplateSearch search(cost, 1);
  detail::PeriodFloor mu_floors(cost);
  Walk walk;
  while (walk.active) {
    search.solve(walk.bound, gpus);
    step_down(walk, search.best_on_gpus(gpus), cost, mu_floors.on_gpus(gpus));
  }
  if (walk.stages.empty()) return std::nullopt;
  detail::move_to_local_optimum(cost, walk.stages);
  return make_template(cost, 1, std::move(walk.stages));
}

}  // namespace oobleck
