// A peer that resets its connection while a Gloo pair connects: the error
// reaches the thread that connects, and the process lives
// (executor/src/comm/gloo_peer_name.h).
#include "torch_doctest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "comm/communicator.h"
#include "comm/gloo_loop_ticker.h"
#include "comm/gloo_peer_name.h"
#include "live/worker/generation_groups.h"
#include "skip.h"

#ifdef OOBLECK_GLOO_PEER_NAME_GUARD
#include <gloo/common/error.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <sys/epoll.h>
#endif

namespace {

using oobleck::executor::peer_name_or_unspecified;

// A listening socket on the loopback and its address.
int listen_on_loopback(sockaddr_in& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  return fd;
}

// Connects to `address` and resets the connection at once (SO_LINGER 0).
void connect_and_reset(const sockaddr* address, socklen_t length) {
  const int fd = ::socket(address->sa_family, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::connect(fd, address, length) == 0);
  const linger reset{1, 0};
  REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset) == 0);
  ::close(fd);
}

int libc_peer_name(int fd, sockaddr* address, socklen_t* length) {
  return static_cast<int>(::syscall(SYS_getpeername, fd, address, length));
}

}  // namespace

TEST_CASE("gloo peer name: a connection reset before accept gets an unspecified address, a live one its own") {
  sockaddr_in listening{};
  const int listener = listen_on_loopback(listening);
  connect_and_reset(reinterpret_cast<const sockaddr*>(&listening), sizeof listening);
  const int reset = ::accept(listener, nullptr, nullptr);
  REQUIRE(reset >= 0);
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  errno = 0;
  REQUIRE(libc_peer_name(reset, reinterpret_cast<sockaddr*>(&peer), &length) == -1);  // what Gloo met
  REQUIRE(errno == ENOTCONN);
  length = sizeof peer;
  peer.ss_family = AF_INET;
  CHECK(peer_name_or_unspecified(reset, reinterpret_cast<sockaddr*>(&peer), &length) == 0);
  CHECK(peer.ss_family == AF_UNSPEC);
  // Called from outside libgloo, getpeername answers as libc does.
  length = sizeof peer;
  errno = 0;
  CHECK(::getpeername(reset, reinterpret_cast<sockaddr*>(&peer), &length) == -1);
  CHECK(errno == ENOTCONN);
  ::close(reset);

  // A connection still there: its peer's address, as from libc.
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(client, reinterpret_cast<const sockaddr*>(&listening), sizeof listening) == 0);
  const int live = ::accept(listener, nullptr, nullptr);
  REQUIRE(live >= 0);
  sockaddr_in from_libc{}, from_guard{};
  socklen_t libc_length = sizeof from_libc, guard_length = sizeof from_guard;
  REQUIRE(libc_peer_name(live, reinterpret_cast<sockaddr*>(&from_libc), &libc_length) == 0);
  CHECK(peer_name_or_unspecified(live, reinterpret_cast<sockaddr*>(&from_guard), &guard_length) == 0);
  CHECK(guard_length == libc_length);
  CHECK(from_guard.sin_port == from_libc.sin_port);
  CHECK(from_guard.sin_addr.s_addr == from_libc.sin_addr.s_addr);
  ::close(live);
  ::close(client);
  ::close(listener);
}

#ifdef OOBLECK_GLOO_PEER_NAME_GUARD
namespace {

// Holds a Gloo device's event loop inside its handler until released, so
// that the test decides what happens before the loop's next accept.
class LoopHolder final : public gloo::transport::tcp::Handler {
 public:
  void handleEvents(int /*events*/) override {
    if (held_) return;
    held_ = true;
    entered_.set_value();
    released_.get_future().wait();
  }
  std::promise<void> entered_, released_;

 private:
  bool held_ = false;
};

}  // namespace
#endif

TEST_CASE("gloo peer name: a peer that resets while a pair connects fails the connect, and the process lives") {
#ifndef OOBLECK_GLOO_PEER_NAME_GUARD
  OOBLECK_SKIP("this build's Gloo is not Debian's libgloo, which needs the guard");
#else
  REQUIRE(oobleck::executor::gloo_peer_name_guarded());
  namespace tcp = gloo::transport::tcp;
  tcp::attr loopback("127.0.0.1");
  const auto device = tcp::CreateDevice(loopback);
  auto& loop_device = static_cast<tcp::Device&>(*device);
  // The loop held, a pair listens for rank 1, and a stranger connects to it
  // and resets: the pair's accept then finds a connection already gone.
  LoopHolder holder;
  const int wake = ::eventfd(0, EFD_CLOEXEC);
  REQUIRE(wake >= 0);
  loop_device.registerDescriptor(wake, EPOLLIN, &holder);
  const std::uint64_t one = 1;
  REQUIRE(::write(wake, &one, sizeof one) == sizeof one);
  holder.entered_.get_future().wait();
  const auto context = device->createContext(0, 2);
  auto& pair = context->createPair(1);
  const tcp::Address self(pair->address().bytes());
  const sockaddr_storage self_address = self.getSockaddr();
  connect_and_reset(reinterpret_cast<const sockaddr*>(&self_address), sizeof(sockaddr_in));
  holder.released_.set_value();
  // Rank 1's address, above this pair's own so that this pair is the side
  // that listens: the connection it accepted is the one it keeps.
  sockaddr_in above{};
  std::memcpy(&above, &self_address, sizeof above);
  above.sin_port = 0xffff;
  REQUIRE(above.sin_port != reinterpret_cast<const sockaddr_in&>(self_address).sin_port);
  const tcp::Address rank1(reinterpret_cast<const sockaddr*>(&above), sizeof above);
  char byte = 0;
  auto buffer = context->createUnboundBuffer(&byte, 1);
  CHECK_THROWS_AS(
      {
        pair->connect(rank1.bytes());
        buffer->recv(1, 0);
        buffer->waitRecv(std::chrono::seconds(60));  // the reset ends it long before
      },
      gloo::IoException);
  loop_device.unregisterDescriptor(wake, &holder);
  ::close(wake);
#endif
}

