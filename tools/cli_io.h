// Output helpers shared by the command-line programs.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

#include "oobleck/common.h"
#include "oobleck/common/files.h"

namespace oobleck::cli {

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
    return kExitFailure;
  }
}

// Writes an output to `path` (atomically), to stdout for "-", or nowhere
// when `path` is empty. True when it went to stdout: the human summary then
// stays out of the way.
inline bool emit(const std::string& path, std::string_view text) {
  if (path.empty()) return false;
  if (path == "-") {
    std::cout << text;
    return true;
  }
  write_file_atomically(path, text);
  return false;
}

}  // namespace oobleck::cli
