#include "oobleck/common/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oobleck/common.h"

namespace oobleck {
namespace {

std::string system_reason() { return std::strerror(errno); }

// Writes every byte; false (errno set) otherwise.
bool write_all(int fd, std::string_view bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<std::size_t>(n);
  }
  return true;
}

// Writes every byte and flushes it to the disk; false (errno set) otherwise.
bool write_and_flush(int fd, std::string_view bytes) { return write_all(fd, bytes) && ::fsync(fd) == 0; }

}  // namespace

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path.string() + ": is a folder, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot read (" + system_reason() + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": read failed");
  return std::move(text).str();
}

namespace {

// A device, a pipe or a socket (/dev/null, /dev/stdout, a shell's process
// substitution): no file to replace, so the bytes go straight in. Renaming
// over it would put a regular file in the device's place.
void write_in_place(const std::filesystem::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path.string() + ": cannot write (" + system_reason() + ")");
  const bool written = write_all(fd, bytes);
  const std::string why = written ? "" : system_reason();
  ::close(fd);
  if (!written) throw InputError(path.string() + ": cannot write (" + why + ")");
}

}  // namespace

void write_file_atomically(const std::filesystem::path& given, std::string_view bytes, unsigned mode) {
  std::error_code ec;
  const auto status = std::filesystem::status(given, ec);  // through links
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
      !std::filesystem::is_directory(status)) {
    write_in_place(given, bytes);
    return;
  }
  // Through a link to a file, the file is replaced and the link kept.
  std::filesystem::path path = given;
  if (std::filesystem::is_symlink(given, ec)) {
    if (auto target = std::filesystem::weakly_canonical(given, ec); !ec) path = target;
  }
  const auto folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string name = ".";  // (appended, not "." + ...: GCC 12 warns falsely on that)
  name.append(path.filename().string()).append(".tmp").append(std::to_string(::getpid()));
  const auto temporary = folder / name;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) throw InputError(given.string() + ": cannot write (" + system_reason() + ")");
  const bool written = write_and_flush(fd, bytes);
  const std::string reason = written ? "" : system_reason();
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = written ? system_reason() : reason;
    ::unlink(temporary.c_str());
    throw InputError(given.string() + ": cannot write (" + why + ")");
  }
  sync_folder(folder);
}

void sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void remove_tree(const std::filesystem::path& folder) {
  ::nftw(
      folder.c_str(), [](const char* path, const struct stat*, int, FTW*) { return ::remove(path), 0; }, 16,
      FTW_DEPTH | FTW_PHYS);
}

void require_output_path(std::string_view flag, const std::string& path) {
  if (path.empty() || path == "-") return;
  const std::filesystem::path p(path);
  const auto parent = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(parent, ec)) {
    throw InputError(std::string(flag) + ": " + path + ": the folder " + parent.string() + " does not exist");
  }
  if (std::filesystem::is_directory(p, ec)) throw InputError(std::string(flag) + ": " + path + " is a folder");
}

}  // namespace oobleck
