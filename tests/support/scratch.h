// A temporary folder for running the command-line programs as a user would:
// exit status, stdout and stderr, files written.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "oobleck/common/files.h"

namespace oobleck::test {

struct Run {
  int status = -1;
  std::string out, err;
};

class Scratch {
 public:
  explicit Scratch(std::string program) : program_(std::move(program)) {
    std::string pattern = (std::filesystem::temp_directory_path() / "oobleck-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
  }
  ~Scratch() { remove_tree(dir_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  [[nodiscard]] std::filesystem::path path(const std::string& name) const { return dir_ / name; }
  [[nodiscard]] std::string str(const std::string& name) const { return path(name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  [[nodiscard]] std::string read(const std::string& name) const {
    std::stringstream s;
    s << std::ifstream(path(name)).rdbuf();
    return s.str();
  }

  // Runs the program this folder was made for, or another one. Every
  // process it starts carries this folder in OOBLECK_TEST_TAG, so that
  // leftovers can be found (processes_left).
  Run run(const std::string& arguments) const { return run_program(program_, arguments); }
  Run run_program(const std::string& program, const std::string& arguments) const {
    const std::string command = "OOBLECK_TEST_TAG=" + dir_.string() + " " + program + " " + arguments + " > " +
                                str("stdout") + " 2> " + str("stderr");
    const int raw = std::system(command.c_str());
    Run result;
    result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    result.out = read("stdout");
    result.err = read("stderr");
    return result;
  }

  // Processes still alive that this folder's runs started.
  [[nodiscard]] int processes_left() const {
    const std::string tag = "OOBLECK_TEST_TAG=" + dir_.string();
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string pid = entry.path().filename().string();
      if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
      std::ifstream in(entry.path() / "environ", std::ios::binary);
      std::string environment((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (std::size_t at = 0; (at = environment.find(tag, at)) != std::string::npos; at += tag.size()) {
        const bool whole = (at == 0 || environment[at - 1] == '\0') &&
                           (at + tag.size() == environment.size() || environment[at + tag.size()] == '\0');
        if (whole) {
          ++count;
          break;
        }
      }
    }
    return count;
  }

 private:
  std::string program_;
  std::filesystem::path dir_;
};

}  // namespace oobleck::test
