// A rendezvous store for communicator tests: a TCP store served on the
// loopback at a port the system picks, and clients of it (a client serves
// one thread at a time, so each rank's thread takes its own).
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace oobleck::test {

class LoopbackStore {
 public:
  LoopbackStore() {
    c10d::TCPStoreOptions options;
    options.port = 0;
    options.isServer = true;
    options.waitWorkers = false;
    server_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  }
  [[nodiscard]] const c10::intrusive_ptr<c10d::TCPStore>& server() const { return server_; }
  [[nodiscard]] c10::intrusive_ptr<c10d::TCPStore> client() const {
    c10d::TCPStoreOptions options;
    options.port = server_->getPort();
    options.isServer = false;
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> server_;
};

}  // namespace oobleck::test
