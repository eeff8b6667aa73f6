// The control channel as a worker's training thread sees it. A reader
// thread keeps the newest generation and the commits, and abandons every
// socket of this process (but its own) as soon as a generation newer than
// the one in hand arrives, so that no communication waits on a peer that is
// gone. It then offers that generation to the worker, which may start its
// communicators at once, while the training thread still unwinds; from
// then on the abandon is not repeated, as it would cut them. When the master goes, the reader reconnects to a restarted one (at
// the same address and port) and says hello again with the generation in
// hand, while the training thread keeps its state and waits; a master that
// answers Kill, or none within the wait, ends the process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "protocol/channel.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

// The master has started a newer generation: the work in hand is abandoned.
struct Superseded final : std::runtime_error {
  Superseded() : std::runtime_error("a newer generation started") {}
};

// Who this worker is, for its hellos, and where its master is.
struct InboxIdentity {
  std::string node, token, master_addr;
  int gpu = 0, control_port = 0;
  double master_wait_ms = 300000;
};

class Inbox {
 public:
  // Connects, and says hello.
  explicit Inbox(InboxIdentity identity);
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  bool send(const protocol::Message& message);

  // The job's configuration, read before the reader thread starts.
  protocol::Welcome welcome();
  // The rendezvous store's port, as the newest welcome says (a restarted
  // master serves a store of its own).
  [[nodiscard]] int store_port() const { return store_port_; }
  // Called on the reader thread, under the inbox's lock, once for each
  // generation newer than the one in hand, just after the abandon: true
  // when it started that generation's communicators. It must be quick, and
  // must not call the inbox. Set before start().
  using EarlyStart = std::function<bool(const protocol::NewGeneration&)>;
  void on_newer_generation(EarlyStart early_start);
  void start();

  // The generation in hand: from now on only newer ones abandon sockets.
  // True when on_newer_generation started its communicators.
  bool begin(int generation);
  // When the newest generation arrived (CLOCK_MONOTONIC, ms).
  [[nodiscard]] double arrived_ms() const;
  // Communicators of `generation`, aborted when a newer one comes.
  void watch(int generation, Communicator* communicator);
  void unwatch(int generation);
  [[nodiscard]] bool superseded() const;
  void throw_if_superseded() const;
  // The training thread failed on its own: abandon its sockets, so that its
  // peers fail at once too, instead of waiting for it (unless a newer
  // generation has come, whose abandon is done).
  void abandon();
  // Every socket but the channel's, whatever the generation (the worker leaves).
  void abandon_all();

  // The newest generation after `generation`, waiting for one.
  protocol::NewGeneration next_generation(int generation);
  // The master's commit of `step`, or Superseded. A commit that came is
  // taken even when a newer generation came after it: the step is applied
  // (and saved, when asked) before that generation is entered.
  protocol::Commit wait_commit(int generation, int step);
  // A worker with nothing to train waits for a newer generation or the end.
  bool wait_generation_or_finish(int generation);

 private:
  void read_loop();
  void handle(protocol::Message message);
  [[nodiscard]] protocol::Hello hello() const;
  // The master went away: reconnect to a restarted one, or end the process.
  void reconnect();

  InboxIdentity identity_;
  std::unique_ptr<channel::Connection> connection_;  // replaced (under send_mutex_) by reconnect()
  std::atomic<int> control_fd_{-1};                  // what abandon_sockets keeps
  std::atomic<int> store_port_{0};
  std::mutex send_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  protocol::NewGeneration newest_;
  int newest_number_ = 0;
  double arrived_ms_ = 0;
  int in_hand_ = 0;
  EarlyStart early_start_;
  int offered_ = 0;             // the newest generation offered to early_start_
  bool started_early_ = false;  // whether it started
  std::map<std::pair<int, int>, protocol::Commit> commits_;  // (generation, step)
  std::vector<std::pair<int, Communicator*>> watched_;
  bool finished_ = false;
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace oobleck::executor
