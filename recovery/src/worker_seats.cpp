#include "oobleck/recovery/worker_seats.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "oobleck/recovery/seats.h"

namespace oobleck::recovery {

std::vector<WorkerSeat> worker_seats(const Plan& plan, int gpus_per_node) {
  const int G = gpus_per_node;
  const std::vector<std::string> nodes = trainer_nodes(plan);
  std::unordered_map<std::string_view, int> node_rank;
  for (std::size_t i = 0; i < nodes.size(); ++i) node_rank.emplace(nodes[i], static_cast<int>(i));
  std::vector<std::optional<WorkerSeat>> by_rank(nodes.size() * static_cast<std::size_t>(G));
  // The GPUs of each node that earlier pipelines took: where pipelines
  // share a node, each takes the next G / pipelines_per_node of them.
  std::vector<int> taken(nodes.size(), 0);
  const int share = plan.pipelines_per_node > 1 ? G / plan.pipelines_per_node : G;  // each pipeline's
  const auto spread_wrong = [&](const std::string& where) {
    return InputError("plan: " + where + ": its stages' gpus must add up to the node's " + std::to_string(G) +
                      " GPUs (gpus_per_node)");
  };
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    const int stages = static_cast<int>(pipeline.stages.size());
    for (std::size_t position = 0; position < pipeline.nodes.size(); ++position) {
      const int rank = node_rank.at(pipeline.nodes[position]);
      int& gpu = taken[static_cast<std::size_t>(rank)];
      const int first_gpu = gpu;
      for (int s = 0; s < stages; ++s) {
        const Stage& st = pipeline.stages[static_cast<std::size_t>(s)];
        if (!stage_on_node(st, static_cast<int>(position))) continue;
        // A stage over several nodes: this node's GPUs hold its shards from
        // `before`, and its ranks start on its first node (whose GPUs it
        // takes from the first, as it does this node's).
        const int before = (static_cast<int>(position) - st.node) * G;
        const int first_rank = node_rank.at(pipeline.nodes[static_cast<std::size_t>(st.node)]) * G + gpu;
        for (int shard = before; shard < st.gpus && gpu < G; ++shard, ++gpu) {
          by_rank[static_cast<std::size_t>(rank * G + gpu)] =
              WorkerSeat{static_cast<int>(p), s, stages, static_cast<int>(position), gpu, st.layer_begin,
                         st.layer_end, st.gpus, shard, first_rank};
        }
      }
      if (gpu - first_gpu != share) {
        throw spread_wrong(plan.pipelines_per_node > 1
                               ? "pipeline " + std::to_string(p) + ", node " + pipeline.nodes[position] + " (" +
                                     std::to_string(plan.pipelines_per_node) + " pipelines a node, " +
                                     std::to_string(share) + " GPUs each)"
                               : "pipeline " + std::to_string(p) + ", node " + pipeline.nodes[position]);
      }
    }
  }
  std::vector<WorkerSeat> out;
  for (std::size_t r = 0; r < by_rank.size(); ++r) {
    if (!by_rank[r]) throw spread_wrong("node " + nodes[r / static_cast<std::size_t>(G)] + " (its pipelines together)");
    out.push_back(*by_rank[r]);
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
  // (layer, receiving node) -> sending nodes: one holding it whole, or the
  // nodes of a stage over several, each holding a part.
  std::map<std::pair<int, std::string>, std::vector<std::string>> senders;
  for (const auto& t : transfers) senders[{t.layer, t.to_node}].push_back(t.from_node);

  std::vector<ShardCopy> out;
  for (std::size_t r = 0; r < next_seats.size(); ++r) {
    const WorkerSeat& me = next_seats[r];
    const std::string& node = next_nodes[r / static_cast<std::size_t>(G)];
    for (int l = me.layer_begin; l < me.layer_end; ++l) {
      const auto from = senders.find({l, node});
      // Its own GPUs first: what it kept, or its part of a stage over several nodes.
      std::vector<std::string> nodes{node};
      if (from != senders.end()) nodes.insert(nodes.end(), from->second.begin(), from->second.end());
      struct Source {
        int rank;
        WorkerSeat seat;
      };
      std::vector<Source> sources;  // the GPUs holding layer l
      for (const auto& source : nodes) {
        if (!node_rank.count(source)) throw std::logic_error("shard_copies: node " + source + " is not in the next plan");
        for (int g = 0; g < G; ++g) {
          const auto it = held.find({source, g});
          if (it != held.end() && it->second.holds(l)) sources.push_back({node_rank.at(source) * G + g, it->second});
        }
      }
      if (sources.empty()) {
        throw std::logic_error("shard_copies: node " + node + " has no source of layer " + std::to_string(l));
      }
      const auto same = [&](const Source& s) { return s.seat.degree == me.degree && s.seat.shard == me.shard; };
      if (std::any_of(sources.begin(), sources.end(),
                      [&](const Source& s) { return s.rank == static_cast<int>(r) && same(s); })) {
        continue;  // kept where it is
      }
      // One source of exactly its shard, else every one that overlaps it
      // (of a whole holder, where there is one).
      const auto exact = std::find_if(sources.begin(), sources.end(), same);
      const auto whole = std::find_if(sources.begin(), sources.end(), [](const Source& s) { return s.seat.degree == 1; });
      for (const Source& s : sources) {
        const bool wanted = exact != sources.end()   ? &s == &*exact
                            : whole != sources.end() ? &s == &*whole
                                                     : shards_overlap(s.seat.degree, s.seat.shard, me.degree, me.shard);
        if (wanted) out.push_back({l, s.rank, static_cast<int>(r), s.seat.degree, s.seat.shard});
      }
    }
  }
  return out;
}

}  // namespace oobleck::recovery
