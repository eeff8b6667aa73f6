// The nodes a reconfiguration keeps (the old ones not lost, then those that
// joined), the layers each holds, and their placement into the node slots
// of a composition (reconfigure.cpp: steps 1 and 4 of its derivation).
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "composition.h"
#include "layer_parts.h"
#include "oobleck/planner.h"

namespace oobleck::detail {

struct Placement {
  std::vector<std::vector<std::string>> pipeline_nodes;
  std::vector<std::string> spare;
  Bytes bytes = 0;  // fetched by the nodes placed
};

class Survivors {
 public:
  // InputError for a lost node not in `current`, or an added one already
  // in it (unless lost too, as its replacement).
  Survivors(const CostModel& cost, const TemplateSet& templates, const Plan& current,
            const std::vector<std::string>& lost, const std::vector<std::string>& added);

  // NoPlanError naming the layers that no survivor holds.
  void check_state_survives() const;
  [[nodiscard]] int count() const;
  [[nodiscard]] std::vector<std::string> names() const;  // in survivor order
  [[nodiscard]] bool contains(const std::string& name) const;

  // Every survivor in a slot of `composition`'s pipelines or one of
  // `spare_count` spare slots: intact pipelines keep their nodes, the rest
  // go where they fetch the fewest bytes. With `idle_first`, the slowest
  // survivors below speed 1 there fill the spare slots first, and a
  // pipeline that had one of them is no longer intact.
  [[nodiscard]] Placement place(const Composition& composition, int spare_count,
                                const NodeSpeeds* idle_first = nullptr) const;
  // `plan` (on the survivors) with the copies it needs: each missing layer
  // from the surviving holder that has sent least so far.
  [[nodiscard]] Reconfiguration with_copies(Plan plan) const;

 private:
  struct Survivor {
    std::string name;
    std::vector<char> holds;         // per layer, whole (stages over several nodes hold parts: parts_)
    std::vector<Bytes> held_prefix;  // state bytes held in layers [0, l)
  };
  struct Slot {
    int pipeline = -1;  // -1: a spare slot (node left idle)
    int position = 0;
    std::vector<std::pair<int, int>> ranges;  // layer ranges the node must hold
  };

  [[nodiscard]] Bytes fetch_bytes(const Survivor& s, const Slot& slot) const;
  // The node slots of the composition's pipelines in order, then the spare ones.
  [[nodiscard]] std::vector<Slot> slots_of(const Composition& composition, int spare_count) const;
  void idle_slowest(const NodeSpeeds& speeds, const std::vector<Slot>& slots, std::vector<int>& slot_of,
                    std::vector<char>& slot_taken) const;
  void keep_intact_nodes(const Composition& composition, const std::vector<Slot>& slots, std::vector<int>& slot_of,
                         std::vector<char>& slot_taken) const;
  void assign_the_rest(const std::vector<Slot>& slots, std::vector<int>& slot_of,
                       const std::vector<char>& slot_taken) const;

  const CostModel& cost_;
  const TemplateSet& templates_;
  const Plan& current_;
  const std::vector<std::string>& lost_;
  const std::vector<std::string>& added_;
  std::vector<Survivor> survivors_;
  std::unordered_map<std::string, int> index_;  // survivor by name
  LayerParts parts_;  // of the current plan's stages over several nodes, among the survivors
};

}  // namespace oobleck::detail
