// Minimum-cost flow for the placement of survivors (min_cost_flow.cpp).
#pragma once

#include <vector>

#include "oobleck/common.h"

namespace oobleck::detail {

// Minimum-cost flow by successive shortest paths (Dijkstra on reduced costs;
// every cost is non-negative). Used on small graphs of node and slot groups.
class MinCostFlow {
 public:
  explicit MinCostFlow(int vertices) : out_(static_cast<std::size_t>(vertices)) {}

  int add_edge(int from, int to, Bytes capacity, Bytes cost) {
    edges_.push_back({to, capacity, cost});
    out_[static_cast<std::size_t>(from)].push_back(static_cast<int>(edges_.size()) - 1);
    edges_.push_back({from, 0, -cost});
    out_[static_cast<std::size_t>(to)].push_back(static_cast<int>(edges_.size()) - 1);
    return static_cast<int>(edges_.size()) - 2;
  }
  [[nodiscard]] Bytes flow(int edge) const { return edges_[static_cast<std::size_t>(edge) ^ 1].capacity; }

  // Sends as much as possible from source to sink at least total cost.
  void run(int source, int sink);

 private:
  struct Edge {
    int to;
    Bytes capacity;
    Bytes cost;
  };
  std::vector<Edge> edges_;
  std::vector<std::vector<int>> out_;
};

}  // namespace oobleck::detail
