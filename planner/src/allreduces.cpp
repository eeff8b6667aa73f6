// All-reduces: the ring's law, the hierarchical one over nodes, and prices
// from a measured table: the gradients' among replicas
// (Hardware::allreduce_table), a tensor-parallel stage's inside a node
// (intra_node_allreduce_table).
//
// A ring all-reduce of b bytes among k ranks takes
//   ring_k(b) = 2(k - 1) alpha + 2(k - 1)/k x b / beta
// (alpha: the hardware's latency; beta: its gradient all-reduce bandwidth,
// or inside a node the intra-node link's).
// A measured table keeps what that law misses at the sizes measured:
// protocol switches between small and large messages, buffers that fit a
// cache or do not, a bandwidth that only large messages reach. The price of
// b among k is the table's time at the measured rank count k0 nearest below
// k (else the smallest measured), carried to k by the ring's law:
//   t(k, b) = T_k0(b) x ring_k(b) / ring_k0(b),
// where T_k0(b) interpolates linearly between the two measured sizes around
// b and, outside the measured sizes, is the nearest measured point carried
// to b by the law:
//   T_k0(b) = t_k0(b_edge) x ring_k0(b) / ring_k0(b_edge).
// So a measured point prices itself exactly, one point scales the law to
// it, and a table that follows the law gives the law back. Times are made
// non-decreasing in size per rank count where the table is read
// (profile.cpp), so the price never falls as a layer grows, which the
// planner's lower bound on the synchronisation tail relies on.
#include <algorithm>

#include "oobleck/planner.h"

namespace oobleck {
namespace {

// The law's ratio a / b, or 1 where b is 0 (no latency and no bytes).
double law_ratio(double a, double b) { return b > 0 ? a / b : 1.0; }

}  // namespace

Milliseconds table_allreduce_ms(const std::vector<AllreducePoint>& table, double bytes, int ranks, double bytes_per_s,
                                Milliseconds latency_ms) {
  if (ranks <= 1) return 0;
  if (table.empty()) return ring_allreduce_ms(bytes, ranks, bytes_per_s, latency_ms);
  const auto ring = [&](double b, int k) { return ring_allreduce_ms(b, k, bytes_per_s, latency_ms); };
  // The measured rank count: the largest at or below `ranks`, else the smallest.
  int k0 = table.front().ranks;
  for (const auto& p : table) {
    if (p.ranks <= ranks) k0 = p.ranks;
  }
  const auto first = std::find_if(table.begin(), table.end(), [&](const AllreducePoint& p) { return p.ranks == k0; });
  const auto last = std::find_if(first, table.end(), [&](const AllreducePoint& p) { return p.ranks != k0; });
  double at_k0 = 0;
  if (bytes <= first->bytes) {
    at_k0 = first->ms * law_ratio(ring(bytes, k0), ring(first->bytes, k0));
  } else if (bytes >= (last - 1)->bytes) {
    at_k0 = (last - 1)->ms * law_ratio(ring(bytes, k0), ring((last - 1)->bytes, k0));
  } else {
    const auto above = std::find_if(first, last, [&](const AllreducePoint& p) { return p.bytes >= bytes; });
    const auto below = above - 1;
    const double w = (bytes - below->bytes) / (above->bytes - below->bytes);
    at_k0 = below->ms + w * (above->ms - below->ms);
  }
  return at_k0 * law_ratio(ring(bytes, ranks), ring(bytes, k0));
}

Milliseconds hierarchical_allreduce_ms(double bytes, int nodes, int gpus_per_node, Milliseconds intra_node_ms,
                                       double inter_node_bytes_per_s, Milliseconds latency_ms) {
  return intra_node_ms + ring_allreduce_ms(bytes / gpus_per_node, nodes, inter_node_bytes_per_s, latency_ms);
}

Milliseconds CostModel::tensor_allreduce_ms(double bytes, int degree) const {
  const int gpus = gpus_per_node();
  if (degree <= gpus) return intra_node_allreduce_ms(bytes, degree);
  const auto& hw = profile_->hardware;
  return hierarchical_allreduce_ms(bytes, degree / gpus, gpus, intra_node_allreduce_ms(bytes, gpus),
                                   hw.inter_node_bytes_per_s, hw.latency_ms);
}

Milliseconds ring_allreduce_ms(double bytes, int ranks, double bytes_per_s, Milliseconds latency_ms) {
  if (ranks <= 1) return 0;
  const double k = ranks;
  return 2 * (k - 1) / k * bytes / bytes_per_s * 1000.0 + 2 * (k - 1) * latency_ms;
}

Milliseconds CostModel::allreduce_ms(double bytes, int ranks, double bytes_per_s) const {
  return ring_allreduce_ms(bytes, ranks, bytes_per_s, profile_->hardware.latency_ms);
}

Milliseconds CostModel::gradient_allreduce_ms(double bytes, int ranks) const {
  const Hardware& hw = profile_->hardware;
  if (pipelines_per_node_ == 1 || ranks <= 1) {
    return table_allreduce_ms(hw.allreduce_table, bytes, ranks, hw.gradient_allreduce_bytes_per_s(), hw.latency_ms);
  }
  // Reduce-scatter among a node's replicas, the shards across the nodes,
  // all-gather inside: the two inside move what one all-reduce there does.
  const int sharing = std::min(pipelines_per_node_, ranks);
  const int nodes = (ranks + pipelines_per_node_ - 1) / pipelines_per_node_;
  return intra_node_allreduce_ms(bytes, sharing) +
         table_allreduce_ms(hw.allreduce_table, bytes / sharing, nodes, hw.gradient_allreduce_bytes_per_s(),
                            hw.latency_ms);
}

Milliseconds CostModel::intra_node_allreduce_ms(double bytes, int ranks) const {
  const Hardware& hw = profile_->hardware;
  return table_allreduce_ms(hw.intra_node_allreduce_table, bytes, ranks, hw.intra_node_bytes_per_s, hw.latency_ms);
}

}  // namespace oobleck
