// The master's end of the control channel: the listening socket, one
// connection per agent and per worker, and which node and role each one
// belongs to. A connection belongs to a node once its hello carries the
// job's token and the master admits it; anything else is dropped.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "protocol/channel.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

class ControlServer {
 public:
  ControlServer(const std::string& address, std::string token);
  [[nodiscard]] int port() const { return listener_.port(); }

  // What a poll found, in order of arrival.
  struct Arrived {
    protocol::Message message;
  };
  struct Closed {};  // the connection is gone; the node's other role may be connected still
  struct Malformed {
    std::string what;
  };
  struct Inbound {
    std::string node;
    protocol::Role role = protocol::Role::agent;
    std::variant<Arrived, Closed, Malformed> what;
  };
  // Waits up to `timeout_ms` for traffic. A hello with the job's token is
  // admitted when `admit` says so (its node known and alive, that role not
  // connected yet), and arrives like any other message.
  std::vector<Inbound> poll(double timeout_ms, const std::function<bool(const protocol::Hello&)>& admit);

  // False when the node's connection of that role is not there or gone.
  bool send(const std::string& node, protocol::Role role, const protocol::Message& message);
  void disconnect(const std::string& node);

 private:
  struct Owner {
    std::string node;
    protocol::Role role;
  };
  void read(int fd, std::vector<Inbound>& out, const std::function<bool(const protocol::Hello&)>& admit);
  void drop(int fd);

  channel::Listener listener_;
  std::string token_;
  std::map<int, std::unique_ptr<channel::Connection>> connections_;
  std::map<int, Owner> owners_;
  std::map<std::pair<std::string, protocol::Role>, int> fd_of_;
};

}  // namespace oobleck::executor
