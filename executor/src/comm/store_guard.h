// The rendezvous store behind the job's token. libtorch's TCPStore checks
// no one: whoever reaches its port may read and write every key, and grow
// the master's memory without limit. So across hosts the store listens on
// the master's loopback alone, and other hosts reach it through two relays:
//
//   worker's TCPStore client -> StoreTunnel (127.0.0.1, in the worker)
//     -> network -> StoreGuard (the master's address) -> the store (loopback)
//
// The tunnel opens each connection with the line "oobleck-store TOKEN"; the
// guard relays a connection only after that line, and drops one that has
// not sent it within kHelloDeadlineMs or within kLongestHelloBytes. At most
// kMostStrangers connections wait for their line (the oldest go first), and
// a relay reads no more from a side while kRelayBufferBytes wait to be
// written to the other: an outsider costs the master bounded memory.
//
// Both run one thread each, polling every connection. On a machine of its
// own a worker still reaches the store through a tunnel (with no token line:
// there is no guard), because the tunnel outlives the master: when the
// store's side of a connection breaks or ends (the master died), the
// tunnel keeps the client's side open and silent, and reads and drops what
// the client sends, until the client closes it. libtorch's TCPStore client
// would end the process on a reset (its callback thread throws) and spin
// on an orderly close; silent, it waits, as the worker does, for a
// restarted master's generation.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace oobleck::executor {

class ByteRelay;

class StoreGuard {
 public:
  // Listens on `address` (any free port) for the job's tunnels to the store
  // at 127.0.0.1:`store_port`.
  StoreGuard(const std::string& address, int store_port, std::string token);
  ~StoreGuard();
  StoreGuard(const StoreGuard&) = delete;
  StoreGuard& operator=(const StoreGuard&) = delete;
  [[nodiscard]] int port() const;

  static constexpr double kHelloDeadlineMs = 10000;
  static constexpr std::size_t kLongestHelloBytes = 256;
  static constexpr std::size_t kMostStrangers = 256;

 private:
  std::unique_ptr<ByteRelay> relay_;
};

class StoreTunnel {
 public:
  // Listens on 127.0.0.1 (any free port); each connection goes on to the
  // guard at `guard_address`:`guard_port` with the job's token, or, with
  // no token, straight to a store there.
  StoreTunnel(const std::string& guard_address, int guard_port, std::string token);
  ~StoreTunnel();
  StoreTunnel(const StoreTunnel&) = delete;
  StoreTunnel& operator=(const StoreTunnel&) = delete;
  [[nodiscard]] int port() const;
  // Connections from now on go to another port there (a restarted
  // master's); those in hand stay as they are.
  void retarget(int port);

 private:
  std::unique_ptr<ByteRelay> relay_;
};

inline constexpr std::size_t kRelayBufferBytes = 1 << 20;

}  // namespace oobleck::executor
