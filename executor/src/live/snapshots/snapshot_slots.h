// The memory a node's agent lends its workers for snapshots: files in
// memory (memfd) that the agent makes and keeps, so that what a worker
// wrote outlives it. A worker claims a slot, maps the agent's file through
// /proc, packs its layers into it and hands it back (adopt); the agent then
// serves the layers from its own mapping of the file, without copying.
//
// A slot is reused, since fresh pages cost far more than the copy into
// them: a worker's slot is free again once no sealed snapshot, reader or
// forward holds its bytes (its lease has expired) and the worker does not
// write in it. A worker writes one snapshot at a time, so a new claim by
// the same worker ends its previous one. In steady state each worker has
// three slots: the two sealed snapshots the agent keeps, and the next.
// Snapshots mirrored here from another node's agent take slots the same way,
// under their owner's name, and are received straight into them.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace oobleck::executor {

class SnapshotSlots {
 public:
  using Blob = std::shared_ptr<const std::string_view>;
  struct Claimed {
    int id = 0;
    int fd = 0;  // the agent's: the worker opens /proc/<agent>/fd/<fd>
    std::size_t bytes = 0;
    char* address = nullptr;  // the agent's own mapping, to write a mirrored snapshot into
  };

  SnapshotSlots() = default;
  ~SnapshotSlots();
  SnapshotSlots(const SnapshotSlots&) = delete;
  SnapshotSlots& operator=(const SnapshotSlots&) = delete;

  // A slot of at least `bytes` for the worker (owner, GPU) to write in.
  // Throws std::runtime_error when no memory file can be made.
  Claimed claim(const std::string& owner, int gpu, std::size_t bytes);
  // The claimed slot `id`, written: one blob per layer of `sizes`, in order.
  // Throws std::runtime_error when `id` is not that worker's claimed slot.
  std::vector<Blob> adopt(const std::string& owner, int gpu, int id, const std::vector<std::size_t>& sizes);

 private:
  struct Mapping;  // one memory file, mapped
  struct Lease;    // the blobs of one adopted snapshot
  struct Slot {
    int id = 0;
    std::shared_ptr<Mapping> mapping;
    std::weak_ptr<Lease> lease;
    bool claimed = false;
  };
  using Worker = std::tuple<std::string, int>;

  mutable std::mutex mutex_;
  std::map<Worker, std::vector<Slot>> slots_;
  int next_id_ = 1;
};

}  // namespace oobleck::executor
