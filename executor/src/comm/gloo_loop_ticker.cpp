#include "gloo_loop_ticker.h"

#ifdef OOBLECK_GLOO_LOOP_TICKER
#include <gloo/transport/tcp/device.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

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

// The eventfd and the thread that writes to it every tick.
class GlooLoopTicker::Ticking {
 public:
  explicit Ticking(gloo::transport::tcp::Device& device) {
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return;  // connecting is slower, not wrong
    device.registerDescriptor(event_fd_, EPOLLIN | EPOLLET, &ignore_wakeups());
    thread_ = std::thread([this] {
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
  ~Ticking() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (event_fd_ >= 0) ::close(event_fd_);
  }
  Ticking(const Ticking&) = delete;
  Ticking& operator=(const Ticking&) = delete;

 private:
  int event_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

namespace {

struct Registry {
  std::mutex mutex;
  std::map<const gloo::transport::Device*, std::weak_ptr<GlooLoopTicker::Ticking>> by_device;
};

// Never destroyed: a ticker may go on a detached thread after main returns.
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

}  // namespace

GlooLoopTicker::GlooLoopTicker(const std::shared_ptr<gloo::transport::Device>& device) {
  if (!device || !tcp_transport()) return;
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::erase_if(r.by_device, [](const auto& entry) { return entry.second.expired(); });
  auto& slot = r.by_device[device.get()];
  ticking_ = slot.lock();
  if (!ticking_) {
    ticking_ = std::make_shared<Ticking>(static_cast<gloo::transport::tcp::Device&>(*device));
    slot = ticking_;
  }
}

// The last ticker of a device stops its thread (outside the registry's lock).
GlooLoopTicker::~GlooLoopTicker() = default;

int GlooLoopTicker::loops_ticking() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return static_cast<int>(std::count_if(r.by_device.begin(), r.by_device.end(),
                                        [](const auto& entry) { return !entry.second.expired(); }));
}
#else
class GlooLoopTicker::Ticking {};
GlooLoopTicker::GlooLoopTicker(const std::shared_ptr<gloo::transport::Device>& /*device*/) {}
GlooLoopTicker::~GlooLoopTicker() = default;
int GlooLoopTicker::loops_ticking() { return 0; }
#endif

}  // namespace oobleck::executor
