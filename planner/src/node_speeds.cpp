// A plan on nodes that are not all as fast as the profile: each node's
// stages take their profiled compute time divided by its speed factor.
//
// Placement. Within a pipeline, the template fixes which stages share a
// node position; which node takes which position is free. With one stage a
// position, the pipeline's slowest stage max_i w_i / s_pi(i) and its first
// microbatch sum_i w_i / s_pi(i) (plus transfers, which speeds do not touch)
// are both minimised by pairing the lightest position with the slowest node
// (the rearrangement inequality: any crossed pair, swapped, lowers neither
// term less). With several stages a position, positions are ranked by their
// slowest stage. (Where transfers are long enough that a round trip through
// the later stages sets the steady period, steady_period.h, that term is
// not part of the argument: the placement is then the same rule, not
// proven best.)
//
// Split. A pipeline with m microbatches takes T_p(m) = F_p + (m - 1) K_p
// (first microbatch, steady period, both at its nodes' speeds) plus O_p,
// the slowest optimizer step among its nodes at their speeds (where the
// cost model prices it): each stage steps after its backward and its
// all-reduces, so a slow node's step ends the iteration late unless its
// pipeline's passes end early, which the split then gives fewer
// microbatches. Plus its own
// synchronisation tail as profiled: a layer's all-reduce cannot start
// before its own pipeline has the gradient ready, so the pipeline whose own
// tail is longest gains most from ending early (in the controller's test
// of a slow node, the split for the passes alone is priced 0.5 % longer).
// The sum is increasing in m. Giving each next microbatch to the pipeline that would
// finish it earliest is the exact min-max integer split for increasing
// costs: an optimum's bottleneck value v admits every assignment the greedy
// makes before exceeding v.
//
// Synchronisation, priced after the split as the simulator plays it: the
// synchronised iteration (synced_iteration.h) of the pipelines, each ending
// its passes at T_p(m_p), each stage's backward and optimizer step at its
// node's speed, so that a layer's all-reduce waits for its slowest holder
// and a stage steps after its own all-reduces. Its
// all-reduces take their profiled time, but where the cost model says the
// nodes' own processors run the collectives (CPU nodes): then a ring runs at
// its slowest member, and every layer has a replica in every pipeline, so
// each all-reduce is divided by the slowest training node's speed (for
// pipelines of several nodes an upper bound: a slow node's rings are only
// those of its layers); the tails in the split are divided likewise. The
// synchronisation counts in what dropping a node saves.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <sstream>

#include "oobleck/planner.h"
#include "played_pipeline.h"
#include "steady_period.h"
#include "synced_iteration.h"

namespace oobleck {
namespace {

double speed_of(const NodeSpeeds& speeds, const std::string& node) {
  const auto it = speeds.find(node);
  return it == speeds.end() ? 1.0 : it->second;
}

// A stage runs at its slowest node's speed (a stage over several nodes
// waits for each of them).
double stage_speed(const NodeSpeeds& speeds, const Pipeline& p, const Stage& st) {
  double speed = speed_of(speeds, p.nodes.at(static_cast<std::size_t>(st.node)));
  for (int n = st.node + 1; n < st.node + st.node_span; ++n) {
    speed = std::min(speed, speed_of(speeds, p.nodes.at(static_cast<std::size_t>(n))));
  }
  return speed;
}

// The compute time of each node position (its slowest stage), as profiled.
std::vector<Milliseconds> position_weights(const CostModel& cost, const Pipeline& p) {
  std::vector<Milliseconds> out(p.nodes.size(), 0);
  for (const auto& s : p.stages) {
    for (int n = s.node; n < s.node + s.node_span; ++n) {
      out.at(static_cast<std::size_t>(n)) =
          std::max(out[static_cast<std::size_t>(n)], cost.stage_compute_ms(s.layer_begin, s.layer_end, s.gpus, s.recompute));
    }
  }
  return out;
}

struct SpeedTimes {
  Milliseconds first_ms = 0;
  Milliseconds bottleneck_ms = 0;
  Milliseconds optimizer_ms = 0;  // O_p
  // T_p(m): the passes alone.
  [[nodiscard]] Milliseconds at(int m) const { return first_ms + (m - 1) * bottleneck_ms; }
};

SpeedTimes times_at_speeds(const CostModel& cost, const Pipeline& p, const NodeSpeeds& speeds) {
  SpeedTimes t;
  std::vector<Milliseconds> compute, transfers;
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& st = p.stages[s];
    const double speed = stage_speed(speeds, p, st);
    compute.push_back(cost.stage_compute_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute) / speed);
    t.first_ms += compute.back();
    t.optimizer_ms = std::max(t.optimizer_ms, cost.stage_optimizer_ms(st.layer_begin, st.layer_end, st.gpus) / speed);
    if (s + 1 < p.stages.size()) {
      transfers.push_back(cost.transfer_ms(st.layer_end, st.node == p.stages[s + 1].node, st.gpus));
      t.first_ms += 2 * transfers.back();
    }
  }
  t.bottleneck_ms = detail::steady_period_ms(compute, transfers);
  return t;
}

