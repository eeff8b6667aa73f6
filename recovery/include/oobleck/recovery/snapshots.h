// Snapshots of the training state in the agents' memory, as the recovery
// rule sees them: after which step, and for each shard of each layer, the
// nodes whose agents hold it (its own node's, and the mirrors). Past f the
// controller rolls back to the newest snapshot the nodes left can restore
// completely; the driver reads it from the holders this file picks.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace oobleck::recovery {

// Shard `shard` of `degree` of layer `layer`, as one worker snapshotted it.
struct SnapshotPiece {
  int layer = 0, degree = 1, shard = 0;
  std::vector<std::string> own;      // nodes that took it (replicas of the layer)
  std::vector<std::string> mirrors;  // nodes that hold a mirror of it
};

struct Snapshot {
  int step = 0;  // the state after it
  std::vector<SnapshotPiece> pieces;
};

// Where a piece is read from: its layer, shard and a holder.
struct PieceSource {
  int layer = 0, degree = 1, shard = 0;
  std::string holder;
  bool mirrored = false;
};

// For each of layers [0, layers): the shards of one degree, each from a
// node in `alive`, preferring the nodes that took it over the mirrors (only
// used with `with_mirrors`), and among degrees the one needing no mirror.
// Empty when some layer cannot be restored.
[[nodiscard]] std::optional<std::vector<PieceSource>> choose_pieces(const Snapshot& snapshot, int layers,
                                                                    const std::vector<std::string>& alive,
                                                                    bool with_mirrors);

}  // namespace oobleck::recovery
