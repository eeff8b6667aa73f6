// A worker's snapshots, taken in the background: after a committed step the
// training thread hands its layers over and goes on with the next step,
// while this thread packs them into a slot of the agent's memory
// (snapshot_slots.h), and, when the commit asks for a checkpoint, writes
// the layers this worker saves in the durable format. The
// next optimizer step waits for it (wait()), since it changes the state in
// place; forward and backward passes only read it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_snapshot_copies.h"
#include "live/snapshots/snapshot_wire.h"
#include "model/layer_state.h"

namespace oobleck::executor {

struct SnapshotJob {
  SnapshotSeal seal;                 // what it snapshots (layers, shard, step)
  bool to_memory = true;             // into the agent's memory
  std::optional<std::string> save;   // and into this checkpoint folder
  std::vector<int> saved_layers;     // the layers of it this worker writes there
  std::function<void()> on_saved;    // once the checkpoint's layers are on disk
};

class SnapshotTaker {
 public:
  SnapshotTaker(std::string token, int port);
  ~SnapshotTaker();
  SnapshotTaker(const SnapshotTaker&) = delete;
  SnapshotTaker& operator=(const SnapshotTaker&) = delete;

  // Starts the job on `held` (which must stay unchanged until wait()).
  void start(SnapshotJob job, const std::map<int, HeldLayer>& held);
  // Waits for the job in hand; returns how long it waited (ms).
  double wait();
  // Whether the last job's snapshot was sealed in the agent's memory.
  [[nodiscard]] bool sealed() const { return sealed_; }

 private:
  void run(const SnapshotJob& job, const std::map<int, HeldLayer>& held);
  // True when the agent sealed it.
  bool to_memory(const SnapshotSeal& seal, const std::map<int, HeldLayer>& held);

  std::string token_;
  int port_;
  struct MappedSlot;
  std::unique_ptr<SnapshotClient> client_;  // to this node's agent, kept between snapshots
  std::map<int, std::unique_ptr<MappedSlot>> mapped_;  // the agent's slots this worker mapped, by id
  bool use_slots_ = true;  // false: the agent lends no memory, the bytes go over the connection
  GpuSnapshotCopies gpu_copies_;  // on a GPU: copies on a stream of their own into page-locked slots
  bool from_gpu_ = false;         // the job in hand's layers live on a GPU
  bool warned_unlocked_ = false;
  std::thread thread_;
  bool sealed_ = false;
};

}  // namespace oobleck::executor
