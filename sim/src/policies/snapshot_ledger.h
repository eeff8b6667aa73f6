// What the nodes' host memory holds in a simulated run with in-memory
// snapshots, kept as the live executor keeps it (executor/src/live:
// snapshots/snapshot_store.h, master/snapshot_ledger.h):
// - after every K-th iteration each training node snapshots its layers into
//   its own memory; every M-th (M a multiple of K) also goes to its mirror,
//   the next node in rank order (recovery::ranked_nodes, alive ones, a ring);
// - a node that gets a new mirror sends it its newest own snapshot at once;
// - each holder keeps the newest two snapshots of each owner (its own, or
//   those it mirrors), so the survivors' own copy of a mirrored step is gone
//   2K iterations later;
// - a lost node's memory is gone; a rollback drops the newer snapshots.
// Steps are counted in iterations done: the snapshot "after step s" holds
// the state after s iterations. Only the newest two of a span of iterations
// are materialized, so days of training cost nothing here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oobleck/recovery/snapshots.h"

namespace oobleck::sim::detail {

class SnapshotLedger {
 public:
  SnapshotLedger(int snapshot_every, int mirror_every) : snapshot_every_(snapshot_every), mirror_every_(mirror_every) {}

  // The layers [begin, end) each training node holds from now on.
  void lay_out(const std::map<std::string, std::pair<int, int>>& layers);
  // Each node of `ranked` (alive, in rank order) mirrors to the next one.
  void assign_mirrors(const std::vector<std::string>& ranked);
  // Iterations (from, to] were trained with the current layout and mirrors.
  void trained(std::int64_t from, std::int64_t to);
  void forget_holder(const std::string& node);
  void forget_after(std::int64_t iterations);

  // The snapshots complete for layers [0, layers), newest first, with every
  // holder of each piece (the controller's SnapshotsHeld).
  [[nodiscard]] std::vector<recovery::Snapshot> complete(int layers) const;

 private:
  struct Held {
    std::int64_t step = 0;
    int begin = 0, end = 0;
  };
  struct NewestTwo {
    Held held[2];
    int count = 0;  // held[0] older
  };
  // Nodes by number, pairs of them as one key: every change stores
  // thousands of snapshots in a large cluster.
  int id(const std::string& node);
  static std::uint64_t key(int holder, int owner) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(holder)) << 32 | static_cast<std::uint32_t>(owner);
  }
  void store(int holder, int owner, const Held& held);

  int snapshot_every_, mirror_every_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> ids_;
  std::vector<std::pair<int, std::pair<int, int>>> layers_;  // node, [begin, end)
  std::unordered_map<int, int> mirror_of_;
  std::unordered_map<std::uint64_t, NewestTwo> held_;  // key(holder, owner)
};

}  // namespace oobleck::sim::detail
