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

}  // namespace oobleck
