// The control channel of a live run: lines of text over TCP between the
// master and its agents and workers, each line one message of the protocol
// (protocol.h). It carries the job's configuration, heartbeats, generations
// (plans), commits and failure notices; never training data.
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oobleck::executor::channel {

// One end of a connection. Lines are written whole; reads collect bytes
// until a newline completes a line.
class Connection {
 public:
  explicit Connection(int fd);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  [[nodiscard]] int fd() const { return fd_; }
  // False when the peer is gone (the line is dropped). `line` has no newline.
  bool send(std::string_view line);
  // Reads what the socket has without blocking, at most kReadBudget bytes
  // (one sender cannot hold up a reader of many), and appends every
  // complete line to `out`. False once the peer has closed the connection,
  // or sent more than longest_line() bytes without a newline.
  bool receive(std::vector<std::string>& out);
  static constexpr std::size_t kReadBudget = std::size_t{1} << 20;
  static constexpr std::size_t kLongestLine = std::size_t{1} << 28;  // unless set lower
  void set_longest_line(std::size_t bytes) { longest_line_ = bytes; }
  [[nodiscard]] std::size_t longest_line() const { return longest_line_; }
  // Waits up to `timeout` for readable data, then receive().
  bool receive(std::vector<std::string>& out, std::chrono::milliseconds timeout);
  // Closes the socket now; send() and receive() report a closed peer after.
  void close();

 private:
  int fd_;
  std::string pending_;
  std::size_t longest_line_ = kLongestLine;
};

// A listening socket on `address` (port 0: any free port).
class Listener {
 public:
  Listener(const std::string& address, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] int port() const { return port_; }
  // A connection waiting to be accepted, or null.
  [[nodiscard]] std::unique_ptr<Connection> accept();

 private:
  int fd_;
  int port_;
};

// Connects, retrying until `timeout` while the master is not yet listening.
[[nodiscard]] std::unique_ptr<Connection> connect_to(const std::string& address, int port,
                                                     std::chrono::milliseconds timeout);
// One attempt, waiting at most `wait` for the handshake (an unreachable
// host must not hold up the caller for TCP's own minutes); null when it
// fails.
[[nodiscard]] std::unique_ptr<Connection> try_connect(const std::string& address, int port,
                                                      std::chrono::milliseconds wait);

// Shuts down every socket of this process but those in `keep`: every
// communication in flight (Gloo pairs, listening or connected, and store
// clients) fails at once, here and at the peers, instead of waiting for a
// peer that is gone. With `keep_listening`, listening sockets stay as they
// are. The descriptors stay open for their owners to close.
int abandon_sockets(const std::vector<int>& keep, bool keep_listening);

// A socket abandon_sockets leaves alone for as long as this lives: one that
// carries no communication of a generation (a worker's snapshots to its
// agent), which a new generation must not cut halfway.
class SparedSocket {
 public:
  explicit SparedSocket(int fd);
  ~SparedSocket();
  SparedSocket(const SparedSocket&) = delete;
  SparedSocket& operator=(const SparedSocket&) = delete;

 private:
  int fd_;
};

}  // namespace oobleck::executor::channel
