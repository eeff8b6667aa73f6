// The master's end of the control channel: the listening socket, one
// connection per agent and per worker, and which node, role and GPU each
// one belongs to. A connection belongs to a node once its hello carries the
// job's token and the master admits it; anything else is dropped.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "protocol/channel.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

class ControlServer {
 public:
  // On `address`:`port` (0: any free port; a restarted master takes its
  // predecessor's, where the job's processes reconnect).
  ControlServer(const std::string& address, std::string token, int port = 0,
                double hello_deadline_ms = kHelloDeadlineMs);
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
    int gpu = 0;  // a worker's
    std::variant<Arrived, Closed, Malformed> what;
  };
  // Waits up to `timeout_ms` for traffic. A hello with the job's token is
  // admitted when `admit` says so (its node known and alive), unless that
  // role (and GPU) is connected already, and arrives like any other message;
  // not admitted, it is answered Kill (a process of this job the master
  // has fenced, or never knew, must not wait for a master that will not
  // have it).
  // A connection that has not said hello within kHelloDeadlineMs, or sends
  // more than kLongestHelloBytes without one, is dropped, and so is the
  // oldest when more than kMostStrangers wait: strangers cost the job
  // neither memory nor time, however many connect.
  std::vector<Inbound> poll(double timeout_ms, const std::function<bool(const protocol::Hello&)>& admit);
  static constexpr double kHelloDeadlineMs = 10000;
  static constexpr std::size_t kLongestHelloBytes = 64 * 1024;
  static constexpr std::size_t kMostStrangers = 256;

  // To the node's agent, or to every worker of the node. False when a
  // connection it goes to is gone, or there is none.
  bool send(const std::string& node, protocol::Role role, const protocol::Message& message);
  // To the worker of one GPU.
  bool send_to_worker(const std::string& node, int gpu, const protocol::Message& message);
  void disconnect(const std::string& node);

 private:
  struct Owner {
    std::string node;
    protocol::Role role;
    int gpu;
    [[nodiscard]] auto key() const { return std::tuple{node, role, gpu}; }
  };
  void read(int fd, std::vector<Inbound>& out, const std::function<bool(const protocol::Hello&)>& admit);
  void drop(int fd);

  channel::Listener listener_;
  std::string token_;
  double hello_deadline_ms_;
  std::map<int, std::unique_ptr<channel::Connection>> connections_;
  std::map<int, Owner> owners_;
  std::map<int, double> strangers_;  // fd -> when it connected (ms), until its hello is admitted
  std::map<std::tuple<std::string, protocol::Role, int>, int> fd_of_;
};

}  // namespace oobleck::executor
