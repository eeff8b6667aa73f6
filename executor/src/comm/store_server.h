// The rendezvous store's server (c10d's TCPStore), listening only where the
// job's processes can reach it: a job on one machine (a loopback master
// address) keeps it off the network.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>

namespace oobleck::executor {

// A store server on any free port of `address`. On a loopback address it
// listens on that address alone; on another, on every address of the host
// (the store has no other choice there), as remote processes connect.
[[nodiscard]] c10::intrusive_ptr<c10d::TCPStore> make_store_server(const std::string& address,
                                                                   std::chrono::milliseconds timeout);

// True for 127.0.0.0/8 and "localhost".
[[nodiscard]] bool is_loopback_address(const std::string& address);

}  // namespace oobleck::executor
