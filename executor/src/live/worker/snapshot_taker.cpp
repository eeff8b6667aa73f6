#include "snapshot_taker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "live/snapshots/snapshot_wire.h"
#include "state_copies.h"

namespace oobleck::executor {

void SnapshotTaker::start(SnapshotJob job, const std::map<int, HeldLayer>& held) {
  wait();
  sealed_ = false;
  thread_ = std::thread([this, job = std::move(job), &held] { run(job, held); });
}

double SnapshotTaker::wait() {
  if (!thread_.joinable()) return 0;
  const auto start = std::chrono::steady_clock::now();
  thread_.join();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void SnapshotTaker::run(const SnapshotJob& job, const std::map<int, HeldLayer>& held) {
  const SnapshotSeal& s = job.seal;
  const TensorShard shard{s.degree, s.shard};
  // The checkpoint's layers are written whatever becomes of the snapshot.
  std::unique_ptr<SnapshotClient> client;
  const auto drop_client = [&](const std::exception& e) {
    // Abandoned by a new generation, or the agent is going: this snapshot
    // stays incomplete and is never read.
    std::fprintf(stderr, "oobleck-run worker %s GPU %d: the snapshot of step %d is incomplete: %s\n",
                 s.owner.c_str(), s.gpu, s.step, e.what());
    client.reset();
  };
  try {
    if (job.to_memory && port_ > 0) client = std::make_unique<SnapshotClient>("127.0.0.1", port_, token_, "worker");
  } catch (const std::exception& e) {
    drop_client(e);
  }
  bool memory_complete = client != nullptr;
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    const bool to_disk =
        job.save && std::find(job.saved_layers.begin(), job.saved_layers.end(), l) != job.saved_layers.end();
    if (!client && !to_disk) continue;
    const std::string bytes = serialize_layer(held.at(l));
    if (to_disk) save_layer_file(*job.save, l, shard, bytes);
    if (!client) continue;
    try {
      client->put({s.owner, s.step, l, s.degree, s.shard}, bytes);
    } catch (const std::exception& e) {
      drop_client(e);
      memory_complete = false;
    }
  }
  if (job.save && job.on_saved) job.on_saved();
  if (!memory_complete) return;
  try {
    sealed_ = client->seal(s);
  } catch (const std::exception& e) {
    drop_client(e);
  }
}

}  // namespace oobleck::executor
