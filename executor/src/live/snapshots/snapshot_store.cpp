#include "snapshot_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "snapshot_wire.h"

namespace oobleck::executor {

// ---------------------------------------------------------------- memory

void SnapshotMemory::put(const Key& key, Blob blob) {
  const std::lock_guard lock(mutex_);
  blobs_[key] = std::move(blob);
}

bool SnapshotMemory::seal(const SnapshotSeal& s) {
  const std::lock_guard lock(mutex_);
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    if (!blobs_.count({s.owner, s.step, l, s.degree, s.shard})) return false;
  }
  auto& list = sealed_[{s.owner, s.gpu}];
  std::erase_if(list, [&](const SnapshotSeal& old) { return old.step >= s.step; });
  list.push_back(s);
  if (list.size() > 2) list.erase(list.begin());
  drop_old(s.owner);
  return true;
}

// Keeps the blobs of each GPU's sealed snapshots and of steps newer than
// every sealed one (snapshots in the making).
void SnapshotMemory::drop_old(const std::string& owner) {
  std::set<Key> kept;
  int newest = -1;
  for (const auto& [who, list] : sealed_) {
    if (std::get<0>(who) != owner) continue;
    for (const auto& s : list) {
      newest = std::max(newest, s.step);
      for (int l = s.layer_begin; l < s.layer_end; ++l) kept.insert({owner, s.step, l, s.degree, s.shard});
    }
  }
  std::erase_if(blobs_, [&](const auto& entry) {
    const Key& k = entry.first;
    return k.owner == owner && k.step <= newest && !kept.count(k);
  });
}

SnapshotMemory::Blob SnapshotMemory::get(const Key& key) const {
  const std::lock_guard lock(mutex_);
  const auto it = blobs_.find(key);
  return it == blobs_.end() ? nullptr : it->second;
}

std::vector<SnapshotMemory::Blob> SnapshotMemory::blobs_of(const SnapshotSeal& s) const {
  const std::lock_guard lock(mutex_);
  const auto list = sealed_.find({s.owner, s.gpu});
  if (list == sealed_.end() || std::find(list->second.begin(), list->second.end(), s) == list->second.end()) return {};
  std::vector<Blob> out;
  for (int l = s.layer_begin; l < s.layer_end; ++l) out.push_back(blobs_.at({s.owner, s.step, l, s.degree, s.shard}));
  return out;
}

std::vector<SnapshotSeal> SnapshotMemory::seals() const {
  const std::lock_guard lock(mutex_);
  std::vector<SnapshotSeal> out;
  for (const auto& [who, list] : sealed_) out.insert(out.end(), list.begin(), list.end());
  return out;
}

std::int64_t SnapshotMemory::bytes() const {
  const std::lock_guard lock(mutex_);
  std::int64_t total = 0;
  for (const auto& [key, blob] : blobs_) total += static_cast<std::int64_t>(blob->size());
  return total;
}

// ---------------------------------------------------------------- server

SnapshotServer::SnapshotServer(const std::string& bind_address, std::string token, OnSealed on_sealed)
    : token_(std::move(token)), on_sealed_(std::move(on_sealed)), listener_(bind_address, 0) {
  acceptor_ = std::thread([this] { accept_loop(); });
  forwarder_ = std::thread([this] { forward_loop(); });
}

SnapshotServer::~SnapshotServer() {
  stop_ = true;
  forward_wake_.notify_all();
  acceptor_.join();
  forwarder_.join();
  std::unique_lock lock(threads_mutex_);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  served_.wait(lock, [&] { return fds_.empty(); });
}

void SnapshotServer::accept_loop() {
  while (!stop_) {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::lock_guard lock(threads_mutex_);
    fds_.push_back(fd);
    std::thread([this, fd] { serve(fd); }).detach();
  }
}

