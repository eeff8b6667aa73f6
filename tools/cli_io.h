// Output helpers shared by the command-line programs.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace oobleck::cli {

// Writes to a temporary file beside `path`, then renames it into place, so a
// reader never sees a half-written file. Throws with a message naming `path`.
template <typename Error = std::runtime_error>
void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string name = ".";
  name.append(path.filename().string()).append(".tmp").append(std::to_string(::getpid()));
  const auto temporary = parent / name;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path.string() + ": cannot write (" + std::strerror(errno) + ")");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw Error(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(path.string() + ": cannot write (" + ec.message() + ")");
  }
}

}  // namespace oobleck::cli
