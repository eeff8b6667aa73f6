#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "oobleck/planner.h"

namespace oobleck {

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path.string() + ": is a folder, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot read (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": read failed");
  return std::move(text).str();
}

void write_text_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string name = ".";
  name.append(path.filename().string()).append(".tmp").append(std::to_string(::getpid()));
  const auto temporary = parent / name;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path.string() + ": cannot write (" + std::strerror(errno) + ")");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw InputError(path.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw InputError(path.string() + ": cannot write (" + ec.message() + ")");
  }
}

}  // namespace oobleck
