#include "store_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "protocol/channel.h"

namespace oobleck::executor {
namespace {

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A TCP connection to `where` (made non-blocking once connected), or -1.
// The connect waits at most kConnectTimeout: a tunnel's relay thread does
// not stall its other connections for the kernel's two minutes when the
// master is cut off.
constexpr timeval kConnectTimeout = {5, 0};
int connect_tcp(const sockaddr_in& where) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &kConnectTimeout, sizeof kConnectTimeout);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&where), sizeof where) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
  return fd;
}

// host:port resolved once, when the relay is made.
sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    throw std::runtime_error("store relay: cannot resolve " + host);
  }
  sockaddr_in where{};
  std::memcpy(&where, found->ai_addr, sizeof where);
  ::freeaddrinfo(found);
  return where;
}

}  // namespace

// One thread relaying bytes between accepted connections and the upstream
// each is joined to. As a guard, a connection is joined to the upstream
// once it has said the hello line; as a tunnel, at once, the hello line
// going first.
class ByteRelay {
 public:
  struct Settings {
    std::string listen_address;
    std::string upstream_host;
    int upstream_port = 0;
    std::string hello;  // "oobleck-store TOKEN\n" (empty: none)
    bool guard = false;
  };

  explicit ByteRelay(Settings settings)
      : s_(std::move(settings)), upstream_(resolve(s_.upstream_host, s_.upstream_port)), listener_(s_.listen_address, 0) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("store relay: no pipe");
    spared_.emplace(listener_.fd());  // a worker's abandoned communication leaves it listening
    thread_ = std::thread([this] { loop(); });
  }
  ~ByteRelay() {
    stop_ = true;
    (void)!::write(wake_[1], "x", 1);
    thread_.join();
    for (auto& link : links_) close_link(link);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  ByteRelay(const ByteRelay&) = delete;
  ByteRelay& operator=(const ByteRelay&) = delete;
  [[nodiscard]] int port() const { return listener_.port(); }
  void retarget(int port) {
    const std::lock_guard lock(upstream_mutex_);
    upstream_.sin_port = htons(static_cast<std::uint16_t>(port));
  }

 private:
  struct Side {
    int fd = -1;
    std::string pending;  // to be written to this side
    bool ended = false;   // it sent its last byte (read returned 0)
    bool shut = false;    // everything for it was written, then its write half shut
  };
  struct Link {
    Side client, upstream;  // upstream.fd < 0: a guard's stranger, not yet joined; or orphaned
    std::string hello;      // what a stranger said so far
    double since_ms = 0;
    bool closed = false;
    bool orphaned = false;  // a tunnel's whose store side is gone: the client's is held silent
  };

  // A tunnel's link whose store side broke or ended: the client's side stays
  // open (what the store sent before still reaches it), and what the client
  // says is dropped, until it closes.
  static void orphan(Link& link) {
    if (link.upstream.fd >= 0) ::close(link.upstream.fd);
    link.upstream = Side();
    link.orphaned = true;
  }

  static void close_link(Link& link) {
    for (Side* side : {&link.client, &link.upstream}) {
      if (side->fd >= 0) ::close(side->fd);
      side->fd = -1;
    }
    link.closed = true;
  }

  void accept_all() {
    while (auto connection = listener_.accept()) {
      // The Connection closes its own; this copy must not leak into a
      // process another thread spawns meanwhile.
      const int fd = ::fcntl(connection->fd(), F_DUPFD_CLOEXEC, 0);
      if (fd < 0) continue;
      set_nonblocking(fd);
      Link link;
      link.client.fd = fd;
      link.since_ms = steady_ms();
      if (s_.guard) {
        const auto strangers = std::count_if(links_.begin(), links_.end(), [](const Link& l) {
          return !l.closed && l.upstream.fd < 0;
        });
        if (static_cast<std::size_t>(strangers) >= StoreGuard::kMostStrangers) {
          auto oldest = std::find_if(links_.begin(), links_.end(), [](const Link& l) {
            return !l.closed && l.upstream.fd < 0;
          });
          // What it said may be the hello, waiting unread behind the flood.
          if (!read_side(*oldest, oldest->client, oldest->upstream)) close_link(*oldest);
          if (!oldest->closed && oldest->upstream.fd < 0) close_link(*oldest);
        }
      } else {
        sockaddr_in upstream{};
        {
          const std::lock_guard lock(upstream_mutex_);
          upstream = upstream_;
        }
        link.upstream.fd = connect_tcp(upstream);
        if (link.upstream.fd < 0) {
          orphan(link);  // the store is gone (its master died): the client waits
        } else {
          link.upstream.pending = s_.hello;
        }
      }
      links_.push_back(std::move(link));
    }
  }

  // A stranger's bytes: the hello line joins it to the store; anything
  // else, or too much, or too late, ends it.
  void hear_stranger(Link& link, std::string_view bytes) {
    link.hello.append(bytes);
    const std::size_t newline = link.hello.find('\n');
    if (newline == std::string::npos) {
      if (link.hello.size() > StoreGuard::kLongestHelloBytes) close_link(link);
      return;
    }
    if (link.hello.compare(0, newline + 1, s_.hello) != 0) {
      close_link(link);
      return;
    }
    link.upstream.fd = connect_tcp(upstream_);
    if (link.upstream.fd < 0) {
      close_link(link);
      return;
    }
    link.upstream.pending = link.hello.substr(newline + 1);
    link.hello.clear();
  }

  // Reads what `from` sent into `to`'s pending bytes; false when the link
  // is broken. A side that ended is read no more: what it sent still goes
  // on, and then the other side's write half is shut.
  bool read_side(Link& link, Side& from, Side& to) {
    char chunk[1 << 16];
    const ssize_t got = ::recv(from.fd, chunk, sizeof chunk, 0);
    const bool store_side = &from == &link.upstream;
    if (!s_.guard && store_side && (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))) {
      orphan(link);
      return true;
    }
    if (got == 0) {
      from.ended = true;
      return link.upstream.fd >= 0 && !link.orphaned;  // a stranger that ends is gone; so is an orphan's client
    }
    if (got < 0) return errno == EAGAIN || errno == EINTR;
    const std::string_view bytes(chunk, static_cast<std::size_t>(got));
    if (link.orphaned) return true;  // dropped
    if (link.upstream.fd < 0) {
      hear_stranger(link, bytes);
    } else {
      to.pending.append(bytes);
    }
    return true;
  }

  bool write_side(Link& link, Side& side) {
    const ssize_t sent = ::send(side.fd, side.pending.data(), side.pending.size(), MSG_NOSIGNAL);
    if (sent < 0 && !s_.guard && &side == &link.upstream && errno != EAGAIN && errno != EINTR) {
      orphan(link);
      return true;
    }
    if (sent < 0) return errno == EAGAIN || errno == EINTR;
    side.pending.erase(0, static_cast<std::size_t>(sent));
    return true;
  }

  // After a pass: the write half of a side whose peer ended is shut once
  // everything for it is written; a link whose two sides ended and were
  // both shut is done.
  static void settle(Link& link) {
    for (auto [side, peer] : {std::pair{&link.client, &link.upstream}, std::pair{&link.upstream, &link.client}}) {
      if (peer->ended && !side->shut && side->pending.empty() && side->fd >= 0) {
        ::shutdown(side->fd, SHUT_WR);
        side->shut = true;
      }
    }
    if (link.client.ended && link.upstream.ended && link.client.shut && link.upstream.shut) close_link(link);
  }

  void loop() {
    while (!stop_) {
      const short listening = accept_paused_ ? 0 : POLLIN;
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_.fd(), listening, 0}};
      std::vector<std::pair<Link*, bool>> owners;  // (link, upstream side?) of fds[2..]
      const double now = steady_ms();
      for (auto& link : links_) {
        if (!link.closed && link.upstream.fd < 0 && now - link.since_ms > StoreGuard::kHelloDeadlineMs) {
          close_link(link);
        }
        if (link.closed) continue;
        const auto watch = [&](Side& side, const Side& other, bool upstream) {
          if (side.fd < 0) return;
          short events = !side.ended && other.pending.size() < kRelayBufferBytes ? POLLIN : 0;
          if (!side.pending.empty()) events |= POLLOUT;
          if (events == 0) return;
          fds.push_back({side.fd, events, 0});
          owners.emplace_back(&link, upstream);
        };
        watch(link.client, link.upstream, false);
        watch(link.upstream, link.client, true);
      }
      // (Another failure of poll is a lack of memory: looked at again soon.)
      if (::poll(fds.data(), fds.size(), accept_paused_ ? 100 : 1000) < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (fds[0].revents) {
        char drained[64];
        while (::read(wake_[0], drained, sizeof drained) > 0) {
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        auto [link, upstream] = owners[i - 2];
        if (link->closed || fds[i].revents == 0) continue;
        Side& side = upstream ? link->upstream : link->client;
        Side& other = upstream ? link->client : link->upstream;
        if (side.fd != fds[i].fd) continue;  // joined meanwhile: looked at next time
        bool open = true;
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !side.ended) open = read_side(*link, side, other);
        if (open && !link->closed && side.fd == fds[i].fd && (fds[i].revents & POLLOUT))
          open = write_side(*link, side);
        if (!open) close_link(*link);
        if (!link->closed) settle(*link);
      }
      links_.remove_if([](const Link& l) { return l.closed; });
      // Out of descriptors, accept fails and the listener stays readable:
      // it is looked at again after a pause, not in a busy loop.
      const std::size_t before = links_.size();
      accept_paused_ = false;
      if (fds[1].revents) {
        accept_all();
        accept_paused_ = links_.size() == before;
      }
    }
  }

  Settings s_;
  std::mutex upstream_mutex_;  // retarget() against the relay's thread
  sockaddr_in upstream_;
  channel::Listener listener_;
  bool accept_paused_ = false;
  std::optional<channel::SparedSocket> spared_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::list<Link> links_;
  std::thread thread_;
};

namespace {
std::string hello_line(const std::string& token) { return "oobleck-store " + token + "\n"; }
}  // namespace

StoreGuard::StoreGuard(const std::string& address, int store_port, std::string token)
    : relay_(std::make_unique<ByteRelay>(
          ByteRelay::Settings{address, "127.0.0.1", store_port, hello_line(token), /*guard=*/true})) {}
StoreGuard::~StoreGuard() = default;
int StoreGuard::port() const { return relay_->port(); }

StoreTunnel::StoreTunnel(const std::string& guard_address, int guard_port, std::string token)
    : relay_(std::make_unique<ByteRelay>(ByteRelay::Settings{
          "127.0.0.1", guard_address, guard_port, token.empty() ? std::string() : hello_line(token),
          /*guard=*/false})) {}
StoreTunnel::~StoreTunnel() = default;
int StoreTunnel::port() const { return relay_->port(); }
void StoreTunnel::retarget(int port) { relay_->retarget(port); }

}  // namespace oobleck::executor