TEST_CASE("gloo devices: every group of a process shares one loop per address, ticked once while any connects") {
  using oobleck::executor::GlooLoopTicker;
  using oobleck::executor::make_gloo_communicator;
  // Two groups of two ranks each, made at once on one process's threads:
  // both connect on the one device and sum what they should.
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<oobleck::executor::Communicator>> groups(4);
  {
    std::vector<std::thread> makers;
    for (int g = 0; g < 2; ++g) {
      for (int r = 0; r < 2; ++r) {
        makers.emplace_back([&, g, r] {
          groups[static_cast<std::size_t>(2 * g + r)] = make_gloo_communicator(
              store, "group" + std::to_string(g), r, 2, "127.0.0.1", std::chrono::seconds(30));
        });
      }
    }
    for (auto& m : makers) m.join();
  }
  std::vector<torch::Tensor> values(4);
  std::vector<std::thread> summers;
  for (std::size_t i = 0; i < 4; ++i) {
    values[i] = torch::full({3}, static_cast<double>(i + 1), torch::kFloat64);
    summers.emplace_back([&, i] { groups[i]->allreduce_sum(values[i]); });
  }
  for (auto& s : summers) s.join();
  CHECK(values[0].equal(torch::full({3}, 3.0, torch::kFloat64)));
  CHECK(values[1].equal(values[0]));
  CHECK(values[2].equal(torch::full({3}, 7.0, torch::kFloat64)));
  CHECK(values[3].equal(values[2]));
  CHECK(GlooLoopTicker::loops_ticking() == 0);  // none connects now
#ifdef OOBLECK_GLOO_PEER_NAME_GUARD  // (built where the ticker is)
  namespace tcp = gloo::transport::tcp;
  const auto one = tcp::CreateDevice(tcp::attr("127.0.0.1"));
  const auto other = tcp::CreateDevice(tcp::attr("127.0.0.1"));
  {
    const GlooLoopTicker first(one);
    const GlooLoopTicker second(one);
    CHECK(GlooLoopTicker::loops_ticking() == 1);
    const GlooLoopTicker third(other);
    CHECK(GlooLoopTicker::loops_ticking() == 2);
  }
  CHECK(GlooLoopTicker::loops_ticking() == 0);
#endif
}

TEST_CASE("gloo devices: a one-machine worker's groups listen on loopback addresses that rise with its rank") {
  using oobleck::executor::GenerationGroups;
  using oobleck::executor::GroupSettings;
  // Gloo's pairs compare addresses byte by byte: a lower rank must compare lower.
  const auto address_of = [](int rank, const std::string& bind_host) {
    GroupSettings settings;
    settings.rank = rank;
    settings.bind_host = bind_host;
    return GenerationGroups::bind_address(settings);
  };
  CHECK(address_of(0, "127.0.0.1") == "127.1.0.0");
  CHECK(address_of(257, "127.0.0.1") == "127.1.1.1");
  CHECK(address_of(65536, "127.0.0.1") == "127.0.0.1");  // past the range: the one address
  CHECK(address_of(3, "").empty());                      // across hosts: the host's own
  CHECK(address_of(3, "10.0.0.2") == "10.0.0.2");
  for (const int rank : {0, 1, 254, 255, 256, 300, 65534}) {
    in_addr lower{}, higher{};
    REQUIRE(::inet_pton(AF_INET, address_of(rank, "127.0.0.1").c_str(), &lower) == 1);
    REQUIRE(::inet_pton(AF_INET, address_of(rank + 1, "127.0.0.1").c_str(), &higher) == 1);
    CHECK(std::memcmp(&lower, &higher, sizeof lower) < 0);
  }
  // A group of four over those addresses connects and sums.
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<oobleck::executor::Communicator>> members(4);
  std::vector<torch::Tensor> values(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      members[static_cast<std::size_t>(r)] = oobleck::executor::make_gloo_communicator(
          store, "ranked", r, 4, address_of(r, "127.0.0.1"), std::chrono::seconds(30));
      values[static_cast<std::size_t>(r)] = torch::full({2}, static_cast<double>(1 << r), torch::kFloat64);
      members[static_cast<std::size_t>(r)]->allreduce_sum(values[static_cast<std::size_t>(r)]);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& v : values) CHECK(v.equal(torch::full({2}, 15.0, torch::kFloat64)));
}
