// The rendezvous store's server (c10d's TCPStore), listening only where the
// job's processes can reach it: a job on one machine (a loopback master
// address) keeps it off the network.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "store_guard.h"

namespace oobleck::executor {

// A store server on any free port of `address`. On a loopback address it
// listens on that address alone; on another, on every address of the host
// (the store has no other choice there), as remote processes connect.
[[nodiscard]] c10::intrusive_ptr<c10d::TCPStore> make_store_server(const std::string& address,
                                                                   std::chrono::milliseconds timeout);

// The job's store as the master serves it: on the loopback alone, and, when
// agents reach the master at another address, behind a StoreGuard there
// (store_guard.h). port() is where workers connect (with a StoreTunnel when
// guarded).
struct ServedStore {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::unique_ptr<StoreGuard> guard;
  [[nodiscard]] int port() const { return guard ? guard->port() : static_cast<int>(store->getPort()); }
};
[[nodiscard]] ServedStore serve_store(const std::string& master_addr, const std::string& token,
                                      std::chrono::milliseconds timeout);

// True for 127.0.0.0/8 and "localhost".
[[nodiscard]] bool is_loopback_address(const std::string& address);

}  // namespace oobleck::executor
