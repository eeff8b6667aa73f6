// The control channel as a worker's training thread sees it. A reader
// thread keeps the newest generation and the commits, and abandons every
// socket of this process (but its own) as soon as a generation newer than
// the one in hand arrives, so that no communication waits on a peer that is
// gone.
#pragma once

#include <atomic>
#include <condition_variable>
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

class Inbox {
 public:
  explicit Inbox(std::unique_ptr<channel::Connection> connection) : connection_(std::move(connection)) {}
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  bool send(const protocol::Message& message);

  // The job's configuration, read before the reader thread starts.
  protocol::Welcome welcome();
  void start();

  // The generation in hand: from now on only newer ones abandon sockets.
  void begin(int generation);
  // Communicators of the generation in hand, aborted when a newer one comes.
  void watch(Communicator* communicator);
  void unwatch_all();
  [[nodiscard]] bool superseded() const;
  void throw_if_superseded() const;
  // The training thread failed on its own: abandon its sockets, so that its
  // peers fail at once too, instead of waiting for it.
  void abandon();

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

  std::unique_ptr<channel::Connection> connection_;
  std::mutex send_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  protocol::NewGeneration newest_;
  int newest_number_ = 0;
  int in_hand_ = 0;
  std::map<std::pair<int, int>, protocol::Commit> commits_;  // (generation, step)
  std::vector<Communicator*> watched_;
  bool finished_ = false;
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace oobleck::executor
