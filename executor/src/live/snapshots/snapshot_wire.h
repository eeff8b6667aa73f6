// The snapshot servers' protocol: a request is a line of words, some
// followed by a payload of bytes; all blocking I/O on one socket.
//
//   hello TOKEN ROLE                              (first, always; ROLE worker,
//                                                  mirror or reader)
//   put OWNER STEP LAYER DEGREE SHARD BYTES       + BYTES of payload
//   seal OWNER GPU STEP BEGIN END DEGREE SHARD    -> "ok" | "missing"
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
  [[nodiscard]] std::optional<std::string> get(const SnapshotMemory::Key& key);

 private:
  std::unique_ptr<channel::Connection> connection_;
  WireStream stream_;
};

// The words of a request line.
[[nodiscard]] std::vector<std::string> split_words(std::string_view line);

}  // namespace oobleck::executor
