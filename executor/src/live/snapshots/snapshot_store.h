// Snapshots in host memory that a node's agent owns: the workers put their
// layers' state after a committed step here, in the background, so that
// it outlives them. A worker that crashes is restarted by its agent and
// reads its layers back from here; a rollback past f reads them from the
// agents that survive.
//
// A snapshot of one worker (owner node, GPU, step) is its layers
// [layer_begin, layer_end) as shard `shard` of `degree`, one blob per layer
// packed raw (pack_layer), and counts once its
// worker *sealed* it, after putting every layer: an incomplete one is never
// read. Each worker's newest kSnapshotsKept sealed snapshots are kept (a
// rollback may need an older one when a newer one is incomplete elsewhere);
// blobs of steps older than those go.
//
// Every sealed snapshot of this node's own workers is forwarded to one other
// node's agent, the mirror, which keeps it under the same owner: one node
// lost never takes a snapshot and its mirror together.
//
// A worker hands its snapshot over without a copy: it packs its layers into
// a slot of memory the agent lends it (snapshot_slots.h), and the agent
// adopts the slot. Mirrors and readers get the bytes over TCP.
//
// The server speaks a small protocol over TCP (snapshot_wire.h); the first
// line of every connection carries the job's token.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "protocol/channel.h"
#include "snapshot_slots.h"

namespace oobleck::executor {

// Sealed snapshots an agent keeps of each worker. The master's ledger names
// one fewer: it learns of each seal a moment after the agent made it, so it
// may be a seal behind, and must never name one the agent dropped.
inline constexpr std::size_t kSnapshotsKept = 3;

// One worker's snapshot, as its seal describes it.
struct SnapshotSeal {
  std::string owner;  // the node whose worker took it
  int gpu = 0, step = 0;
  int layer_begin = 0, layer_end = 0;
  int degree = 1, shard = 0;
  friend bool operator==(const SnapshotSeal&, const SnapshotSeal&) = default;
};

// The blobs and seals, thread-safe.
class SnapshotMemory {
 public:
  // One layer's bytes, kept alive by what owns them (a string, a slot).
  using Blob = SnapshotSlots::Blob;
  struct Key {
    std::string owner;
    int step = 0, layer = 0, degree = 1, shard = 0;
    auto operator<=>(const Key&) const = default;
  };

  void put(const Key& key, Blob blob);
  // False (and nothing sealed) when a layer of it is missing.
  bool seal(const SnapshotSeal& seal);
  [[nodiscard]] Blob get(const Key& key) const;
  // The blobs of a sealed snapshot, in layer order (empty: not sealed here).
  [[nodiscard]] std::vector<Blob> blobs_of(const SnapshotSeal& seal) const;
  [[nodiscard]] std::vector<SnapshotSeal> seals() const;

 private:
  void drop_old(const std::string& owner);

  mutable std::mutex mutex_;
  std::map<Key, Blob> blobs_;
  std::map<std::tuple<std::string, int>, std::vector<SnapshotSeal>> sealed_;  // (owner, GPU) -> newest last
};

class WireStream;

// The agent's server. `on_sealed` is called (from a server thread) for
// every snapshot sealed here, `mirrored` true for one forwarded by another
// node's agent.
class SnapshotServer {
 public:
  using OnSealed = std::function<void(const SnapshotSeal&, bool mirrored)>;
  SnapshotServer(const std::string& bind_address, std::string token, OnSealed on_sealed);
  ~SnapshotServer();
  SnapshotServer(const SnapshotServer&) = delete;
  SnapshotServer& operator=(const SnapshotServer&) = delete;

  [[nodiscard]] int port() const { return listener_.port(); }
  // Every snapshot sealed here and still kept (this node's and mirrors').
  [[nodiscard]] std::vector<SnapshotSeal> seals() const { return memory_.seals(); }
  // Where this node's sealed snapshots of steps s with (s + 1) % every == 0
  // are forwarded from now on (port 0: nowhere). The newest sealed snapshot
  // of each GPU goes there at once.
  void mirror_to(const std::string& host, int port, int every);

 private:
  void accept_loop();
  void serve(int fd);
  // The end of a seal or an adoption: the answer, the callback, the mirror.
  void finish_seal(const SnapshotSeal& s, bool from_mirror, WireStream& stream);
  void forward_loop();

  std::string token_;
  OnSealed on_sealed_;
  SnapshotSlots slots_;
  SnapshotMemory memory_;
  channel::Listener listener_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  // A detached thread serves each connection; the destructor waits for them.
  std::mutex threads_mutex_;
  std::condition_variable served_;
  std::vector<int> fds_;
  // Forwarding to the mirror.
  std::mutex forward_mutex_;
  std::condition_variable forward_wake_;
  std::deque<SnapshotSeal> to_forward_;
  std::string mirror_host_;
  int mirror_port_ = 0;
  int mirror_every_ = 1;
  std::set<std::tuple<std::string, int>> local_;  // (owner, GPU) of this node's workers
  std::thread forwarder_;
};

}  // namespace oobleck::executor
