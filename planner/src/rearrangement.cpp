// The copies a plan on the same nodes needs when they change places (a slow
// node moved to a lighter position): every node fetches the layers its new
// stages hold and its old ones did not, each from the holder that has sent
// least so far, as reconfigure chooses its sources. The copy time is the
// busiest node's bytes, sent or received, over one link, plus its latency.
//
// Cost: a pipeline that `to` keeps as `from` had it (the same nodes in the
// same places, the same stages) moves nothing and is skipped, so a plan
// where one pipeline changed costs that pipeline's layers plus one pass
// over `from`'s nodes, not a set of layers for every node of the cluster.
#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "layer_parts.h"
#include "oobleck/planner.h"

namespace oobleck {
namespace {

// The layers node position `position` of `p` holds whole (a stage over
// several nodes holds parts: LayerParts).
std::set<int> layers_at(const Pipeline& p, int position) {
  std::set<int> out;
  for (const auto& s : p.stages) {
    if (s.node != position || s.node_span > 1) continue;
    for (int l = s.layer_begin; l < s.layer_end; ++l) out.insert(l);
  }
  return out;
}

}  // namespace

Reconfiguration rearrangement(const CostModel& cost, const Plan& from, const Plan& to) {
  Reconfiguration out;
  out.plan = to;
  const detail::LayerParts parts(from, cost.layers(), [](const std::string&) { return true; });
  // Where each node was: its pipeline and position in `from`.
  std::unordered_map<std::string_view, std::pair<std::size_t, int>> place;
  for (std::size_t p = 0; p < from.pipelines.size(); ++p) {
    const auto& nodes = from.pipelines[p].nodes;
    for (std::size_t r = 0; r < nodes.size(); ++r) place.emplace(nodes[r], std::pair{p, static_cast<int>(r)});
  }
  struct Missing {
    int layer;
    std::string_view node;
  };
  std::vector<Missing> missing;
  for (std::size_t p = 0; p < to.pipelines.size(); ++p) {
    const Pipeline& now = to.pipelines[p];
    if (p < from.pipelines.size() && from.pipelines[p].nodes == now.nodes && from.pipelines[p].stages == now.stages) {
      continue;
    }
    for (std::size_t r = 0; r < now.nodes.size(); ++r) {
      const auto was = place.find(now.nodes[r]);
      const std::set<int> had =
          was == place.end() ? std::set<int>{} : layers_at(from.pipelines[was->second.first], was->second.second);
      for (int l : layers_at(now, static_cast<int>(r))) {
        if (!had.count(l)) missing.push_back({l, now.nodes[r]});
      }
      // Its parts of stages over several nodes: cut from a layer it held
      // whole, or kept as they were.
      for (const auto& s : now.stages) {
        if (s.node_span == 1 || !stage_on_node(s, static_cast<int>(r))) continue;
        for (int l = s.layer_begin; l < s.layer_end; ++l) {
          if (!had.count(l) && !parts.kept(now, static_cast<int>(r), l)) missing.push_back({l, now.nodes[r]});
        }
      }
    }
  }
  if (missing.empty()) return out;
  std::map<int, std::vector<std::string_view>> holders;  // layer -> nodes holding it in `from`, in plan order
  for (const auto& p : from.pipelines) {
    for (const auto& s : p.stages) {
      if (s.node_span > 1) continue;  // parts
      for (int l = s.layer_begin; l < s.layer_end; ++l) holders[l].push_back(p.nodes.at(static_cast<std::size_t>(s.node)));
    }
  }
  // In the order of a node by name, then its layers, as a full pass over
  // the nodes by name would give them.
  std::stable_sort(missing.begin(), missing.end(), [](const Missing& a, const Missing& b) {
    return a.node != b.node ? a.node < b.node : a.layer < b.layer;
  });
  std::unordered_map<std::string_view, Bytes> sent, received;
  for (const Missing& m : missing) {
    const auto sent_by = [&](std::string_view node) {
      const auto it = sent.find(node);
      return it == sent.end() ? Bytes{0} : it->second;
    };
    const auto copy = [&](std::string_view source, Bytes bytes) {
      sent[source] += bytes;
      received[m.node] += bytes;
      out.copy_bytes += bytes;
      out.transfers.push_back({m.layer, std::string(source), std::string(m.node), bytes});
    };
    const auto h = holders.find(m.layer);
    if (h == holders.end()) {
      // Nothing holds it whole: gathered from a group's parts.
      const auto sources = parts.sources(m.layer, cost.layer_state_bytes(m.layer), m.node, sent_by);
      if (sources.empty()) {
        throw NoPlanError("layer " + std::to_string(m.layer) + " is held by no node of the plan it is rearranged from");
      }
      for (const auto& [source, bytes] : sources) copy(source, bytes);
      continue;
    }
    // The least loaded holder; among equals, the first by name.
    std::string_view source = h->second.front();
    Bytes least = sent_by(source);
    for (const auto& candidate : h->second) {
      const Bytes a = sent_by(candidate);
      if (a < least || (a == least && candidate < source)) source = candidate, least = a;
    }
    copy(source, cost.layer_state_bytes(m.layer));
  }
  Bytes busiest = 0;
  for (const auto* side : {&sent, &received}) {
    for (const auto& [node, bytes] : *side) busiest = std::max(busiest, bytes);
  }
  const auto& hw = cost.profile().hardware;
  out.copy_ms = static_cast<double>(busiest) / hw.inter_node_bytes_per_s * 1000.0 + hw.latency_ms;
  return out;
}

}  // namespace oobleck
