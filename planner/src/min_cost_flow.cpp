// Minimum-cost flow by successive shortest paths: dense Dijkstra on reduced
// costs, which stay non-negative because every edge cost is.
#include "min_cost_flow.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {

void MinCostFlow::run(int source, int sink) {
  const std::size_t n = out_.size();
  std::vector<Bytes> potential(n, 0), distance(n);
  std::vector<int> via(n);
  std::vector<char> done(n);
  const Bytes inf = std::numeric_limits<Bytes>::max() / 4;
  while (true) {
    std::fill(distance.begin(), distance.end(), inf);
    std::fill(via.begin(), via.end(), -1);
    std::fill(done.begin(), done.end(), 0);
    distance[static_cast<std::size_t>(source)] = 0;
    for (std::size_t round = 0; round < n; ++round) {  // dense Dijkstra
      std::size_t u = n;
      for (std::size_t v = 0; v < n; ++v) {
        if (!done[v] && distance[v] < inf && (u == n || distance[v] < distance[u])) u = v;
      }
      if (u == n) break;
      done[u] = 1;
      for (int e : out_[u]) {
        const Edge& edge = edges_[static_cast<std::size_t>(e)];
        const auto v = static_cast<std::size_t>(edge.to);
        if (edge.capacity <= 0) continue;
        const Bytes candidate = distance[u] + edge.cost + potential[u] - potential[v];
        if (candidate < distance[v]) {
          distance[v] = candidate;
          via[v] = e;
        }
      }
    }
    if (distance[static_cast<std::size_t>(sink)] >= inf) return;
    for (std::size_t v = 0; v < n; ++v) {
      if (distance[v] < inf) potential[v] += distance[v];
    }
    Bytes push = inf;
    for (int v = sink; v != source;) {
      const Edge& edge = edges_[static_cast<std::size_t>(via[static_cast<std::size_t>(v)])];
      push = std::min(push, edge.capacity);
      v = edges_[static_cast<std::size_t>(via[static_cast<std::size_t>(v)]) ^ 1].to;
    }
    for (int v = sink; v != source;) {
      const auto e = static_cast<std::size_t>(via[static_cast<std::size_t>(v)]);
      edges_[e].capacity -= push;
      edges_[e ^ 1].capacity += push;
      v = edges_[e ^ 1].to;
    }
  }
}

}  // namespace oobleck::detail
