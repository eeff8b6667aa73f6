#include "oobleck/recovery/step_shares.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "oobleck/node_speeds.h"
#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::recovery {

StepShares plan_shares(const Plan& plan, int step) {
  StepShares out{step, {}};
  int first = 0;
  for (const auto& p : plan.pipelines) {
    std::vector<int> mine(static_cast<std::size_t>(p.microbatches));
    std::iota(mine.begin(), mine.end(), first);
    first += p.microbatches;
    out.microbatches.push_back(std::move(mine));
  }
  return out;
}

int CarriedStep::kept_count() const {
  int n = 0;
  for (const auto& k : kept) n += static_cast<int>(k.size());
  return n;
}

namespace {

// The two plans' seats, in rank order, and each worker's seat before found
// by node name. (Vectors and a hash map: a plan of thousands of nodes is
// carried at every loss the simulator replays.)
struct SeatsAcross {
  SeatsAcross(const Plan& running, const Plan& next, int gpus_per_node)
      : G(static_cast<std::size_t>(gpus_per_node)),
        before_nodes(trainer_nodes(running)),
        before(worker_seats(running, gpus_per_node)),
        running_ranks(running.pipelines.size()),
        next_nodes(trainer_nodes(next)),
        seats(worker_seats(next, gpus_per_node)),
        next_workers(next.pipelines.size()) {
    for (std::size_t r = 0; r < before_nodes.size(); ++r) before_rank.emplace(before_nodes[r], r);
    for (std::size_t r = 0; r < before.size(); ++r) running_ranks[static_cast<std::size_t>(before[r].pipeline)].push_back(r);
    for (std::size_t r = 0; r < seats.size(); ++r) next_workers[static_cast<std::size_t>(seats[r].pipeline)].push_back(r);
  }
  SeatsAcross(const SeatsAcross&) = delete;  // (before_rank views before_nodes)
  SeatsAcross& operator=(const SeatsAcross&) = delete;
  // The running seat of the next plan's worker `r` (null: a new node).
  [[nodiscard]] const WorkerSeat* was(std::size_t r) const {
    const auto node = before_rank.find(next_nodes[r / G]);
    return node == before_rank.end() ? nullptr : &before[node->second * G + r % G];
  }
  std::size_t G;
  std::vector<std::string> before_nodes;
  std::vector<WorkerSeat> before;
  std::unordered_map<std::string_view, std::size_t> before_rank;
  std::vector<std::vector<std::size_t>> running_ranks;  // by running pipeline
  std::vector<std::string> next_nodes;
  std::vector<WorkerSeat> seats;
  std::vector<std::vector<std::size_t>> next_workers;  // by next pipeline
};

// `count` items split in proportion to `weights` (largest remainders, the
// earlier pipeline first on a tie): each share at most ceil(count x w / W).
std::vector<int> proportional(int count, const std::vector<int>& weights) {
  const long long total = std::accumulate(weights.begin(), weights.end(), 0LL);
  std::vector<int> out(weights.size(), 0);
  if (total <= 0) return out;
  std::vector<std::pair<long long, std::size_t>> remainders;
  int given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const long long scaled = static_cast<long long>(count) * weights[i];
    out[i] = static_cast<int>(scaled / total);
    given += out[i];
    remainders.emplace_back(-(scaled % total), i);
  }
  std::sort(remainders.begin(), remainders.end());
  for (int k = 0; k < count - given; ++k) ++out[remainders[static_cast<std::size_t>(k)].second];
  return out;
}

