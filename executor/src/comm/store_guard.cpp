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

// A blocking TCP connection to host:port, then made non-blocking; -1 when
// it cannot be made.
int connect_tcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_nonblocking(fd);
  return fd;
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
    std::string hello;  // "oobleck-store TOKEN\n"
    bool guard = false;
  };

  explicit ByteRelay(Settings settings) : s_(std::move(settings)), listener_(s_.listen_address, 0) {
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

 private:
  struct Side {
    int fd = -1;
    std::string pending;  // to be written to this side
  };
  struct Link {
    Side client, upstream;  // upstream.fd < 0: a guard's stranger, not yet joined
    std::string hello;      // what a stranger said so far
    double since_ms = 0;
    bool closed = false;
  };

  static void close_link(Link& link) {
    for (Side* side : {&link.client, &link.upstream}) {
      if (side->fd >= 0) ::close(side->fd);
      side->fd = -1;
    }
    link.closed = true;
  }

  void accept_all() {
    while (auto connection = listener_.accept()) {
      const int fd = ::dup(connection->fd());  // the Connection closes its own
      if (fd < 0) continue;
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
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
          close_link(*oldest);
        }
      } else {
        link.upstream.fd = connect_tcp(s_.upstream_host, s_.upstream_port);
        if (link.upstream.fd < 0) {
          ::close(fd);
          continue;
        }
        link.upstream.pending = s_.hello;
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
    link.upstream.fd = connect_tcp(s_.upstream_host, s_.upstream_port);
    if (link.upstream.fd < 0) {
      close_link(link);
      return;
    }
    link.upstream.pending = link.hello.substr(newline + 1);
    link.hello.clear();
  }

  // Reads what `from` sent into `to`'s pending bytes; false when it closed.
  bool read_side(Link& link, Side& from, Side& to) {
    char chunk[1 << 16];
    const ssize_t got = ::recv(from.fd, chunk, sizeof chunk, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return false;
    if (got < 0) return true;
    const std::string_view bytes(chunk, static_cast<std::size_t>(got));
    if (link.upstream.fd < 0) {
      hear_stranger(link, bytes);
    } else {
      to.pending.append(bytes);
    }
    return true;
  }

  static bool write_side(Side& side) {
    const ssize_t sent = ::send(side.fd, side.pending.data(), side.pending.size(), MSG_NOSIGNAL);
    if (sent < 0) return errno == EAGAIN || errno == EINTR;
    side.pending.erase(0, static_cast<std::size_t>(sent));
    return true;
  }

  void loop() {
    while (!stop_) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      std::vector<std::pair<Link*, bool>> owners;  // (link, upstream side?) of fds[2..]
      const double now = steady_ms();
      for (auto& link : links_) {
        if (!link.closed && link.upstream.fd < 0 && now - link.since_ms > StoreGuard::kHelloDeadlineMs) {
          close_link(link);
        }
        if (link.closed) continue;
        const auto watch = [&](Side& side, const Side& other, bool upstream) {
          if (side.fd < 0) return;
          short events = other.pending.size() < kRelayBufferBytes ? POLLIN : 0;
          if (!side.pending.empty()) events |= POLLOUT;
          fds.push_back({side.fd, events, 0});
          owners.emplace_back(&link, upstream);
        };
        watch(link.client, link.upstream, false);
        watch(link.upstream, link.client, true);
      }
      if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
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
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) open = read_side(*link, side, other);
        if (open && !link->closed && (fds[i].revents & POLLOUT)) open = write_side(side);
        if (!open) close_link(*link);
      }
      links_.remove_if([](const Link& l) { return l.closed; });
      if (fds[1].revents) accept_all();
    }
  }

  Settings s_;
  channel::Listener listener_;
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
    : relay_(std::make_unique<ByteRelay>(
          ByteRelay::Settings{"127.0.0.1", guard_address, guard_port, hello_line(token), /*guard=*/false})) {}
StoreTunnel::~StoreTunnel() = default;
int StoreTunnel::port() const { return relay_->port(); }

}  // namespace oobleck::executor
