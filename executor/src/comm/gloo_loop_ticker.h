// Keeps a Gloo device's event loop ticking while a group connects.
//
// Why: the Gloo of libtorch 1.x (Debian's libgloo, 2022) connects each pair
// by taking the pair's listening socket off the device's event loop, and
// then waits for the loop's next tick, so that no handler of that socket can
// still run. The loop ticks when epoll_wait returns: at once when something
// happens, else after its 10 ms timeout. Connecting is sequential, peer by
// peer, so making a group of n processes costs up to 10 ms per peer, and a
// rank also waits for peers that are themselves waiting: 60-95 ms for five
// processes on an idle loopback, most of a live recovery's communicators.
// A ticker registers an eventfd with the loop and writes to it every
// kTick while the group connects: each wait then ends within a tick. The
// eventfd is edge-triggered and its handler does nothing (a wake-up is
// all it is for); closing it takes it off the loop's epoll set, without
// the wait an unregister would cost. Groups share their process's device
// (communicator.h), so several may connect on one loop at once: they share
// one ticking thread, which runs while any of them connects.
#pragma once

#include <chrono>
#include <memory>

namespace gloo::transport {
class Device;
}

namespace oobleck::executor {

class GlooLoopTicker {
 public:
  static constexpr std::chrono::microseconds kTick{250};

  // Ticks `device`'s loop when it is a TCP device of a Gloo this build
  // knows to need it; otherwise does nothing.
  explicit GlooLoopTicker(const std::shared_ptr<gloo::transport::Device>& device);
  ~GlooLoopTicker();
  GlooLoopTicker(const GlooLoopTicker&) = delete;
  GlooLoopTicker& operator=(const GlooLoopTicker&) = delete;

  // How many devices' loops are being ticked now (for tests).
  [[nodiscard]] static int loops_ticking();

  class Ticking;  // one per device, while any of its tickers lives (opaque)

 private:
  std::shared_ptr<Ticking> ticking_;
};

}  // namespace oobleck::executor
