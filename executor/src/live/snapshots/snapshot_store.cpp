#include "snapshot_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "snapshot_wire.h"

namespace oobleck::executor {

namespace {

// Bytes received over a connection.
SnapshotMemory::Blob owned_blob(std::string bytes) {
  struct Owned {
    std::string bytes;
    std::string_view view;
  };
  auto owned = std::make_shared<Owned>();
  owned->bytes = std::move(bytes);
  owned->view = owned->bytes;
  return {owned, &owned->view};
}

}  // namespace

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
  if (list.size() > kSnapshotsKept) list.erase(list.begin());
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
        memory_.put({w[1], number(2), number(3), number(4), number(5)}, owned_blob(std::move(blob)));
      } else if (w.size() == 8 && w[0] == "seal" && (from_worker || from_mirror)) {
        finish_seal({w[1], number(2), number(3), number(4), number(5), number(6), number(7)}, from_mirror, stream);
      } else if (w.size() == 4 && w[0] == "claim" && from_worker) {
        try {
          const auto slot = slots_.claim(w[1], number(2), std::stoull(w[3]));
          stream.write_all("slot " + std::to_string(slot.id) + ' ' + std::to_string(::getpid()) + ' ' +
                           std::to_string(slot.fd) + ' ' + std::to_string(slot.bytes) + '\n');
        } catch (const std::runtime_error&) {
          stream.write_all("unavailable\n");  // the worker puts its bytes instead
        }
      } else if (w.size() >= 9 && w[0] == "adopt" && from_worker) {
        const SnapshotSeal s{w[2], number(3), number(4), number(5), number(6), number(7), number(8)};
        std::vector<std::size_t> sizes;
        for (std::size_t i = 9; i < w.size(); ++i) sizes.push_back(std::stoull(w[i]));
        if (static_cast<int>(sizes.size()) != s.layer_end - s.layer_begin) throw std::runtime_error("sizes");
        std::vector<SnapshotMemory::Blob> blobs;
        try {
          blobs = slots_.adopt(s.owner, s.gpu, number(1), sizes);
        } catch (const std::runtime_error&) {
          stream.write_all("missing\n");  // claimed again since, by a restarted worker
          continue;
        }
        for (int l = s.layer_begin; l < s.layer_end; ++l) {
          memory_.put({s.owner, s.step, l, s.degree, s.shard}, blobs[static_cast<std::size_t>(l - s.layer_begin)]);
        }
        finish_seal(s, false, stream);
      } else if (w.size() >= 8 && w[0] == "mirror" && from_mirror) {
        const SnapshotSeal s{w[1], number(2), number(3), number(4), number(5), number(6), number(7)};
        std::vector<std::size_t> sizes;
        std::size_t total = 0;
        for (std::size_t i = 8; i < w.size(); ++i) total += sizes.emplace_back(std::stoull(w[i]));
        if (static_cast<int>(sizes.size()) != s.layer_end - s.layer_begin) throw std::runtime_error("sizes");
        const auto slot = slots_.claim(s.owner, s.gpu, total);
        stream.read_exact(slot.address, total);
        const auto blobs = slots_.adopt(s.owner, s.gpu, slot.id, sizes);
        for (int l = s.layer_begin; l < s.layer_end; ++l) {
          memory_.put({s.owner, s.step, l, s.degree, s.shard}, blobs[static_cast<std::size_t>(l - s.layer_begin)]);
        }
        finish_seal(s, true, stream);
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

void SnapshotServer::finish_seal(const SnapshotSeal& s, bool from_mirror, WireStream& stream) {
  const bool sealed = memory_.seal(s);
  stream.write_all(sealed ? "ok\n" : "missing\n");
  if (!sealed) return;
  if (on_sealed_) on_sealed_(s, from_mirror);
  if (from_mirror) return;
  const std::lock_guard lock(forward_mutex_);
  local_.insert({s.owner, s.gpu});
  if ((s.step + 1) % mirror_every_ != 0) return;
  to_forward_.push_back(s);
  forward_wake_.notify_all();
}

void SnapshotServer::mirror_to(const std::string& host, int port, int every) {
  const std::lock_guard lock(forward_mutex_);
  mirror_every_ = std::max(1, every);
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

// (The agent's threads keep their priority: a killed process closes its
// sockets only once every thread has run to its end, and the agent's
// connection closing is how its node's loss is seen at once.)
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
      (void)client->mirror(s, blobs);
    } catch (const std::exception&) {
      // The mirror is gone or going: this snapshot has none. The master
      // names a new mirror once it has seen the loss.
      client.reset();
    }
  }
}

}  // namespace oobleck::executor
