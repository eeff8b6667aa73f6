// Inputs that once crashed a parser (tests/fuzz_regressions/<target>/, found
// by the fuzz targets of fuzz/) must now parse or be refused with the
// documented error, nothing else.
#include <doctest/doctest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "parsers.h"

namespace {

namespace fs = std::filesystem;

const fs::path kRegressions = fs::path(OOBLECK_SOURCE_DIR) / "tests" / "fuzz_regressions";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> inputs_of(const fs::path& folder) {
  std::vector<fs::path> out;
  if (!fs::is_directory(folder)) return out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file() && entry.path().filename().string().front() != '.') out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void replay(std::string_view name) {
  const auto* target = oobleck::fuzz::find_parser_target(name);
  REQUIRE(target != nullptr);
  for (const auto& path : inputs_of(kRegressions / std::string(name))) {
    const std::string input = read_bytes(path);
    try {
      target->parse(input);
    } catch (const std::exception& e) {
      FAIL_CHECK(path.filename().string() << ": " << e.what());
    } catch (...) {
      FAIL_CHECK(path.filename().string() << ": an exception that is no std::exception");
    }
  }
}

}  // namespace

TEST_CASE("fuzz regressions: every folder names a parser") {
  if (!fs::is_directory(kRegressions)) return;
  for (const auto& entry : fs::directory_iterator(kRegressions)) {
    if (!entry.is_directory()) continue;
    CHECK_MESSAGE(oobleck::fuzz::find_parser_target(entry.path().filename().string()) != nullptr,
                  entry.path().filename().string() << " is not a parser of fuzz/parsers.cpp");
  }
}

TEST_CASE("fuzz regressions: profile") { replay("profile"); }
TEST_CASE("fuzz regressions: plan") { replay("plan"); }
TEST_CASE("fuzz regressions: trace_events") { replay("trace_events"); }
TEST_CASE("fuzz regressions: trace_counts") { replay("trace_counts"); }
TEST_CASE("fuzz regressions: scenario") { replay("scenario"); }
TEST_CASE("fuzz regressions: hostfile") { replay("hostfile"); }
TEST_CASE("fuzz regressions: injections") { replay("injections"); }
TEST_CASE("fuzz regressions: model_config") { replay("model_config"); }
TEST_CASE("fuzz regressions: hardware") { replay("hardware"); }
TEST_CASE("fuzz regressions: checkpoint_manifest") { replay("checkpoint_manifest"); }
TEST_CASE("fuzz regressions: master_state") { replay("master_state"); }
TEST_CASE("fuzz regressions: torchscript_manifest") { replay("torchscript_manifest"); }