// carry_step, with what a worker holds and whether it is settled asked of
// `held(was, node, gpu)` (null: not known) and `settled(was, node, gpu)`,
// where `was` is its seat in the running plan. (The worker's id is made
// only for the awaited: the simulator carries thousands at every loss.)
template <typename Held, typename Settled>
CarriedStep carry(const Plan& running, const Plan& next, int gpus_per_node, const Held& held_by,
                  const Settled& settled) {
  const std::size_t pipelines = next.pipelines.size();
  CarriedStep out;
  out.kept.resize(pipelines);
  out.train.resize(pipelines);
  const SeatsAcross across(running, next, gpus_per_node);
  const auto G = across.G;
  const auto& before = across.before;
  const auto& running_ranks = across.running_ranks;
  const auto& next_nodes = across.next_nodes;
  const auto& seats = across.seats;
  std::vector<bool> held(static_cast<std::size_t>(next.global_microbatches), false);
  out.source.assign(pipelines, -1);
  std::vector<int> degrees;  // of a candidate source: the tensor-parallel degree it holds each layer at
  std::vector<const WorkerSeat*> was_seat;  // of x's workers, in the running plan (null: new)
  std::vector<std::pair<int, int>> in_x;
  std::vector<int> from_source;  // of x's workers, those of its source, by index in `workers`
  for (std::size_t x = 0; x < pipelines; ++x) {
    const auto& workers = across.next_workers[x];
    // The source: the first running pipeline all of whose workers are in x.
    in_x.clear();  // (running pipeline, its workers in x), in order of the pipeline
    was_seat.assign(workers.size(), nullptr);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      was_seat[i] = across.was(workers[i]);
      if (was_seat[i] == nullptr) continue;
      const int p = was_seat[i]->pipeline;
      auto at = std::find_if(in_x.begin(), in_x.end(), [&](const auto& c) { return c.first == p; });
      if (at == in_x.end()) at = in_x.insert(in_x.end(), {p, 0});
      ++at->second;
    }
    std::sort(in_x.begin(), in_x.end());
    int source = -1;
    for (const auto& [p, n] : in_x) {
      if (static_cast<std::size_t>(n) != running_ranks[static_cast<std::size_t>(p)].size()) continue;
      // Every layer of x's seats held by the source at the same degree.
      degrees.clear();
      for (const std::size_t r : running_ranks[static_cast<std::size_t>(p)]) {
        const WorkerSeat& seat = before[r];
        if (static_cast<int>(degrees.size()) < seat.layer_end) degrees.resize(static_cast<std::size_t>(seat.layer_end), 0);
        std::fill(degrees.begin() + seat.layer_begin, degrees.begin() + seat.layer_end, seat.degree);
      }
      const std::vector<int>& d = degrees;
      const bool fed = std::all_of(workers.begin(), workers.end(), [&](std::size_t r) {
        for (int l = seats[r].layer_begin; l < seats[r].layer_end; ++l) {
          if (l >= static_cast<int>(d.size()) || d[static_cast<std::size_t>(l)] != seats[r].degree) return false;
        }
        return true;
      });
      if (fed) {
        source = p;
        break;
      }
    }
    if (source < 0) continue;
    from_source.clear();
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (was_seat[i] != nullptr && was_seat[i]->pipeline == source) from_source.push_back(static_cast<int>(i));
    }
    std::vector<WorkerId> waiting;
    const std::vector<int>* common = nullptr;
    bool may_keep = true;
    for (const int i : from_source) {
      const std::size_t r = workers[static_cast<std::size_t>(i)];
      const std::string& node = next_nodes[r / G];
      const int gpu = static_cast<int>(r % G);
      const WorkerSeat& was = *was_seat[static_cast<std::size_t>(i)];
      const std::vector<int>* h = held_by(was, node, gpu);
      if (h == nullptr) {
        if (settled(was, node, gpu)) may_keep = false;
        waiting.emplace_back(node, gpu);
      } else if (common != nullptr && common != h && *common != *h) {
        may_keep = false;
      } else {
        common = h;
      }
    }
    if (!may_keep) continue;
    if (!waiting.empty()) {
      out.awaited.insert(waiting.begin(), waiting.end());
      continue;
    }
    out.kept[x] = *common;
    out.source[x] = source;
    for (int m : out.kept[x]) {
      const auto i = static_cast<std::size_t>(m);
      if (i >= held.size() || held[i]) throw std::logic_error("kept sums of two pipelines hold one microbatch");
      held[i] = true;
    }
  }
  std::vector<int> left;
  for (int m = 0; m < next.global_microbatches; ++m) {
    if (!held[static_cast<std::size_t>(m)]) left.push_back(m);
  }
  std::vector<int> weights;
  for (const auto& p : next.pipelines) weights.push_back(p.microbatches);
  const std::vector<int> counts = proportional(static_cast<int>(left.size()), weights);
  std::size_t next_left = 0;
  for (std::size_t x = 0; x < pipelines; ++x) {
    const auto n = static_cast<std::size_t>(counts[x]);
    out.train[x].assign(left.begin() + static_cast<std::ptrdiff_t>(next_left),
                        left.begin() + static_cast<std::ptrdiff_t>(next_left + n));
    next_left += n;
  }
  return out;
}

}  // namespace

