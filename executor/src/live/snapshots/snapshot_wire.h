// The snapshot servers' protocol: a request is a line of words, some
// followed by a payload of bytes; all blocking I/O on one socket.
//
//   hello TOKEN ROLE                              (first, always; ROLE worker,
//                                                  mirror or reader)
//   put OWNER STEP LAYER DEGREE SHARD BYTES       + BYTES of payload
//   seal OWNER GPU STEP BEGIN END DEGREE SHARD    -> "ok" | "missing"
//   claim OWNER GPU BYTES                         -> "slot ID PID FD BYTES" | "unavailable"
//       (a worker's slot of memory: the agent's file /proc/PID/fd/FD)
//   adopt ID OWNER GPU STEP BEGIN END DEGREE SHARD SIZE...
//                                                 -> "ok" | "missing"
//       (slot ID holds the layers, SIZE bytes each, one after another;
//        adopting seals them)
//   mirror OWNER GPU STEP BEGIN END DEGREE SHARD SIZE...
//                                 + the layers' bytes -> "ok" | "missing"
//       (a sealed snapshot of another node's worker, whole)
//   get OWNER STEP LAYER DEGREE SHARD             -> "BYTES" + payload | "none"
//
// Node names are words (no spaces), as plans and hostfiles have them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot_store.h"

namespace oobleck::executor {

// A socket read by lines and by counted bytes. Errors and a closed peer
// throw std::runtime_error.
class WireStream {
 public:
  explicit WireStream(int fd) : fd_(fd) {}
  [[nodiscard]] std::string read_line();
  void read_exact(char* out, std::size_t bytes);
  void write_all(std::string_view bytes);

 private:
  int fd_;
  std::string buffer_;
  std::size_t at_ = 0;
};

// A connection to one snapshot server.
class SnapshotClient {
 public:
  // `role`: worker (this node's, whose seals are mirrored), mirror or reader.
  SnapshotClient(const std::string& host, int port, const std::string& token, const std::string& role);
  void put(const SnapshotMemory::Key& key, std::string_view bytes);
  [[nodiscard]] bool seal(const SnapshotSeal& seal);
  struct Slot {
    int id = 0;
    std::string path;  // the agent's memory file, to map
    std::size_t bytes = 0;
  };
  // Nothing when the agent has no memory to lend.
  [[nodiscard]] std::optional<Slot> claim(const std::string& owner, int gpu, std::size_t bytes);
  [[nodiscard]] bool adopt(int slot, const SnapshotSeal& seal, const std::vector<std::size_t>& sizes);
  // A sealed snapshot, whole, to the mirror: its layers' blobs in order.
  [[nodiscard]] bool mirror(const SnapshotSeal& seal, const std::vector<SnapshotMemory::Blob>& layers);
  [[nodiscard]] std::optional<std::string> get(const SnapshotMemory::Key& key);

 private:
  std::unique_ptr<channel::Connection> connection_;
  std::optional<channel::SparedSocket> spared_;  // a worker's: not cut by a new generation
  WireStream stream_;
};

// A worker's snapshot copies take CPU time that training leaves over: the
// calling thread gets the lowest priority (nice 19). Not SCHED_IDLE: an
// idle-class thread may wait seconds for a core on a busy node, and a
// killed process ends only once every thread has run. Where cores are
// spare, as beside GPUs, it runs at once.
void run_this_thread_when_idle();

// The words of a request line.
[[nodiscard]] std::vector<std::string> split_words(std::string_view line);

}  // namespace oobleck::executor
