// The shared vocabulary: the event-line format of traces and injections,
// atomic outputs, the Chrome trace writer and the 1F1B order.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "oobleck/common.h"
#include "oobleck/common/chrome_trace.h"
#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/common/one_f_one_b.h"
#include "scratch.h"

namespace {

using namespace oobleck;

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  for_each_event_line(text, "f.csv", "when,action,node", [&](const EventLine& e) {
    out.push_back(std::to_string(e.line) + "|" + std::string(e.when) + "|" + std::string(e.action) + "|" +
                  std::string(e.node));
  });
  return out;
}

std::string error_of(std::string_view text) {
  try {
    (void)lines_of(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("event lines: CRLF, a byte order mark, comments, blanks and spaces around fields") {
  CHECK(lines_of("\xEF\xBB\xBF"
                 "0,add,a\r\n# a comment\n\n 5 , remove , b # why\nstep:3,hang,c") ==
        std::vector<std::string>{"1|0|add|a", "4|5|remove|b", "5|step:3|hang|c"});
  CHECK(lines_of("").empty());
  CHECK(lines_of("\n\r\n  \n").empty());
}

TEST_CASE("event lines: a bad line is named by origin and line, with what was expected") {
  CHECK(error_of("0,add,a\n0,add\n") == "f.csv:2: expected 3 comma-separated fields when,action,node, got 2");
  CHECK(error_of("0,add,a,b\n") == "f.csv:1: expected 3 comma-separated fields when,action,node, got 4");
  CHECK(error_of("0,add,\n") == "f.csv:1: empty node name, expected a name such as node1");
  CHECK(error_of("0,add,node 3\n").find("f.csv:1: node name \"node 3\" contains whitespace") == 0);
  CHECK(error_of("0,add,a/b\n").find("contains quotes or slashes") != std::string::npos);
  CHECK(error_of("0,add,\"x\"\n").find("contains quotes or slashes") != std::string::npos);
  CHECK(error_of(std::string("0,add,a\x01") + "\n").find("control character") != std::string::npos);
  // A megabyte-long name is quoted only in part.
  const std::string long_name(1 << 20, 'n');
  const std::string message = error_of("0,add," + long_name + "\n");
  CHECK(message.find("longer than 255 bytes") != std::string::npos);
  CHECK(message.size() < 200);
  CHECK(error_of("0,add," + std::string(255, 'n') + "\n").empty());
}

TEST_CASE("files: an atomic write replaces the file whole and leaves nothing behind when it cannot") {
  test::Scratch s("");
  const auto target = s.path("out.json");
  write_file_atomically(target, "first");
  write_file_atomically(target, "second, longer");
  CHECK(read_text_file(target) == "second, longer");
  const auto entries = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(s.path(""))) names.insert(e.path().filename());
    return names;
  };
  CHECK(entries() == std::set<std::string>{"out.json"});
  // Into a folder that does not exist, or onto a folder: an InputError
  // naming the path, and no file.
  CHECK_THROWS_WITH_AS(write_file_atomically(s.path("missing/out.json"), "x"),
                       doctest::Contains("missing/out.json: cannot write"), InputError);
  std::filesystem::create_directory(s.path("folder"));
  CHECK_THROWS_AS(write_file_atomically(s.path("folder"), "x"), InputError);
  CHECK(entries() == std::set<std::string>{"out.json", "folder"});
  CHECK_THROWS_WITH_AS((void)read_text_file(s.path("folder")), doctest::Contains("is a folder"), InputError);
  CHECK_THROWS_WITH_AS((void)read_text_file(s.path("none")), doctest::Contains("none: cannot read"), InputError);
}

TEST_CASE("files: an atomic write goes through links and into devices and pipes without replacing them") {
  namespace fs = std::filesystem;
  test::Scratch s("");
  // A link to a file: the file is replaced, the link stays a link.
  write_file_atomically(s.path("real.json"), "old");
  fs::create_symlink(s.path("real.json"), s.path("link.json"));
  write_file_atomically(s.path("link.json"), "new");
  CHECK(fs::is_symlink(s.path("link.json")));
  CHECK(read_text_file(s.path("real.json")) == "new");
  // A pipe: written in place, read at the other end, still a pipe.
  // (Its read end opened first, without waiting: the write cannot block.)
  REQUIRE(::mkfifo(s.str("pipe").c_str(), 0600) == 0);
  const int read_end = ::open(s.str("pipe").c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(read_end >= 0);
  write_file_atomically(s.path("pipe"), "through the pipe");
  char received[64] = {};
  CHECK(::read(read_end, received, sizeof received - 1) == 16);
  ::close(read_end);
  CHECK(std::string(received) == "through the pipe");
  CHECK(fs::is_fifo(s.path("pipe")));
  // A character device (a null device of our own, where we may make one).
  if (::mknod(s.str("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    write_file_atomically(s.path("null"), "gone");
    CHECK(fs::is_character_file(s.path("null")));
  } else {
    MESSAGE("no device node made here (not root): that part is skipped");
  }
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(s.path(""))) names.insert(e.path().filename());
  names.erase("null");
  CHECK(names == std::set<std::string>{"real.json", "link.json", "pipe"});
}

TEST_CASE("files: outputs are checked before any work starts") {
  test::Scratch s("");
  CHECK_NOTHROW(require_output_path("--json", ""));
  CHECK_NOTHROW(require_output_path("--json", "-"));
  CHECK_NOTHROW(require_output_path("--json", s.str("new.json")));
  CHECK_THROWS_WITH_AS(require_output_path("--json", s.str("no/such/x.json")), doctest::Contains("--json: "),
                       InputError);
  CHECK_THROWS_WITH_AS(require_output_path("--plot", s.str("")), doctest::Contains("is a folder"), InputError);
  std::filesystem::create_directories(s.path("tree/a/b"));
  write_file_atomically(s.path("tree/a/b/c.txt"), "c");
  remove_tree(s.path("tree"));
  CHECK(!std::filesystem::exists(s.path("tree")));
}

TEST_CASE("chrome trace: processes, threads and spans in the event format, times in microseconds") {
  ChromeTrace trace;
  trace.name_process(1, "pipeline 0");
  trace.sort_process(1, 1);
  trace.name_thread(1, 0, "stage 0");
  trace.add_span("F0", "compute", 1, 0, 1.5, 4.0, {{"microbatch", 0}});
  trace.add_span("optimizer", "communication", 1, 0, 4.0, 4.25);
  trace.add_span("activation 0", "communication", 1, 1000, 4.0, 4.5, {{"microbatch", 0}}, {{"link", "intra-node"}});
  const auto doc = nlohmann::json::parse(trace.to_json({{"iteration_ms", 4.25}, {"source", std::string("x")}}));
  CHECK(doc["displayTimeUnit"] == "ms");
  CHECK(doc["otherData"]["iteration_ms"] == 4.25);
  CHECK(doc["otherData"]["source"] == "x");
  const auto& events = doc["traceEvents"];
  REQUIRE(events.size() == 6);
  CHECK(events[0] == nlohmann::json::parse(R"({"name":"process_name","ph":"M","pid":1,"args":{"name":"pipeline 0"}})"));
  CHECK(events[1]["args"]["sort_index"] == 1);
  CHECK(events[2] ==
        nlohmann::json::parse(R"({"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"stage 0"}})"));
  CHECK(events[3] == nlohmann::json::parse(R"({"name":"F0","cat":"compute","ph":"X","ts":1500.0,"dur":2500.0,
                                              "pid":1,"tid":0,"args":{"microbatch":0.0}})"));
  CHECK(!events[4].contains("args"));
  CHECK(events[5]["args"] == nlohmann::json::parse(R"({"microbatch":0.0,"link":"intra-node"})"));
}

TEST_CASE("interleaved 1F1B: every chunk's microbatches forward in order, backward in order after their forward, any count") {
  for (int devices = 1; devices <= 4; ++devices) {
    for (int chunks = 1; chunks <= 3; ++chunks) {
      for (int microbatches = 1; microbatches <= 3 * devices; ++microbatches) {
        for (int rank = 0; rank < devices; ++rank) {
          CAPTURE(devices);
          CAPTURE(chunks);
          CAPTURE(microbatches);
          CAPTURE(rank);
          const auto order = interleaved_one_f_one_b(rank, devices, chunks, microbatches);
          REQUIRE(order.size() == 2 * static_cast<std::size_t>(microbatches * chunks));
          std::vector<std::vector<int>> forwards(chunks), backwards(chunks);
          for (const auto& pass : order) {
            REQUIRE(pass.chunk >= 0);
            REQUIRE(pass.chunk < chunks);
            auto& done = pass.forward ? forwards[pass.chunk] : backwards[pass.chunk];
            if (!pass.forward) {
              CHECK(std::count(forwards[pass.chunk].begin(), forwards[pass.chunk].end(), pass.microbatch) == 1);
            }
            done.push_back(pass.microbatch);
          }
          for (int c = 0; c < chunks; ++c) {
            std::vector<int> all(microbatches);
            for (int m = 0; m < microbatches; ++m) all[m] = m;
            CHECK(forwards[c] == all);
            CHECK(backwards[c] == all);
          }
          if (microbatches % devices != 0) {
            // The next multiple's order without the missing microbatches.
            std::vector<PipelinePass> padded;
            for (const auto& p : interleaved_one_f_one_b(rank, devices, chunks, (microbatches / devices + 1) * devices)) {
              if (p.microbatch < microbatches) padded.push_back(p);
            }
            CHECK(order == padded);
            continue;
          }
          // Warm-up: Megatron's count of forwards before the first backward.
          const auto first_backward = std::find_if(order.begin(), order.end(), [](auto& p) { return !p.forward; });
          const int warmup = microbatches == devices ? microbatches * chunks
                                                     : std::min(microbatches * chunks,
                                                                (devices - rank - 1) * 2 + (chunks - 1) * devices);
          // (after the warm-up, each turn runs its forward first)
          CHECK(first_backward - order.begin() == (warmup == microbatches * chunks ? warmup : warmup + 1));
        }
      }
    }
  }
}

TEST_CASE("1F1B: every microbatch forward then backward, warm-up S-s-1, at most min(M, S-s) in flight") {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int microbatches = 1; microbatches <= 9; ++microbatches) {
      for (int stage = 0; stage < stages; ++stage) {
        CAPTURE(stages);
        CAPTURE(microbatches);
        CAPTURE(stage);
        const auto order = one_f_one_b(stage, stages, microbatches);
        REQUIRE(order.size() == 2 * static_cast<std::size_t>(microbatches));
        std::vector<int> forwards, backwards;
        int in_flight = 0, most = 0;
        for (const auto& pass : order) {
          (pass.forward ? forwards : backwards).push_back(pass.microbatch);
          in_flight += pass.forward ? 1 : -1;
          most = std::max(most, in_flight);
          // A backward only after its own forward.
          if (!pass.forward) CHECK(std::count(forwards.begin(), forwards.end(), pass.microbatch) == 1);
        }
        // Both in microbatch order.
        CHECK(std::is_sorted(forwards.begin(), forwards.end()));
        CHECK(std::is_sorted(backwards.begin(), backwards.end()));
        CHECK(most == std::min(microbatches, stages - stage));
        // Warm-up: the first backward comes after min(S - s, M) forwards.
        const auto first_backward = std::find_if(order.begin(), order.end(), [](auto& p) { return !p.forward; });
        CHECK(first_backward - order.begin() == std::min(stages - stage, microbatches));
      }
    }
  }
  CHECK(one_f_one_b(0, 2, 3) ==
        std::vector<PipelinePass>{{true, 0}, {true, 1}, {false, 0}, {true, 2}, {false, 1}, {false, 2}});
}
