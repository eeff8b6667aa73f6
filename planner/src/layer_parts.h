// The parts of layers that stages over several nodes hold, for the copies
// a new plan needs. A stage on one node holds its layers whole there (the
// callers track those); a stage over k nodes holds each of its layers in k
// parts, one per node, which make the layer whole only while all k nodes
// live. A layer no node holds whole is gathered from every node of such a
// living group, each sending its part; a group with a lost node gives
// nothing.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

class LayerParts {
 public:
  // The parts in `plan` (which must outlive this) held by the nodes
  // `alive` accepts. Costs nothing for a plan without stages over several
  // nodes.
  LayerParts(const Plan& plan, int layers, const std::function<bool(const std::string&)>& alive);

  // Whether a living group holds the layer.
  [[nodiscard]] bool has_group(int layer) const { return !groups_.empty() && !groups_[layer].empty(); }
  // Whether the node at `position` of `pipeline` holds the part its seat
  // there needs of `layer`: the same part of a stage of the same layers and
  // degree over the same nodes.
  [[nodiscard]] bool kept(const Pipeline& pipeline, int position, int layer) const;
  // The group to gather `layer` from, with the bytes each member sends (of
  // `layer_bytes`; names viewed in the plan): the living group with the
  // fewest parts to send (`receiver` reads its own part), then the one
  // whose busiest member has sent least (ties: the first in the plan).
  // Empty without a living group.
  [[nodiscard]] std::vector<std::pair<std::string_view, Bytes>> sources(
      int layer, Bytes layer_bytes, std::string_view receiver,
      const std::function<Bytes(std::string_view)>& sent_by) const;

 private:
  struct Part {
    const Pipeline* pipeline;
    const Stage* stage;
    int offset;  // the node's place among the stage's nodes
  };
  std::vector<std::vector<std::vector<std::string_view>>> groups_;  // per layer: living groups (empty: none at all)
  std::unordered_map<std::string_view, std::vector<Part>> parts_;   // node -> the parts it holds
};

}  // namespace oobleck::detail
