// Re-planning after nodes leave or join: the new plan and the copies of
// layer state it needs (planner.h includes this header; reconfigure.cpp has
// the derivation).
#pragma once

#include <string>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck {

struct Transfer {
  int layer = 0;
  std::string from_node;
  std::string to_node;
  Bytes bytes = 0;
};

struct Reconfiguration {
  Plan plan;
  std::vector<std::string> lost;
  std::vector<std::string> added;
  std::vector<Transfer> transfers;
  Bytes copy_bytes = 0;
  Milliseconds copy_ms = 0;
};

struct ReconfigureOptions {
  // Re-plan every pipeline for the best iteration time, instead of keeping
  // the pipelines that lost no node. Usually moves far more state.
  bool replan_all = false;
  // Nodes that do not compute at the profile's speed: nodes of the plan or
  // added (InputError otherwise; lost ones are ignored). Each composition
  // weighed is placed for the fewest bytes and again with the slowest
  // survivors left as the spares; each placement is split at the speeds,
  // and also placed anew within its pipelines (apply_node_speeds); with
  // replan_all, instantiate_at_speeds on the survivors is a choice too.
  // Best iteration time at the speeds, then the fewest bytes copied.
  // Empty: every node as profiled.
  NodeSpeeds node_speeds;
};

// Replans after `lost` nodes leave and `added` nodes join: keeps the global
// batch and at least min(f+1, the most pipelines the survivors can form)
// pipelines, and with that many uses as many survivors as any plan can (all,
// when possible).
// By default pipelines that lost no node stay as they are; the affected ones
// are re-planned with the nodes they have left and the ones that joined, and
// intact pipelines are taken apart (merged, or lending nodes) only when that
// is needed, as few as possible. Among the choices left: best iteration time,
// then the fewest bytes copied. Throws NoPlanError when too few nodes survive
// or some layer has no surviving replica.
[[nodiscard]] Reconfiguration reconfigure(const CostModel& cost, const TemplateSet& templates,
                                          const Plan& current,
                                          const std::vector<std::string>& lost,
                                          const std::vector<std::string>& added,
                                          const ReconfigureOptions& options = {});

// The templates reconfigure weighs for `current` once `lost` nodes leave and
// `added` join: the whole-node templates up to nodes_after, or, where its
// pipelines share nodes (`cost` set to as many a node), its template on
// part of a node alone (none when none fits).
[[nodiscard]] TemplateSet replanning_templates(const CostModel& cost, const Plan& current, std::size_t lost,
                                               std::size_t added, const Progress& progress = {});

// The copies that give every node of `to` the layers it holds there, when
// the state is where `from` has it (the same nodes, placed anew, as
// apply_node_speeds does): each missing layer from the holder that has sent
// least so far, as reconfigure chooses. `lost` and `added` stay empty.
// Throws NoPlanError when some layer `to` needs has no holder in `from`.
[[nodiscard]] Reconfiguration rearrangement(const CostModel& cost, const Plan& from, const Plan& to);

// Nodes of `current` once `lost` of them leave and `added` join, at least 1:
// the most nodes a template of the new plan can need.
[[nodiscard]] int nodes_after(const Plan& current, std::size_t lost, std::size_t added);

[[nodiscard]] std::string reconfiguration_to_json(const Reconfiguration& result,
                                                  const TemplateSet& templates,
                                                  const Profile& profile);

}  // namespace oobleck
