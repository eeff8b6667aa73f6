// A temporary folder for running the command-line programs as a user would:
// exit status, stdout and stderr, files written.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
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

  // Runs the program this folder was made for, or another one.
  Run run(const std::string& arguments) const { return run_program(program_, arguments); }
  Run run_program(const std::string& program, const std::string& arguments) const {
    const std::string command = program + " " + arguments + " > " + str("stdout") + " 2> " + str("stderr");
    const int raw = std::system(command.c_str());
    Run result;
    result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    result.out = read("stdout");
    result.err = read("stderr");
    return result;
  }

 private:
  std::string program_;
  std::filesystem::path dir_;
};

}  // namespace oobleck::test