void SnapshotServer::serve(int fd) {
  WireStream stream(fd);
  try {
    const auto hello = split_words(stream.read_line());
    if (hello.size() != 3 || hello[0] != "hello" || hello[1] != token_) throw std::runtime_error("not of this job");
    const bool from_worker = hello[2] == "worker", from_mirror = hello[2] == "mirror";
    for (;;) {
      const auto w = split_words(stream.read_line());
      const auto number = [&](std::size_t i) { return std::stoi(w.at(i)); };
      if (w.size() == 7 && w[0] == "put") {
        const auto bytes = std::stoull(w[6]);
        if (bytes > (1ull << 38)) throw std::runtime_error("a blob over 256 GiB");
        std::string blob(bytes, '\0');
        stream.read_exact(blob.data(), blob.size());
        memory_.put({w[1], number(2), number(3), number(4), number(5)},
                    std::make_shared<const std::string>(std::move(blob)));
      } else if (w.size() == 8 && w[0] == "seal" && (from_worker || from_mirror)) {
        const SnapshotSeal s{w[1], number(2), number(3), number(4), number(5), number(6), number(7)};
        const bool sealed = memory_.seal(s);
        stream.write_all(sealed ? "ok\n" : "missing\n");
        if (!sealed) continue;
        if (on_sealed_) on_sealed_(s, from_mirror);
        if (from_worker) {
          const std::lock_guard lock(forward_mutex_);
          local_.insert({s.owner, s.gpu});
          to_forward_.push_back(s);
          forward_wake_.notify_all();
        }
      } else if (w.size() == 6 && w[0] == "get") {
        const auto blob = memory_.get({w[1], number(2), number(3), number(4), number(5)});
        stream.write_all(blob ? std::to_string(blob->size()) + '\n' : std::string("none\n"));
        if (blob) stream.write_all(*blob);
      } else {
        throw std::runtime_error("a request it does not know");
      }
    }
  } catch (const std::exception&) {
    // The peer closed, or spoke out of turn: the connection ends.
  }
  const std::lock_guard lock(threads_mutex_);
  std::erase(fds_, fd);
  ::close(fd);
  served_.notify_all();
}

void SnapshotServer::mirror_to(const std::string& host, int port) {
  const std::lock_guard lock(forward_mutex_);
  if (host == mirror_host_ && port == mirror_port_) return;
  mirror_host_ = host;
  mirror_port_ = port;
  // The new mirror gets the newest snapshot of each worker of this node.
  std::map<std::tuple<std::string, int>, SnapshotSeal> newest;
  for (const auto& s : memory_.seals()) {
    auto [it, fresh] = newest.try_emplace({s.owner, s.gpu}, s);
    if (!fresh && s.step > it->second.step) it->second = s;
  }
  for (const auto& [who, s] : newest) {
    if (local_.count(who)) to_forward_.push_back(s);
  }
  forward_wake_.notify_all();
}

void SnapshotServer::forward_loop() {
  std::unique_ptr<SnapshotClient> client;
  std::string host;
  int port = 0;
  for (;;) {
    SnapshotSeal s;
    {
      std::unique_lock lock(forward_mutex_);
      forward_wake_.wait(lock, [&] { return stop_ || !to_forward_.empty(); });
      if (stop_) return;
      s = to_forward_.front();
      to_forward_.pop_front();
      if (host != mirror_host_ || port != mirror_port_) client.reset();
      host = mirror_host_;
      port = mirror_port_;
    }
    if (port == 0) continue;
    const auto blobs = memory_.blobs_of(s);
    if (blobs.empty()) continue;  // superseded meanwhile
    try {
      if (!client) client = std::make_unique<SnapshotClient>(host, port, token_, "mirror");
      for (int l = s.layer_begin; l < s.layer_end; ++l) {
        client->put({s.owner, s.step, l, s.degree, s.shard}, *blobs[static_cast<std::size_t>(l - s.layer_begin)]);
      }
      (void)client->seal(s);
    } catch (const std::exception&) {
      // The mirror is gone or going: this snapshot has none. The master
      // names a new mirror once it has seen the loss.
      client.reset();
    }
  }
}

}  // namespace oobleck::executor
