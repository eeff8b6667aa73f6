// Files that survive a crash: written, flushed to the disk, and their folder
// synced, so that a rename that points at them is never ahead of their data.
#pragma once

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace oobleck::executor {

inline void write_durably(const std::filesystem::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot write (" + std::strerror(errno) + ")");
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string error = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error(path.string() + ": write failed (" + error + ")");
    }
    written += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) throw std::runtime_error(path.string() + ": cannot flush to disk");
}

inline void sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A folder and everything in it, best effort. Not std::filesystem::remove_all:
// a pip libtorch exports its own build of it, which crashes when called
// from code compiled against another libstdc++.
inline void remove_tree(const std::filesystem::path& folder) {
  ::nftw(
      folder.c_str(), [](const char* path, const struct stat*, int, FTW*) { return ::remove(path), 0; },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace oobleck::executor
