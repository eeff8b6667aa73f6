#include "inbox.h"

#include <torch/version.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "oobleck/common.h"

namespace oobleck::executor {
namespace {

// A pair of libtorch 1.x's Gloo waiting for its peer listens on a socket of
// its own, which an abandon must shut down to wake it; 2.x's Gloo has one
// listener per device and ends the process when that listener fails.
constexpr bool kKeepGlooListeners = TORCH_VERSION_MAJOR >= 2;

}  // namespace

Inbox::Inbox(InboxIdentity identity)
    : identity_(std::move(identity)),
      connection_(channel::connect_to(identity_.master_addr, identity_.control_port, std::chrono::seconds(60))),
      control_fd_(connection_->fd()) {
  send(hello());
}

protocol::Hello Inbox::hello() const {
  protocol::Hello h;
  h.role = protocol::Role::worker;
  h.node = identity_.node;
  h.token = identity_.token;
  h.pid = ::getpid();
  h.gpu = identity_.gpu;
  h.generation = in_hand_;
  return h;
}

Inbox::~Inbox() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
}

bool Inbox::send(const protocol::Message& message) {
  const std::lock_guard lock(send_mutex_);  // the training thread and the snapshot taker
  return protocol::send(*connection_, message);
}

protocol::Welcome Inbox::welcome() {
  for (;;) {
    std::vector<protocol::Message> messages;
    if (!protocol::receive(*connection_, messages, std::chrono::milliseconds(1000))) {
      throw std::runtime_error("the master closed the control channel before sending the configuration");
    }
    std::optional<protocol::Welcome> welcome;
    std::lock_guard lock(mutex_);
    for (auto& m : messages) {
      if (auto* w = std::get_if<protocol::Welcome>(&m)) {
        store_port_ = w->store_port;
        welcome = std::move(*w);
      } else {
        handle(std::move(m));  // what came with it (a generation) is kept
      }
    }
    if (welcome) return *welcome;
  }
}

void Inbox::start() {
  reader_ = std::thread([this] { read_loop(); });
}

bool Inbox::begin(int generation) {
  std::lock_guard lock(mutex_);
  in_hand_ = generation;
  std::erase_if(commits_, [&](const auto& c) { return c.first.first < generation; });
  return offered_ == generation && started_early_;
}

double Inbox::arrived_ms() const {
  std::lock_guard lock(mutex_);
  return arrived_ms_;
}

void Inbox::watch(int generation, Communicator* communicator) {
  std::lock_guard lock(mutex_);
  watched_.emplace_back(generation, communicator);
  if (newest_number_ > generation) communicator->abort();
}

void Inbox::unwatch(int generation) {
  std::lock_guard lock(mutex_);
  std::erase_if(watched_, [&](const auto& w) { return w.first == generation; });
}

bool Inbox::superseded() const {
  std::lock_guard lock(mutex_);
  return newest_number_ > in_hand_;
}

void Inbox::throw_if_superseded() const {
  if (superseded()) throw Superseded();
}

void Inbox::on_newer_generation(EarlyStart early_start) {
  std::lock_guard lock(mutex_);
  early_start_ = std::move(early_start);
}

void Inbox::abandon_all() {
  std::lock_guard lock(mutex_);
  channel::abandon_sockets({control_fd_}, kKeepGlooListeners);
}

void Inbox::abandon() {
  std::lock_guard lock(mutex_);
  if (newest_number_ > in_hand_) return;
  channel::abandon_sockets({control_fd_}, kKeepGlooListeners);
}

protocol::NewGeneration Inbox::next_generation(int generation) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return newest_number_ > generation; });
  return newest_;
}

protocol::Commit Inbox::wait_commit(int generation, int step) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return newest_number_ > in_hand_ || commits_.count({generation, step}); });
  const auto it = commits_.find({generation, step});
  if (it == commits_.end()) throw Superseded();
  protocol::Commit out = std::move(it->second);
  commits_.erase(it);
  return out;
}

bool Inbox::wait_generation_or_finish(int generation) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return newest_number_ > generation || finished_; });
  return finished_ && newest_number_ <= generation;
}

void Inbox::read_loop() {
  while (!stop_) {
    std::vector<protocol::Message> messages;
    std::vector<std::string> malformed;
    const bool open = protocol::receive(*connection_, messages, std::chrono::milliseconds(100), &malformed);
    // A malformed message is a bug at the master, not a reason to die.
    for (const auto& what : malformed) {
      std::fprintf(stderr, "oobleck-run worker: ignoring a malformed control message (%s)\n", what.c_str());
    }
    {
      std::lock_guard lock(mutex_);
      for (auto& m : messages) handle(std::move(m));
      if (newest_number_ > in_hand_) {
        for (const auto& [generation, c] : watched_) {
          if (generation < newest_number_) c->abort();
        }
        // Until its communicators start, again at every look: sockets that
        // older work opened since are cut too.
        if (offered_ < newest_number_ || !started_early_) {
          channel::abandon_sockets({control_fd_}, kKeepGlooListeners);
        }
        if (offered_ < newest_number_) {
          offered_ = newest_number_;
          started_early_ = early_start_ && early_start_(newest_);
        }
      }
    }
    if (!open) {
      if (finishing_) return;
      reconnect();
    }
  }
}

void Inbox::reconnect() {
  const auto gone = std::chrono::steady_clock::now();
  for (;;) {
    auto connection =
        channel::try_connect(identity_.master_addr, identity_.control_port, std::chrono::milliseconds(200));
    if (connection) {
      const std::lock_guard lock(send_mutex_);
      protocol::Hello again;
      {
        std::lock_guard state(mutex_);
        again = hello();
      }
      if (protocol::send(*connection, again)) {
        control_fd_ = connection->fd();
        connection_ = std::move(connection);
        return;
      }
    }
    if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - gone).count() >
        identity_.master_wait_ms) {
      std::fprintf(stderr, "oobleck-run worker %s: no master came back within %.0f s; exiting\n",
                   identity_.node.c_str(), identity_.master_wait_ms / 1000);
      std::_Exit(kExitFailure);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Inbox::handle(protocol::Message message) {
  if (auto* g = std::get_if<protocol::NewGeneration>(&message)) {
    if (g->generation > newest_number_) {
      newest_number_ = g->generation;
      arrived_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
      newest_ = std::move(*g);
    }
  } else if (auto* c = std::get_if<protocol::Commit>(&message)) {
    if (c->finish) finishing_ = true;
    const std::pair<int, int> key{c->generation, c->step};
    commits_[key] = std::move(*c);
  } else if (std::holds_alternative<protocol::Finish>(message)) {
    finishing_ = true;
    finished_ = true;
  } else if (const auto* w = std::get_if<protocol::Welcome>(&message)) {
    store_port_ = w->store_port;  // a restarted master's store
  } else if (std::holds_alternative<protocol::Kill>(message)) {
    // The master does not have this worker (it was fenced): nothing it
    // holds may touch the job.
    std::fprintf(stderr, "oobleck-run worker %s: the master refused this worker; exiting\n", identity_.node.c_str());
    std::_Exit(kExitFailure);
  }
  changed_.notify_all();
}

}  // namespace oobleck::executor