// What the synchronisation tails are divided by (above).
double collective_speed(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds) {
  if (!cost.collectives_at_node_speed() || plan.pipelines.empty()) return 1;
  double slowest = kMaxNodeSpeed;
  for (const auto& p : plan.pipelines) {
    for (const auto& n : p.nodes) slowest = std::min(slowest, speed_of(speeds, n));
  }
  return slowest;
}

// The synchronised iteration of `plan` (its pipelines' microbatches as
// given) at these speeds, each pipeline played at them
// (played_pipeline.h); `played`, if given, gets each pipeline's passes.
Milliseconds synced_at_speeds(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds,
                              std::vector<Milliseconds>* played = nullptr) {
  const std::size_t count = plan.pipelines.size();
  std::vector<std::vector<double>> stage_speeds(count);
  std::vector<detail::PlayedPipeline> runs_played(count);
  std::vector<detail::TemplateRun> runs;
  for (std::size_t p = 0; p < count; ++p) {
    const Pipeline& pipe = plan.pipelines[p];
    for (const Stage& st : pipe.stages) {
      stage_speeds[p].push_back(stage_speed(speeds, pipe, st));
    }
    runs_played[p] = detail::play_pipeline(cost, pipe.stages, pipe.microbatches, &stage_speeds[p], pipe.interleave);
    if (played) played->push_back(runs_played[p].end_ms);
    runs.push_back({&pipe.stages, runs_played[p].end_ms, &stage_speeds[p], &runs_played[p].last_backward_ms});
  }
  return detail::synced_iteration_ms(cost, runs, static_cast<int>(count), collective_speed(cost, plan, speeds));
}

}  // namespace

void check_node_speeds(const NodeSpeeds& speeds, const std::vector<std::string>& nodes, std::string_view what) {
  for (const auto& [node, speed] : speeds) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) {
      throw InputError(std::string(what) + ": node \"" + node + "\" is not in the cluster");
    }
    if (!(speed >= kMinNodeSpeed && speed <= kMaxNodeSpeed)) {
      std::ostringstream text;
      text << what << ": node \"" << node << "\": speed " << speed << "; expected a factor in [" << kMinNodeSpeed
           << ", " << kMaxNodeSpeed << "] (1: as profiled, 0.5: half as fast)";
      throw InputError(text.str());
    }
  }
}

Milliseconds pipeline_ms_at_speeds(const CostModel& cost, const Pipeline& pipeline, const NodeSpeeds& speeds,
                                   int microbatches) {
  return times_at_speeds(cost, pipeline, speeds).at(microbatches);
}

void check_plain_pipelines(const Plan& plan) {
  const auto interleaved = [](const Pipeline& p) { return p.interleave > 1; };
  const bool plain =
      plan.pipelines_per_node == 1 && std::none_of(plan.pipelines.begin(), plan.pipelines.end(), interleaved);
  if (!plain) {
    throw InputError("--node-speed: plans at node speeds are of plain pipelines on whole nodes, not interleaved "
                     "ones or ones that share nodes");
  }
}

