#include "layer_holders.h"

#include <algorithm>

namespace oobleck::detail {

LayerHolders::LayerHolders(const Plan& plan, int layers, const std::function<bool(const std::string&)>& alive)
    : whole_(layers), groups_(layers) {
  for (const auto& p : plan.pipelines) {
    for (const auto& stage : p.stages) {
      if (stage.node_span == 1) {
        const std::string& node = p.nodes.at(static_cast<std::size_t>(stage.node));
        if (!alive(node)) continue;
        whole_ranges_[node].emplace_back(stage.layer_begin, stage.layer_end);
        for (int l = stage.layer_begin; l < stage.layer_end; ++l) whole_[l].push_back(node);
        continue;
      }
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

bool LayerHolders::survives(int layer) const { return !whole_[layer].empty() || !groups_[layer].empty(); }

bool LayerHolders::kept(const Pipeline& pipeline, int position, int layer) const {
  const std::string& node = pipeline.nodes.at(static_cast<std::size_t>(position));
  if (const auto it = whole_ranges_.find(node); it != whole_ranges_.end()) {
    for (const auto& [begin, end] : it->second) {
      if (begin <= layer && layer < end) return true;  // any new seat is cut from it
    }
  }
  const auto it = parts_.find(node);
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

std::vector<std::pair<std::string, Bytes>> LayerHolders::sources(
    int layer, Bytes layer_bytes, const std::string& receiver,
    const std::function<Bytes(const std::string&)>& sent_by, Ties ties) const {
  const auto& whole = whole_[layer];
  if (!whole.empty()) {
    std::string best(whole.front());
    Bytes least = sent_by(best);
    for (const auto& view : whole) {
      const std::string n(view);
      const Bytes a = sent_by(n);
      if (a < least || (ties == Ties::by_name && a == least && n < best)) best = n, least = a;
    }
    return {{best, layer_bytes}};
  }
  const auto& groups = groups_[layer];
  if (groups.empty()) return {};
  const auto load = [&](const std::vector<std::string_view>& g) {
    Bytes most = 0;
    for (const auto& n : g) most = std::max(most, sent_by(std::string(n)));
    return most;
  };
  const std::vector<std::string_view>* best = &groups.front();
  for (const auto& g : groups) {
    if (load(g) < load(*best)) best = &g;
  }
  std::vector<std::pair<std::string, Bytes>> out;
  const Bytes part = layer_bytes / static_cast<Bytes>(best->size());
  for (const auto& n : *best) {
    if (n != receiver) out.emplace_back(std::string(n), part);
  }
  return out;
}

}  // namespace oobleck::detail