CarriedStep carry_step(const Plan& running, const HeldSums& held_sums, const std::set<WorkerId>& settled,
                       const Plan& next, int gpus_per_node) {
  return carry(
      running, next, gpus_per_node,
      [&](const WorkerSeat&, const std::string& node, int gpu) -> const std::vector<int>* {
        const auto h = held_sums.find({node, gpu});
        return h == held_sums.end() ? nullptr : &h->second;
      },
      [&](const WorkerSeat&, const std::string& node, int gpu) {
        return settled.count({node, gpu}) > 0;
      });
}

CarriedStep carry_step_by_pipeline(const Plan& running, const StepShares& shares, const std::vector<bool>& passed,
                                   const Plan& next, int gpus_per_node) {
  return carry(
      running, next, gpus_per_node,
      [&](const WorkerSeat& was, const std::string&, int) -> const std::vector<int>* {
        const auto p = static_cast<std::size_t>(was.pipeline);
        return passed.at(p) ? &shares.microbatches.at(p) : nullptr;
      },
      [](const WorkerSeat&, const std::string&, int) { return false; });
}

Plan resumed_plan(const Plan& next, const CarriedStep& carried) {
  Plan resumed = next;
  if (carried.train.empty()) return resumed;
  for (std::size_t p = 0; p < resumed.pipelines.size(); ++p) {
    resumed.pipelines[p].microbatches = static_cast<int>(carried.train.at(p).size());
  }
  return resumed;
}

StepShares resumed_shares(const CarriedStep& carried, int step) {
  StepShares out{step, carried.kept};
  for (std::size_t p = 0; p < out.microbatches.size(); ++p) {
    out.microbatches[p].insert(out.microbatches[p].end(), carried.train.at(p).begin(), carried.train.at(p).end());
  }
  return out;
}

Milliseconds resumed_step_ms(const CostModel& cost, const Plan& next, const CarriedStep& carried) {
  return iteration_ms_at_speeds(cost, resumed_plan(next, carried), {});
}

bool worth_waiting(const CostModel& cost, const Plan& next, const CarriedStep& now, const CarriedStep& waited,
                   Milliseconds remaining_ms, Milliseconds iteration_ms) {
  if (now.awaited.empty()) return false;
  const Milliseconds whole = iteration_ms_at_speeds(cost, next, {});
  if (!(whole > 0)) return false;
  const Milliseconds saved =
      (resumed_step_ms(cost, next, now) - resumed_step_ms(cost, next, waited)) / whole * iteration_ms;
  return remaining_ms < saved;
}

std::vector<SumCopy> kept_sum_copies(const Plan& running, const Plan& next, const CarriedStep& carried,
                                     int gpus_per_node) {
  std::vector<SumCopy> out;
  if (carried.source.empty()) return out;
  const SeatsAcross across(running, next, gpus_per_node);
  const auto G = across.G;
  const auto& before = across.before;
  const auto& seats = across.seats;
  std::vector<std::pair<std::size_t, SumCopy>> found;  // (receiver's rank, copy)
  for (std::size_t x = 0; x < next.pipelines.size(); ++x) {
    const int source = carried.source.at(x);
    if (source < 0) continue;
    // A pipeline whose every worker sits as it sat keeps its own sums (most of them, at scale).
    const auto& workers = across.next_workers[x];
    const bool as_it_was = std::all_of(workers.begin(), workers.end(), [&](std::size_t r) {
      const WorkerSeat* was = across.was(r);
      return was != nullptr && was->pipeline == source && was->layer_begin == seats[r].layer_begin &&
             was->layer_end == seats[r].layer_end && was->degree == seats[r].degree && was->shard == seats[r].shard;
    });
    if (as_it_was) continue;
    std::map<std::pair<int, int>, WorkerId> holder;  // (layer, shard): the source's worker
    for (const std::size_t r : across.running_ranks[static_cast<std::size_t>(source)]) {
      for (int l = before[r].layer_begin; l < before[r].layer_end; ++l) {
        holder[{l, before[r].shard}] = {across.before_nodes[r / G], before[r].gpu};
      }
    }
    for (const std::size_t r : workers) {
      const WorkerId to{across.next_nodes[r / G], seats[r].gpu};
      for (int l = seats[r].layer_begin; l < seats[r].layer_end; ++l) {
        const WorkerId& from = holder.at({l, seats[r].shard});
        if (from != to) found.push_back({r, {l, from, to, seats[r].degree}});
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

}  // namespace oobleck::recovery
