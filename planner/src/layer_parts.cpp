#include "layer_parts.h"

#include <algorithm>

namespace oobleck::detail {

LayerParts::LayerParts(const Plan& plan, int layers, const std::function<bool(const std::string&)>& alive) {
  for (const auto& p : plan.pipelines) {
    for (const auto& stage : p.stages) {
      if (stage.node_span == 1) continue;
      if (groups_.empty()) groups_.resize(static_cast<std::size_t>(layers));
      std::vector<std::string_view> group;
      bool living = true;
      for (int n = stage.node; n < stage.node + stage.node_span; ++n) {
        const std::string& node = p.nodes.at(static_cast<std::size_t>(n));
        group.push_back(node);
        if (alive(node)) {
          parts_[node].push_back({&p, &stage, n - stage.node});
        } else {
          living = false;
        }
      }
      if (!living) continue;
      for (int l = stage.layer_begin; l < stage.layer_end; ++l) groups_[l].push_back(group);
    }
  }
}

bool LayerParts::kept(const Pipeline& pipeline, int position, int layer) const {
  const auto it = parts_.find(pipeline.nodes.at(static_cast<std::size_t>(position)));
  if (it == parts_.end()) return false;
  const Stage* now = nullptr;
  for (const auto& stage : pipeline.stages) {
    if (stage_on_node(stage, position) && stage.layer_begin <= layer && layer < stage.layer_end) now = &stage;
  }
  if (now == nullptr) return false;
  for (const Part& part : it->second) {
    const Stage& was = *part.stage;
    if (was.layer_begin != now->layer_begin || was.layer_end != now->layer_end || was.gpus != now->gpus ||
        was.node_span != now->node_span || part.offset != position - now->node) {
      continue;
    }
    bool same_nodes = true;
    for (int k = 0; k < now->node_span && same_nodes; ++k) {
      same_nodes = part.pipeline->nodes.at(static_cast<std::size_t>(was.node + k)) ==
                   pipeline.nodes.at(static_cast<std::size_t>(now->node + k));
    }
    if (same_nodes) return true;
  }
  return false;
}

std::vector<std::pair<std::string_view, Bytes>> LayerParts::sources(
    int layer, Bytes layer_bytes, std::string_view receiver,
    const std::function<Bytes(std::string_view)>& sent_by) const {
  if (!has_group(layer)) return {};
  const auto& groups = groups_[layer];
  // Fewest parts to move (a group the receiver is in sends one fewer),
  // then the least loaded.
  const auto key = [&](const std::vector<std::string_view>& g) {
    Bytes most = 0;
    for (const auto& n : g) most = std::max(most, sent_by(n));
    return std::pair{std::count_if(g.begin(), g.end(), [&](std::string_view n) { return n != receiver; }), most};
  };
  const std::vector<std::string_view>* best = &groups.front();
  for (const auto& g : groups) {
    if (key(g) < key(*best)) best = &g;
  }
  std::vector<std::pair<std::string_view, Bytes>> out;
  const Bytes part = layer_bytes / static_cast<Bytes>(best->size());
  for (const auto& n : *best) {
    if (n != receiver) out.emplace_back(n, part);
  }
  return out;
}

}  // namespace oobleck::detail
