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
#include <string_view>
#include <unordered_map>

#include "layer_holders.h"
#include "oobleck/planner.h"

namespace oobleck {

Reconfiguration rearrangement(const CostModel& cost, const Plan& from, const Plan& to) {
  Reconfiguration out;
  out.plan = to;
  const detail::LayerHolders holders(from, cost.layers(), [](const std::string&) { return true; });
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
    for (const auto& s : now.stages) {
      for (int r = s.node; r < s.node + s.node_span; ++r) {
        for (int l = s.layer_begin; l < s.layer_end; ++l) {
          if (!holders.kept(now, r, l)) missing.push_back({l, now.nodes[static_cast<std::size_t>(r)]});
        }
      }
    }
  }
  if (missing.empty()) return out;
  // In the order of a node by name, then its layers, as a full pass over
  // the nodes by name would give them.
  std::stable_sort(missing.begin(), missing.end(), [](const Missing& a, const Missing& b) {
    return a.node != b.node ? a.node < b.node : a.layer < b.layer;
  });
  std::unordered_map<std::string, Bytes> sent, received;
  for (const Missing& m : missing) {
    // The least loaded holder; among equals, the first by name.
    const auto sent_by = [&](const std::string& node) {
      const auto it = sent.find(node);
      return it == sent.end() ? Bytes{0} : it->second;
    };
    const std::string receiver(m.node);
    const auto sources = holders.sources(m.layer, cost.layer_state_bytes(m.layer), receiver, sent_by,
                                         detail::LayerHolders::Ties::by_name);
    if (sources.empty()) {
      throw NoPlanError("layer " + std::to_string(m.layer) + " is held by no node of the plan it is rearranged from");
    }
    for (const auto& [source, bytes] : sources) {
      sent[source] += bytes;
      received[receiver] += bytes;
      out.copy_bytes += bytes;
      out.transfers.push_back({m.layer, source, receiver, bytes});
    }
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
