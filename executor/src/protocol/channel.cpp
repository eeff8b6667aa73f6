#include "channel.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace oobleck::executor::channel {
namespace {

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

sockaddr_in resolve(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    throw std::runtime_error("control channel: cannot resolve " + address);
  }
  sockaddr_in out = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  out.sin_port = htons(static_cast<std::uint16_t>(port));
  return out;
}

}  // namespace

Connection::Connection(int fd) : fd_(fd) {
  const int on = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  fcntl(fd_, F_SETFD, FD_CLOEXEC);
  // A peer that stops reading must not block the sender for long: the send
  // fails, and the heartbeat decides.
  const timeval send_timeout{2, 0};
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  // A peer whose host vanished (no FIN, no RST) is noticed in seconds.
  const int idle_s = 5, interval_s = 1, probes = 3;
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

Connection::~Connection() { close(); }

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Connection::send(std::string_view line) {
  if (fd_ < 0) return false;
  std::string text(line);
  text += '\n';
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Half a message may be out: nothing may follow it. The peer sees the
      // connection close, and so does our next receive.
      ::shutdown(fd_, SHUT_RDWR);
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool Connection::receive(std::vector<std::string>& out) {
  if (fd_ < 0) return false;
  bool open = true;
  char buffer[65536];
  for (std::size_t read = 0; read < kReadBudget;) {
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      pending_.append(buffer, static_cast<std::size_t>(n));
      read += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    open = false;  // orderly close or an error: the peer is gone
    break;
  }
  std::size_t start = 0;
  for (std::size_t end; (end = pending_.find('\n', start)) != std::string::npos; start = end + 1) {
    out.push_back(pending_.substr(start, end - start));
  }
  pending_.erase(0, start);
  // A peer that sends no newline is broken: its connection ends here
  // rather than this process's memory.
  if (pending_.size() > longest_line_) {
    pending_.clear();
    return false;
  }
  return open;
}

bool Connection::receive(std::vector<std::string>& out, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return true;
  return receive(out);
}

Listener::Listener(const std::string& address, int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw system_error("control channel: socket");
  const int on = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in where = resolve(address, port);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0 || ::listen(fd_, 256) != 0) {
    const auto error = system_error("control channel: cannot listen on " + address);
    ::close(fd_);
    throw error;
  }
  socklen_t length = sizeof where;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&where), &length);
  port_ = ntohs(where.sin_port);
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

Listener::~Listener() { ::close(fd_); }

std::unique_ptr<Connection> Listener::accept() {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return nullptr;
  return std::make_unique<Connection>(fd);
}

std::unique_ptr<Connection> connect_to(const std::string& address, int port, std::chrono::milliseconds timeout) {
  const sockaddr_in where = resolve(address, port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw system_error("control channel: socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&where), sizeof where) == 0) {
      return std::make_unique<Connection>(fd);
    }
    const int error = errno;
    ::close(fd);
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("control channel: cannot reach the master at " + address + ":" + std::to_string(port) +
                               ": " + std::strerror(error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::unique_ptr<Connection> try_connect(const std::string& address, int port, std::chrono::milliseconds wait) {
  const sockaddr_in where = resolve(address, port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return nullptr;
  bool connected = ::connect(fd, reinterpret_cast<const sockaddr*>(&where), sizeof where) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd handshake{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    connected = ::poll(&handshake, 1, static_cast<int>(wait.count())) == 1 &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }
  if (!connected) {
    ::close(fd);
    return nullptr;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return std::make_unique<Connection>(fd);
}

namespace {

std::mutex spared_mutex;
std::set<int> spared_fds;

}  // namespace

SparedSocket::SparedSocket(int fd) : fd_(fd) {
  const std::lock_guard lock(spared_mutex);
  spared_fds.insert(fd_);
}

SparedSocket::~SparedSocket() {
  const std::lock_guard lock(spared_mutex);
  spared_fds.erase(fd_);
}

int abandon_sockets(const std::vector<int>& keep, bool keep_listening) {
  const std::lock_guard lock(spared_mutex);
  DIR* folder = ::opendir("/proc/self/fd");
  if (folder == nullptr) return 0;
  int count = 0;
  const int own = ::dirfd(folder);
  while (const dirent* entry = ::readdir(folder)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == own || std::find(keep.begin(), keep.end(), fd) != keep.end() || spared_fds.count(fd)) continue;
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    int listening = 0;
    socklen_t length = sizeof listening;
    if (keep_listening && ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening) {
      continue;
    }
    if (::shutdown(fd, SHUT_RDWR) == 0) ++count;
  }
  ::closedir(folder);
  return count;
}

}  // namespace oobleck::executor::channel
