#include "control_server.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace oobleck::executor {
namespace {

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ControlServer::ControlServer(const std::string& address, std::string token, int port, double hello_deadline_ms)
    : listener_(address, port), token_(std::move(token)), hello_deadline_ms_(hello_deadline_ms) {}

std::vector<ControlServer::Inbound> ControlServer::poll(double timeout_ms,
                                                        const std::function<bool(const protocol::Hello&)>& admit) {
  std::vector<pollfd> fds = {{listener_.fd(), POLLIN, 0}};
  for (const auto& [fd, connection] : connections_) fds.push_back({fd, POLLIN, 0});
  std::vector<Inbound> out;
  const double now = steady_ms();
  for (const auto& [fd, since] : std::map(strangers_)) {
    if (now - since >= hello_deadline_ms_) drop(fd);
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::max(0.0, timeout_ms)))) <= 0) return out;
  if (fds[0].revents) {
    while (auto connection = listener_.accept()) {
      if (strangers_.size() >= kMostStrangers) {
        const int oldest = std::min_element(strangers_.begin(), strangers_.end(), [](const auto& a, const auto& b) {
                             return a.second < b.second;
                           })->first;
        read(oldest, out, admit);  // its hello may be waiting unread behind the flood
        if (strangers_.count(oldest)) drop(oldest);
      }
      const int fd = connection->fd();
      connection->set_longest_line(kLongestHelloBytes);
      connections_[fd] = std::move(connection);
      strangers_[fd] = steady_ms();
    }
  }
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents && connections_.count(fds[i].fd)) read(fds[i].fd, out, admit);
  }
  return out;
}

void ControlServer::read(int fd, std::vector<Inbound>& out, const std::function<bool(const protocol::Hello&)>& admit) {
  std::vector<protocol::Message> messages;
  std::vector<std::string> malformed;
  const bool open = protocol::receive(*connections_.at(fd), messages, std::chrono::milliseconds(0), &malformed);
  for (auto& m : messages) {
    if (const auto* hello = std::get_if<protocol::Hello>(&m); hello && !owners_.count(fd)) {
      // Not of this job, or not admitted: refused.
      const Owner owner{hello->node, hello->role, hello->role == protocol::Role::worker ? hello->gpu : 0};
      if (hello->token != token_) {
        drop(fd);
        return;
      }
      if (!admit(*hello)) {
        (void)protocol::send(*connections_.at(fd), protocol::Kill{});
        drop(fd);
        return;
      }
      if (const auto old = fd_of_.find(owner.key()); old != fd_of_.end()) {
        // A worker its agent restarted, before the dead one's close was
        // read: that close comes first. (Another agent of a node is refused.)
        if (owner.role != protocol::Role::worker) {
          drop(fd);
          return;
        }
        out.push_back({owner.node, owner.role, owner.gpu, Closed{}});
        drop(old->second);
      }
      owners_[fd] = owner;
      fd_of_[owner.key()] = fd;
      strangers_.erase(fd);
      connections_.at(fd)->set_longest_line(channel::Connection::kLongestLine);
    }
    const auto owner = owners_.find(fd);
    if (owner == owners_.end()) {  // said something before hello
      drop(fd);
      return;
    }
    out.push_back({owner->second.node, owner->second.role, owner->second.gpu, Arrived{std::move(m)}});
  }
  const auto owner = owners_.find(fd);
  if (owner == owners_.end()) {
    if (!open || !malformed.empty()) drop(fd);
    return;
  }
  // A malformed message: its sender is broken, and so is its node.
  const Owner& who = owner->second;
  if (!malformed.empty()) out.push_back({who.node, who.role, who.gpu, Malformed{malformed.front()}});
  if (!open) {
    out.push_back({who.node, who.role, who.gpu, Closed{}});
    drop(fd);
  }
}

void ControlServer::drop(int fd) {
  strangers_.erase(fd);
  if (const auto owner = owners_.find(fd); owner != owners_.end()) {
    fd_of_.erase(owner->second.key());
    owners_.erase(owner);
  }
  connections_.erase(fd);
}

bool ControlServer::send(const std::string& node, protocol::Role role, const protocol::Message& message) {
  bool all = true, any = false;
  for (auto it = fd_of_.lower_bound({node, role, 0}); it != fd_of_.end(); ++it) {
    if (std::get<0>(it->first) != node || std::get<1>(it->first) != role) break;
    any = true;
    all = protocol::send(*connections_.at(it->second), message) && all;
  }
  return any && all;
}

bool ControlServer::send_to_worker(const std::string& node, int gpu, const protocol::Message& message) {
  const auto it = fd_of_.find({node, protocol::Role::worker, gpu});
  return it != fd_of_.end() && protocol::send(*connections_.at(it->second), message);
}

void ControlServer::disconnect(const std::string& node) {
  std::vector<int> fds;
  for (const auto& [key, fd] : fd_of_) {
    if (std::get<0>(key) == node) fds.push_back(fd);
  }
  for (int fd : fds) drop(fd);
}

}  // namespace oobleck::executor
