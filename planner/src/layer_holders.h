// Where a plan's layers live, for the copies a new plan needs. A stage on
// one node holds its layers whole there; a stage over several nodes holds
// each layer in parts, one per node, which together make it whole only
// while every one of those nodes lives. A copy comes from a node that holds
// the layer whole, or else from every node of a living group, each sending
// its part.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

class LayerHolders {
 public:
  // The holders in `plan` (which must outlive this) among the nodes
  // `alive` accepts.
  LayerHolders(const Plan& plan, int layers, const std::function<bool(const std::string&)>& alive);

  // Whether some living node, or group of them, can give the layer whole.
  [[nodiscard]] bool survives(int layer) const;
  // Whether the node at `position` of `pipeline` already has what that
  // seat needs of `layer`: it held the layer whole, or the same part of a
  // stage of the same layers and degree over the same nodes.
  [[nodiscard]] bool kept(const Pipeline& pipeline, int position, int layer) const;
  // The nodes to copy `layer` from, with the bytes each sends (of
  // `layer_bytes`): the whole holder that has sent least so far (ties: the
  // first in the plan, or by name), else the members of the living group
  // that has, `receiver` itself left out (it reads its own part).
  enum class Ties : bool { plan_order, by_name };
  [[nodiscard]] std::vector<std::pair<std::string, Bytes>> sources(
      int layer, Bytes layer_bytes, const std::string& receiver,
      const std::function<Bytes(const std::string&)>& sent_by, Ties ties = Ties::plan_order) const;

 private:
  // A node's part of a stage over several nodes: the stage's pipeline and
  // index, and the node's place among its nodes.
  struct Part {
    const Pipeline* pipeline;
    const Stage* stage;
    int offset;
  };

  std::vector<std::vector<std::string_view>> whole_;               // per layer
  std::vector<std::vector<std::vector<std::string_view>>> groups_;  // per layer: living groups
  std::unordered_map<std::string_view, std::vector<std::pair<int, int>>> whole_ranges_;  // node -> [begin, end)s
  std::unordered_map<std::string_view, std::vector<Part>> parts_;                        // node -> its parts
};

}  // namespace oobleck::detail