Plan apply_node_speeds(const CostModel& cost, Plan plan, const NodeSpeeds& speeds) {
  check_plain_pipelines(plan);
  std::vector<std::string> all;
  for (const auto& p : plan.pipelines) all.insert(all.end(), p.nodes.begin(), p.nodes.end());
  all.insert(all.end(), plan.spare_nodes.begin(), plan.spare_nodes.end());
  check_node_speeds(speeds, all, "--node-speed");
  const int count = static_cast<int>(plan.pipelines.size());
  if (count == 0) return plan;
  // Placement: positions by weight, nodes by speed, both ascending; ties
  // keep the plan's order, so that uniform speeds change nothing.
  for (auto& p : plan.pipelines) {
    const auto weights = position_weights(cost, p);
    std::vector<std::size_t> positions(p.nodes.size()), order(p.nodes.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(positions.begin(), positions.end(), [&](auto a, auto b) { return weights[a] < weights[b]; });
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
      return speed_of(speeds, p.nodes[a]) < speed_of(speeds, p.nodes[b]);
    });
    const bool uniform = std::all_of(p.nodes.begin(), p.nodes.end(),
                                     [&](const auto& n) { return speed_of(speeds, n) == speed_of(speeds, p.nodes[0]); });
    if (uniform) continue;
    std::vector<std::string> placed(p.nodes.size());
    for (std::size_t k = 0; k < positions.size(); ++k) placed[positions[k]] = p.nodes[order[k]];
    p.nodes = std::move(placed);
  }
  return split_at_speeds(cost, std::move(plan), speeds);
}

Plan split_at_speeds(const CostModel& cost, Plan plan, const NodeSpeeds& speeds) {
  check_plain_pipelines(plan);
  const int count = static_cast<int>(plan.pipelines.size());
  if (count == 0) return plan;
  // Split: every pipeline one microbatch, then each next one to the
  // pipeline that finishes it earliest (ties: the lower index).
  std::vector<SpeedTimes> times;
  std::vector<Milliseconds> tails;
  const double collectives = collective_speed(cost, plan, speeds);
  for (const auto& p : plan.pipelines) {
    times.push_back(times_at_speeds(cost, p, speeds));
    tails.push_back(cost.sync_tail_ms(p.stages, count) / collectives + times.back().optimizer_ms);
  }
  const int B = plan.global_microbatches;
  std::vector<int> given(static_cast<std::size_t>(count), 1);
  using Entry = std::pair<Milliseconds, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  auto offer = [&](int p) {
    const auto& pipe = plan.pipelines[static_cast<std::size_t>(p)];
    const int m = given[static_cast<std::size_t>(p)] + 1;
    if (cost.pipeline_fits(pipe.stages, m)) next.push({times[static_cast<std::size_t>(p)].at(m) + tails[p], p});
  };
  for (int p = 0; p < count; ++p) offer(p);
  for (int assigned = count; assigned < B; ++assigned) {
    if (next.empty()) throw NoPlanError("no split of the batch fits the pipelines' memory at these node speeds");
    const int p = next.top().second;
    next.pop();
    given[static_cast<std::size_t>(p)] += 1;
    offer(p);
  }
  for (int p = 0; p < count; ++p) plan.pipelines[static_cast<std::size_t>(p)].microbatches = given[static_cast<std::size_t>(p)];
  std::vector<Milliseconds> played;
  plan.iteration_ms = synced_at_speeds(cost, plan, speeds, &played);
  plan.pipelines_ms = 0;
  for (int p = 0; p < count; ++p) {
    auto& pipe = plan.pipelines[static_cast<std::size_t>(p)];
    pipe.iteration_ms = played[static_cast<std::size_t>(p)];
    plan.pipelines_ms = std::max(plan.pipelines_ms, pipe.iteration_ms);
  }
  plan.sync_ms = plan.iteration_ms - plan.pipelines_ms;
  return plan;
}

Milliseconds iteration_ms_at_speeds(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds) {
  return synced_at_speeds(cost, plan, speeds);
}

}  // namespace oobleck
