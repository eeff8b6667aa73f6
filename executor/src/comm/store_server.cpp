// libtorch's TCPStore takes no address to listen on: its server binds the
// wildcard address (IPv6 first, then IPv4). For a job on one machine that
// would open the store to every host that can reach this one. libtorch 2.x
// (2.3 on) takes a listening socket made by the caller instead; for 1.x,
// while this thread makes a loopback store, this program's getaddrinfo()
// answers the store's lookup of the wildcard (no host, AI_PASSIVE) with the
// loopback address, which the store then binds as it would the wildcard.
// Every other lookup of the program passes through unchanged.
#include "store_server.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace oobleck::executor {
namespace {

// The loopback address (numeric) wildcard lookups answer with, while set.
thread_local const char* wildcard_answer = nullptr;

// Sets wildcard_answer for as long as it lives.
class LoopbackWildcard {
 public:
  explicit LoopbackWildcard(const char* address) { wildcard_answer = address; }
  ~LoopbackWildcard() { wildcard_answer = nullptr; }
  LoopbackWildcard(const LoopbackWildcard&) = delete;
  LoopbackWildcard& operator=(const LoopbackWildcard&) = delete;
};

in_addr loopback_of(const std::string& address) {
  in_addr out{};
  if (address == "localhost" || inet_pton(AF_INET, address.c_str(), &out) != 1) out.s_addr = htonl(INADDR_LOOPBACK);
  return out;
}

// A listening socket on `address`:0 (libtorch 2.3 and later take it).
[[maybe_unused]] int listen_on(const in_addr& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("rendezvous store: socket: ") + std::strerror(errno));
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_addr = address;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&where), sizeof where) != 0 || ::listen(fd, 1024) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("rendezvous store: cannot listen on the loopback: " + reason);
  }
  return fd;
}

template <typename Options>
c10::intrusive_ptr<c10d::TCPStore> loopback_store(const std::string& address, Options options) {
  const in_addr loopback = loopback_of(address);
  if constexpr (requires { options.masterListenFd; }) {
    options.masterListenFd = listen_on(loopback);
    return c10::make_intrusive<c10d::TCPStore>(address, options);
  } else {
    char numeric[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &loopback, numeric, sizeof numeric);
    const LoopbackWildcard answer(numeric);
    return c10::make_intrusive<c10d::TCPStore>(address, options);
  }
}

}  // namespace

ServedStore serve_store(const std::string& master_addr, const std::string& token,
                        std::chrono::milliseconds timeout) {
  ServedStore served;
  if (is_loopback_address(master_addr)) {
    served.store = make_store_server(master_addr, timeout);
  } else {
    served.store = make_store_server("127.0.0.1", timeout);
    served.guard = std::make_unique<StoreGuard>(master_addr, static_cast<int>(served.store->getPort()), token);
  }
  return served;
}

bool is_loopback_address(const std::string& address) {
  in_addr a{};
  return address == "localhost" || (inet_pton(AF_INET, address.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127);
}

c10::intrusive_ptr<c10d::TCPStore> make_store_server(const std::string& address, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = 0;  // any free port
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = timeout;
  if (!is_loopback_address(address)) return c10::make_intrusive<c10d::TCPStore>(address, options);
  return loopback_store(address, options);
}

}  // namespace oobleck::executor

// The program's getaddrinfo(): see the top of this file.
extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** result) {
  using Lookup = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const auto libc_lookup = reinterpret_cast<Lookup>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (libc_lookup == nullptr) return EAI_SYSTEM;
  const char* answer = oobleck::executor::wildcard_answer;
  if (answer != nullptr && node == nullptr && hints != nullptr && (hints->ai_flags & AI_PASSIVE) != 0) {
    addrinfo loopback = *hints;
    loopback.ai_family = AF_INET;
    loopback.ai_flags = (hints->ai_flags & ~AI_PASSIVE) | AI_NUMERICHOST;
    return libc_lookup(answer, service, &loopback, result);
  }
  return libc_lookup(node, service, hints, result);
}
