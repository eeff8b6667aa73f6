// A reset connection must not end the process inside Gloo's event loop.
//
// Why: the Gloo of libtorch 1.x (Debian's libgloo, 2022) asks for a pair's
// peer address right after accept() or connect() succeeds, and throws when
// getpeername fails. That throw happens on the device's loop thread, where
// nothing catches it: std::terminate. getpeername fails with ENOTCONN when
// the peer reset the connection in between, which is exactly what a peer
// killed while a group connects does. So one process's death during a
// recovery killed a surviving worker too.
//
// This build defines getpeername itself (the executable's definition comes
// before libc's for every library). Called from libgloo, a connection that
// is no longer connected gets an unspecified address instead of an error;
// Gloo then finds the reset at its first read or write and reports it the
// usual way, as a failed operation of that group. Every other caller gets
// libc's answer unchanged.
#pragma once

#include <sys/socket.h>

namespace oobleck::executor {

// getpeername, except that a socket no longer connected (ENOTCONN) gets an
// address of family AF_UNSPEC and success.
int peer_name_or_unspecified(int fd, sockaddr* address, socklen_t* length);

// Whether getpeername, as the libraries of this process resolve it, is the
// guard above (only in builds against Debian's libgloo, which needs it).
[[nodiscard]] bool gloo_peer_name_guarded();

}  // namespace oobleck::executor
