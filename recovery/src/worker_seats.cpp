#include "oobleck/recovery/worker_seats.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "oobleck/recovery/seats.h"

namespace oobleck::recovery {

std::vector<WorkerSeat> worker_seats(const Plan& plan, int gpus_per_node) {
  std::vector<WorkerSeat> out;
  int node_rank = 0;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    const int stages = static_cast<int>(pipeline.stages.size());
    for (std::size_t position = 0; position < pipeline.nodes.size(); ++position, ++node_rank) {
      int gpu = 0;
      for (int s = 0; s < stages; ++s) {
        const Stage& st = pipeline.stages[static_cast<std::size_t>(s)];
        if (!stage_on_node(st, static_cast<int>(position))) continue;
        // A stage over several nodes: this node's GPUs hold its shards from
        // `before`, and its ranks start on its first node.
        const int earlier_nodes = static_cast<int>(position) - st.node;
        const int before = earlier_nodes * gpus_per_node;
        const int first_rank = (node_rank - earlier_nodes) * gpus_per_node + gpu;
        for (int shard = before; shard < st.gpus && gpu < gpus_per_node; ++shard, ++gpu) {
          out.push_back({static_cast<int>(p), s, stages, static_cast<int>(position), gpu, st.layer_begin,
                         st.layer_end, st.gpus, shard, first_rank});
        }
      }
      if (gpu != gpus_per_node || static_cast<int>(out.size()) != (node_rank + 1) * gpus_per_node) {
        throw InputError("plan: pipeline " + std::to_string(p) + ", node " + pipeline.nodes[position] +
                         ": its stages' gpus must add up to the node's " + std::to_string(gpus_per_node) +
                         " GPUs (gpus_per_node)");
      }
    }
  }
  return out;
}

bool shards_overlap(int degree_a, int shard_a, int degree_b, int shard_b) {
  // [a/da, (a+1)/da) and [b/db, (b+1)/db) intersect, in integers.
  return shard_a * degree_b < (shard_b + 1) * degree_a && shard_b * degree_a < (shard_a + 1) * degree_b;
}

LayerPieces layer_pieces(const std::vector<WorkerSeat>& seats, int layer) {
  LayerPieces out;
  std::vector<const WorkerSeat*> groups;  // each holding stage's shard 0
  for (std::size_t r = 0; r < seats.size(); ++r) {
    if (!seats[r].holds(layer)) continue;
    out.everyone.push_back(static_cast<int>(r));
    if (seats[r].shard == 0) groups.push_back(&seats[r]);
    out.count = std::lcm(out.count, seats[r].degree);
  }
  out.holders.resize(static_cast<std::size_t>(out.count));
  for (int j = 0; j < out.count; ++j) {
    for (const WorkerSeat* g : groups) {
      out.holders[static_cast<std::size_t>(j)].push_back(g->first_rank + j * g->degree / out.count);
    }
  }
  return out;
}

std::map<std::pair<std::string, int>, WorkerSeat> seats_by_node(const Plan& plan, int gpus_per_node) {
  std::map<std::pair<std::string, int>, WorkerSeat> out;
  const auto nodes = trainer_nodes(plan);
  const auto seats = worker_seats(plan, gpus_per_node);
  for (std::size_t r = 0; r < seats.size(); ++r) {
    out[{nodes[r / static_cast<std::size_t>(gpus_per_node)], seats[r].gpu}] = seats[r];
  }
  return out;
}

std::vector<ShardCopy> shard_copies(const Plan& base, const Plan& next, const std::vector<Transfer>& transfers,
                                    int gpus_per_node) {
  const int G = gpus_per_node;
  const auto held = seats_by_node(base, G);
  const auto next_seats = worker_seats(next, G);
  const auto next_nodes = ranked_nodes(next);
  std::map<std::string, int> node_rank;
  for (std::size_t i = 0; i < next_nodes.size(); ++i) node_rank[next_nodes[i]] = static_cast<int>(i);
  std::map<std::pair<int, std::string>, std::string> sender;  // (layer, receiving node) -> sending node
  for (const auto& t : transfers) sender[{t.layer, t.to_node}] = t.from_node;

  std::vector<ShardCopy> out;
  for (std::size_t r = 0; r < next_seats.size(); ++r) {
    const WorkerSeat& me = next_seats[r];
    const std::string& node = next_nodes[r / static_cast<std::size_t>(G)];
    for (int l = me.layer_begin; l < me.layer_end; ++l) {
      const auto from = sender.find({l, node});
      const std::string& source = from == sender.end() ? node : from->second;
      if (!node_rank.count(source)) throw std::logic_error("shard_copies: node " + source + " is not in the next plan");
      std::vector<std::pair<int, WorkerSeat>> sources;  // (GPU, seat) holding layer l
      for (int g = 0; g < G; ++g) {
        const auto it = held.find({source, g});
        if (it != held.end() && it->second.holds(l)) sources.emplace_back(g, it->second);
      }
      if (sources.empty()) {
        throw std::logic_error("shard_copies: node " + source + " held no shard of layer " + std::to_string(l));
      }
      const auto same = [&](const std::pair<int, WorkerSeat>& s) {
        return s.second.degree == me.degree && s.second.shard == me.shard;
      };
      if (source == node && std::any_of(sources.begin(), sources.end(),
                                         [&](const auto& s) { return s.first == me.gpu && same(s); })) {
        continue;  // kept where it is
      }
      const auto exact = std::find_if(sources.begin(), sources.end(), same);
      for (const auto& [g, seat] : sources) {
        const bool wanted = exact != sources.end() ? g == exact->first
                                                   : shards_overlap(seat.degree, seat.shard, me.degree, me.shard);
        if (wanted) out.push_back({l, node_rank.at(source) * G + g, static_cast<int>(r), seat.degree, seat.shard});
      }
    }
  }
  return out;
}

}  // namespace oobleck::recovery
