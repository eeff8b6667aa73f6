// The nodes in the cluster while a trace plays, in order of arrival.
//
// A node's place in that order is the index of the trace event that added
// it, so the nodes present are an ordered set of event indices: an add or a
// remove is O(log n), the first k nodes in order of arrival cost O(k), and no
// name is copied (names are read from the trace's add events). Nodes are
// numbered by the job (Job::node_of_event) so that a remove finds its node's
// add in an array instead of searching by name.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "oobleck/sim/trace.h"

namespace oobleck::sim::detail {

inline constexpr std::uint32_t kNoEvent = UINT32_MAX;

class PresentNodes {
 public:
  PresentNodes(const std::vector<TraceEvent>& events, std::size_t node_count)
      : events_(events), added_by_(node_count, kNoEvent) {}

  // `event`: the index of the trace event that adds `node`.
  void add(std::uint32_t node, std::uint32_t event) {
    added_by_[node] = event;
    by_arrival_.insert(by_arrival_.end(), event);  // events come in order: the hint is exact
  }
  void remove(std::uint32_t node) {
    by_arrival_.erase(added_by_[node]);
    added_by_[node] = kNoEvent;
  }
  [[nodiscard]] std::size_t size() const { return by_arrival_.size(); }

  // Calls `visit(name)` for each node in order of arrival while it returns true.
  template <typename Visit>
  void for_each(Visit visit) const {
    for (const std::uint32_t event : by_arrival_) {
      if (!visit(events_[event].node)) return;
    }
  }
  // The first `count` nodes (all, when fewer are present).
  [[nodiscard]] std::vector<std::string> first(std::size_t count) const {
    std::vector<std::string> out;
    out.reserve(std::min(count, size()));
    for_each([&](const std::string& name) {
      if (out.size() == count) return false;
      out.push_back(name);
      return true;
    });
    return out;
  }

 private:
  const std::vector<TraceEvent>& events_;
  std::set<std::uint32_t> by_arrival_;   // the add events of the nodes present
  std::vector<std::uint32_t> added_by_;  // node -> the add event of its stay, or kNoEvent
};

}  // namespace oobleck::sim::detail
