// The copies a plan on the same nodes needs when they change places (a slow
// node moved to a lighter position): every node fetches the layers its new
// stages hold and its old ones did not, each from the holder that has sent
// least so far, as reconfigure chooses its sources. The copy time is the
// busiest node's bytes, sent or received, over one link, plus its latency.
#include <algorithm>
#include <map>
#include <set>

#include "oobleck/planner.h"

namespace oobleck {
namespace {

std::map<std::string, std::set<int>> layers_held(const Plan& plan) {
  std::map<std::string, std::set<int>> out;
  for (const auto& p : plan.pipelines) {
    for (const auto& s : p.stages) {
      auto& held = out[p.nodes.at(static_cast<std::size_t>(s.node))];
      for (int l = s.layer_begin; l < s.layer_end; ++l) held.insert(l);
    }
  }
  return out;
}

}  // namespace

Reconfiguration rearrangement(const CostModel& cost, const Plan& from, const Plan& to) {
  const auto before = layers_held(from);
  std::map<int, std::vector<std::string>> holders;  // layer -> nodes holding it in `from`, by name
  for (const auto& [node, layers] : before) {
    for (int l : layers) holders[l].push_back(node);
  }
  Reconfiguration out;
  out.plan = to;
  std::map<std::string, Bytes> sent, received;
  for (const auto& [node, layers] : layers_held(to)) {
    const auto had = before.find(node);
    for (int l : layers) {
      if (had != before.end() && had->second.count(l)) continue;
      const auto h = holders.find(l);
      if (h == holders.end()) {
        throw NoPlanError("layer " + std::to_string(l) + " is held by no node of the plan it is rearranged from");
      }
      const std::string& source = *std::min_element(h->second.begin(), h->second.end(), [&](const auto& a, const auto& b) {
        return sent[a] < sent[b];
      });
      const Bytes bytes = cost.layer_state_bytes(l);
      sent[source] += bytes;
      received[node] += bytes;
      out.copy_bytes += bytes;
      out.transfers.push_back({l, source, node, bytes});
    }
  }
  Bytes busiest = 0;
  for (const auto* side : {&sent, &received}) {
    for (const auto& [node, bytes] : *side) busiest = std::max(busiest, bytes);
  }
  const auto& hw = cost.profile().hardware;
  out.copy_ms = out.transfers.empty() ? 0.0
                                      : static_cast<double>(busiest) / hw.inter_node_bytes_per_s * 1000.0 + hw.latency_ms;
  return out;
}

}  // namespace oobleck
