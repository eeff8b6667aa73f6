// What reaches the master from outside the job: connections that never say
// hello, lines without end, and the rendezvous store's listening address.
#include "torch_doctest.h"

#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "comm/store_guard.h"
#include "comm/store_server.h"
#include "live/master/control_server.h"
#include "protocol/channel.h"
#include "protocol/protocol.h"

namespace {

using oobleck::executor::ControlServer;
namespace channel = oobleck::executor::channel;
namespace protocol = oobleck::executor::protocol;

// Polls the server (at most `polls` times) until the client's end sees the
// connection closed; returns whether it did.
bool closed_by_server(ControlServer& server, int client_fd, int polls, std::vector<ControlServer::Inbound>* seen = nullptr) {
  for (int i = 0; i < polls; ++i) {
    for (auto& in : server.poll(10, [](const protocol::Hello&) { return true; })) {
      if (seen != nullptr) seen->push_back(std::move(in));
    }
    char byte = 0;
    const ssize_t n = ::recv(client_fd, &byte, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

// node0's agent says hello with the job's token: it arrives, and alone.
void check_agent_hello_arrives(ControlServer& server) {
  auto agent = channel::connect_to("127.0.0.1", server.port(), std::chrono::seconds(5));
  protocol::Hello hello;
  hello.role = protocol::Role::agent;
  hello.node = "node0";
  hello.token = "job-token";
  REQUIRE(protocol::send(*agent, hello));
  std::vector<ControlServer::Inbound> seen;
  for (int i = 0; i < 200 && seen.empty(); ++i) {
    for (auto& in : server.poll(10, [](const protocol::Hello&) { return true; })) seen.push_back(std::move(in));
  }
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].node == "node0");
  CHECK(std::holds_alternative<ControlServer::Arrived>(seen[0].what));
}

// The LISTEN sockets of this process's network namespace on `port`, as the
// kernel lists them: local addresses in /proc/net/tcp's hex form.
std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> out;
  char wanted[8];
  std::snprintf(wanted, sizeof wanted, "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (state == "0A" && local.substr(colon + 1) == wanted) out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("control plane: a stranger's endless line ends its connection after a bounded read, and the job's own "
          "hello still comes in") {
  ControlServer server("127.0.0.1", "job-token");
  auto stranger = channel::connect_to("127.0.0.1", server.port(), std::chrono::seconds(5));
  // 8 MiB without a newline, from another thread: the server reads at most
  // kReadBudget a poll, and ends the connection past kLongestHelloBytes.
  std::thread flood([fd = stranger->fd()] {
    const std::string chunk(1 << 16, 'x');
    for (int i = 0; i < 128; ++i) {
      if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) return;
    }
  });
  CHECK(closed_by_server(server, stranger->fd(), 1000));
  flood.join();

  check_agent_hello_arrives(server);
}

TEST_CASE("control plane: a flood of silent connections keeps at most kMostStrangers open, and the job's hello "
          "still comes in") {
  ControlServer server("127.0.0.1", "job-token");
  const auto accept_all = [](const protocol::Hello&) { return true; };
  std::vector<std::unique_ptr<channel::Connection>> flood;
  for (std::size_t i = 0; i < 2 * ControlServer::kMostStrangers; ++i) {
    flood.push_back(channel::connect_to("127.0.0.1", server.port(), std::chrono::seconds(5)));
    if (i % 64 == 63) (void)server.poll(0, accept_all);
  }
  for (int i = 0; i < 20; ++i) (void)server.poll(5, accept_all);
  // The oldest were dropped as newer ones came: the server closed them.
  std::size_t closed = 0;
  for (const auto& c : flood) {
    char byte = 0;
    closed += ::recv(c->fd(), &byte, 1, MSG_DONTWAIT) == 0 ? 1 : 0;
  }
  CHECK(closed == ControlServer::kMostStrangers);
  check_agent_hello_arrives(server);
}

TEST_CASE("control plane: a connection that never says hello is closed at its deadline; one that did stays") {
  ControlServer server("127.0.0.1", "job-token", /*port=*/0, /*hello_deadline_ms=*/0);
  auto silent = channel::connect_to("127.0.0.1", server.port(), std::chrono::seconds(5));
  CHECK(closed_by_server(server, silent->fd(), 1000));
}

TEST_CASE("control plane: a loopback job's rendezvous store listens on the loopback alone") {
  const auto store = oobleck::executor::make_store_server("127.0.0.1", std::chrono::seconds(5));
  const auto addresses = listening_addresses(store->getPort());
  REQUIRE_FALSE(addresses.empty());
  for (const auto& a : addresses) CHECK(a == "0100007F");  // 127.0.0.1, IPv4; no wildcard, no IPv6
  CHECK(oobleck::executor::is_loopback_address("127.0.0.1"));
  CHECK(oobleck::executor::is_loopback_address("localhost"));
  CHECK_FALSE(oobleck::executor::is_loopback_address("10.0.0.1"));
}

TEST_CASE("store guard: the job's clients reach the store through tunnel and guard, every write whole; a wrong "
          "token is closed unanswered") {
  using oobleck::executor::StoreGuard;
  using oobleck::executor::StoreTunnel;
  const auto store = oobleck::executor::make_store_server("127.0.0.1", std::chrono::seconds(10));
  const StoreGuard guard("127.0.0.1", static_cast<int>(store->getPort()), "job-token");
  const StoreTunnel tunnel("127.0.0.1", guard.port(), "job-token");
  const auto client = [&] {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(tunnel.port());
    options.isServer = false;
    options.timeout = std::chrono::seconds(10);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  };
  // Each client sets its key and goes at once: what it wrote still arrives.
  for (int i = 0; i < 20; ++i) {
    const std::string value(i * 10000 + 100, static_cast<char>('a' + i));
    client()->set("key" + std::to_string(i), std::vector<std::uint8_t>(value.begin(), value.end()));
  }
  const auto reader = client();
  for (int i = 0; i < 20; ++i) {
    const auto got = reader->get("key" + std::to_string(i));
    CHECK(got.size() == static_cast<std::size_t>(i * 10000 + 100));
    CHECK(got.back() == static_cast<std::uint8_t>('a' + i));
  }
  CHECK(reader->add("counter", 5) == 5);
  CHECK(client()->add("counter", 2) == 7);

  // A stranger with the wrong token: closed, nothing said to it.
  auto stranger = channel::connect_to("127.0.0.1", guard.port(), std::chrono::seconds(5));
  const std::string wrong = "oobleck-store not-the-token\n";
  REQUIRE(::send(stranger->fd(), wrong.data(), wrong.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(wrong.size()));
  char byte = 0;
  timeval wait{10, 0};
  ::setsockopt(stranger->fd(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  CHECK(::recv(stranger->fd(), &byte, 1, 0) == 0);
}

TEST_CASE("control plane: a hello of this job the master does not admit is answered Kill; a stranger's is not "
          "answered") {
  ControlServer server("127.0.0.1", "job-token");
  const auto refuse = [](const protocol::Hello&) { return false; };
  const auto say_hello = [&](const std::string& token) {
    auto c = channel::connect_to("127.0.0.1", server.port(), std::chrono::seconds(5));
    protocol::Hello hello;
    hello.role = protocol::Role::worker;
    hello.node = "node7";
    hello.token = token;
    REQUIRE(protocol::send(*c, hello));
    std::vector<protocol::Message> heard;
    for (int i = 0; i < 200; ++i) {
      CHECK(server.poll(5, refuse).empty());  // nothing of it reaches the master
      if (!protocol::receive(*c, heard, std::chrono::milliseconds(5))) break;  // closed
    }
    return heard;
  };
  const auto fenced = say_hello("job-token");
  REQUIRE(fenced.size() == 1);
  CHECK(std::holds_alternative<protocol::Kill>(fenced[0]));
  CHECK(say_hello("not-the-token").empty());
}

TEST_CASE("store tunnel: when the store goes, its clients' connections stay open and silent; retargeted, new "
          "clients reach the next store") {
  using oobleck::executor::StoreTunnel;
  auto first = oobleck::executor::make_store_server("127.0.0.1", std::chrono::seconds(10));
  StoreTunnel tunnel("127.0.0.1", static_cast<int>(first->getPort()), "");
  const auto client = [&](std::chrono::milliseconds timeout) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(tunnel.port());
    options.isServer = false;
    options.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  };
  auto before = client(std::chrono::seconds(10));
  before->set("key", std::vector<std::uint8_t>{1, 2, 3});
  CHECK(before->get("key").size() == 3);
  first.reset();  // the master's store is gone (its master died)
  // The client's connections are neither reset nor closed (libtorch's
  // client would end the process, or spin): a request waits, and times out.
  before->setTimeout(std::chrono::milliseconds(300));
  CHECK_THROWS(before->get("key"));
  auto second = oobleck::executor::make_store_server("127.0.0.1", std::chrono::seconds(10));
  tunnel.retarget(static_cast<int>(second->getPort()));
  auto after = client(std::chrono::seconds(10));
  after->set("other", std::vector<std::uint8_t>{4});
  CHECK(after->get("other") == std::vector<std::uint8_t>{4});
}
