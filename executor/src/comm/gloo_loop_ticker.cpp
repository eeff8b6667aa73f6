#include "gloo_loop_ticker.h"

#ifdef OOBLECK_GLOO_LOOP_TICKER
#include <gloo/transport/tcp/device.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <string>

namespace oobleck::executor {

#ifdef OOBLECK_GLOO_LOOP_TICKER
namespace {

// The loop calls it for every tick's wake-up; edge-triggered, there is
// nothing to drain. One for every ticker and never destroyed: a wake-up
// still queued when a ticker goes finds it alive.
class IgnoreWakeups final : public gloo::transport::tcp::Handler {
 public:
  void handleEvents(int /*events*/) override {}
};

IgnoreWakeups& ignore_wakeups() {
  static auto* handler = new IgnoreWakeups();
  return *handler;
}

// libtorch makes a TCP device unless GLOO_DEVICE_TRANSPORT names another.
bool tcp_transport() {
  const char* transport = std::getenv("GLOO_DEVICE_TRANSPORT");
  return transport == nullptr || std::string(transport).empty() || std::string(transport) == "TCP";
}

}  // namespace

GlooLoopTicker::GlooLoopTicker(const std::shared_ptr<gloo::transport::Device>& device) {
  if (!device || !tcp_transport()) return;
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) return;  // connecting is slower, not wrong
  static_cast<gloo::transport::tcp::Device&>(*device).registerDescriptor(event_fd_, EPOLLIN | EPOLLET,
                                                                       &ignore_wakeups());
  ticker_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      const std::uint64_t one = 1;
      if (::write(event_fd_, &one, sizeof one) < 0) {
        std::uint64_t drained = 0;  // full (never, in practice): empty it, the next write wakes again
        (void)!::read(event_fd_, &drained, sizeof drained);
      }
      std::this_thread::sleep_for(kTick);
    }
  });
}

GlooLoopTicker::~GlooLoopTicker() {
  stop_ = true;
  if (ticker_.joinable()) ticker_.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}
#else
GlooLoopTicker::GlooLoopTicker(const std::shared_ptr<gloo::transport::Device>& /*device*/) {}
GlooLoopTicker::~GlooLoopTicker() = default;
#endif

}  // namespace oobleck::executor
