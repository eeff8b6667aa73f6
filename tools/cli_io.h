// Output helpers shared by the command-line programs.
#pragma once

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "oobleck/planner.h"

namespace oobleck::cli {

constexpr int kExitBadInput = 2;
constexpr int kExitNoPlan = 3;

// Parses the command line. Returns the status to exit with when parsing
// ends the program (help, version, a bad flag), nothing otherwise.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  return std::nullopt;
}

// Runs a command, turning errors into messages and exit statuses: 2 bad
// input, 3 no plan exists, 1 anything unexpected.
template <typename Command>
int run_reporting_errors(const char* program, Command&& command) {
  try {
    return command();
  } catch (const InputError& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const NoPlanError& e) {
    std::cerr << program << ": no plan: " << e.what() << "\n";
    return kExitNoPlan;
  } catch (const std::exception& e) {
    std::cerr << program << ": internal error: " << e.what() << "\n";
    return 1;
  }
}

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
