// Layer state moving in and out of a worker: copies between workers at a
// generation's start, checkpoints read and written. Layers travel whole:
// weights, both AdamW moments and the step count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/layer_state.h"
#include "protocol/protocol.h"
#include "oobleck/recovery/seats.h"

namespace oobleck::executor {

// The planner's transfer list, by ranks of `world`: every sender posts its
// sends, then every receiver receives, so no order of the list can
// deadlock. A received layer replaces what `held` had of it, whole or not
// at all. Returns the bytes received.
std::int64_t copy_layers(Communicator& world, const std::vector<protocol::LayerCopy>& copies,
                         std::map<int, HeldLayer>& held, const TrainOptions& options);

// Layers [begin, end) from a checkpoint's folder.
void load_checkpoint_layers(const std::string& folder, int begin, int end, std::map<int, HeldLayer>& held,
                            const TrainOptions& options);

// The state after a committed step into `folder`: each layer is written by
// its first holder (the lowest rank whose seat holds it).
void save_checkpoint_layers(const std::string& folder, const std::vector<recovery::Seat>& seats, int rank,
                            const std::map<int, HeldLayer>& held);

}  // namespace oobleck::executor
