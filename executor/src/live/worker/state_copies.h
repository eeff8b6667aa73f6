// Layer state moving in and out of a worker: copies between workers at a
// generation's start, checkpoints read and written. A layer travels as the
// shards its holders have (weights, both AdamW moments and the step
// count), and a worker that needs another shard cuts it from, or gathers
// it across, the shards it receives.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/layer_state.h"
#include "protocol/protocol.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

// A piece of a snapshot a rollback reads is not at its holder (dropped
// there since the master chose it): the master chooses again.
struct SnapshotMissing : std::runtime_error {
  SnapshotMissing(const std::string& what, int missing_step, int holder_port)
      : std::runtime_error(what), step(missing_step), port(holder_port) {}
  int step, port;
};

// A checkpoint's file that cannot be read back into the layer it holds
// (missing, truncated, another model's): no worker can restore from it, so
// the master ends the run naming it rather than losing the node.
struct CheckpointUnreadable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The copies of the generation, by ranks of `world`: every sender posts
// its sends, then every receiver receives, so no order of the list can
// deadlock. Layer l of this worker becomes shard `shard` of it, made of
// the shards it receives (and of its own, for a copy from itself); a layer
// it receives replaces what `held` had of it, whole or not at all. Returns
// the bytes received.
std::int64_t copy_layers(Communicator& world, const std::vector<protocol::LayerCopy>& copies, TensorShard shard,
                         std::map<int, HeldLayer>& held, const TrainOptions& options);

// Shard `shard` of layers [begin, end) from a checkpoint's folder, whatever
// degree the checkpoint was written at. Throws CheckpointUnreadable naming
// the file that is missing or does not read back.
void load_checkpoint_layers(const std::string& folder, int begin, int end, TensorShard shard,
                            std::map<int, HeldLayer>& held, const TrainOptions& options, int gpus_per_node);

// Shard `shard` of layers [begin, end) from the snapshot of `step` in the
// agents' memory, whatever degree it was taken at.
void load_snapshot_layers(const std::vector<protocol::SnapshotSource>& sources, int step, int begin, int end,
                          TensorShard shard, std::map<int, HeldLayer>& held, const TrainOptions& options,
                          const std::string& token);

// A checkpoint holds each layer once: the layers `rank` writes are those
// whose first holding stage (the one with the lowest ranks) is its own.
[[nodiscard]] std::vector<int> layers_saved_by(const std::vector<recovery::WorkerSeat>& seats, int rank);
// One shard of a layer (serialize_layer's bytes) into a checkpoint's folder.
void save_layer_file(const std::string& folder, int layer, TensorShard shard, const std::string& bytes);

}  // namespace oobleck::executor
