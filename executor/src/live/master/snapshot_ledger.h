// The master's view of the snapshots in the agents' memory: which agent
// holds which worker's snapshot of which step, as the agents reported them
// sealed, less those of agents lost. Each agent keeps a worker's newest
// kSnapshotsKept sealed snapshots and tells each seal at once; this ledger
// keeps one fewer, so that what it names is still there.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "live/snapshots/snapshot_store.h"
#include "oobleck/recovery/snapshots.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

class SnapshotLedger {
 public:
  void stored(const std::string& holder, const protocol::SnapshotStored& s);
  // The holder's agent is gone, and its memory with it.
  void forget_holder(const std::string& holder);
  // A rollback to the state after `step`: later snapshots are of steps that
  // will be trained again.
  void forget_after(int step);
  // What `holder` had of `step` is not there after all.
  void forget(const std::string& holder, int step);
  // The step a rollback restores, until its generation trains (none: no
  // such rollback): its snapshots stay named, however many newer ones come.
  void pin(std::optional<int> step) { pinned_ = step; }
  [[nodiscard]] std::optional<int> pinned() const { return pinned_; }
  // Whether `holder`'s agent holds `owner`'s GPU's snapshot of `step`.
  [[nodiscard]] bool holds(const std::string& holder, const std::string& owner, int gpu, int step) const;
  // Whether `node`'s own agent holds its GPU's snapshot of `step`.
  [[nodiscard]] bool holds_own(const std::string& node, int gpu, int step) const {
    return holds(node, node, gpu, step);
  }
  // Whose snapshot (the node that took it) `holder` keeps `piece` of.
  [[nodiscard]] std::string owner_of(const std::string& holder, int step, const recovery::PieceSource& piece) const;
  // The snapshots complete for layers [0, layers) across the holders, newest first.
  [[nodiscard]] std::vector<recovery::Snapshot> complete(int layers) const;
  // Every entry, each holder's oldest first (what stored() takes back).
  [[nodiscard]] std::vector<std::pair<std::string, protocol::SnapshotStored>> entries() const;

 private:
  // (holder, owner, GPU) -> sealed snapshots, newest last
  std::map<std::tuple<std::string, std::string, int>, std::vector<protocol::SnapshotStored>> held_;
  std::optional<int> pinned_;
};

}  // namespace oobleck::executor
