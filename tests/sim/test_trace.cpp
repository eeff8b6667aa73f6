#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "oobleck/common/files.h"
#include "oobleck/planner.h"
#include "oobleck/sim/trace.h"
#include "trace_checks.h"

using namespace oobleck;
using namespace oobleck::sim;
using namespace oobleck::sim::trace_checks;

TEST_CASE("trace: every bundled event CSV parses with its known counts") {
  struct Known {
    const char* file;
    int events, adds, removes, peak, final_nodes;
    Milliseconds duration_ms;
  };
  const Known known[] = {
      {"10m.csv", 45, 30, 15, 30, 15, 9'018'000},
      {"1h.csv", 45, 30, 15, 30, 15, 54'000'000},
      {"30m.csv", 45, 30, 15, 30, 15, 27'000'000},
      {"3h.csv", 45, 30, 15, 30, 15, 162'000'000},
      {"5m.csv", 45, 30, 15, 30, 15, 4'482'000},
      {"6h.csv", 45, 30, 15, 30, 15, 324'000'000},
      {"g4dn-trace.csv", 153, 79, 74, 24, 5, 38'760'000},
      {"p3-trace.csv", 344, 177, 167, 32, 10, 40'920'000},
      {"scale_gcp-trace.csv", 161, 89, 72, 30, 17, 38'760'000},
      {"scale_p3-trace.csv", 299, 157, 142, 30, 15, 40'920'000},
  };
  for (const Known& k : known) {
    CAPTURE(k.file);
    const Trace trace = load_trace(trace_path(k.file));
    CHECK(trace.origin == trace_path(k.file));
    CHECK(trace.events.size() == static_cast<std::size_t>(k.events));
    const Tally tally = replay(trace);
    CHECK(tally.adds == k.adds);
    CHECK(tally.removes == k.removes);
    CHECK(tally.peak == k.peak);
    CHECK(trace.peak_nodes() == k.peak);
    CHECK(tally.final_nodes == k.final_nodes);
    CHECK(trace.duration_ms() == k.duration_ms);
    // parse_trace on the text gives the same as load_trace.
    CHECK(parse_trace(read_text_file(trace_path(k.file)), trace_path(k.file)).events == trace.events);
  }

  const Trace p3 = load_trace(trace_path("p3-trace.csv"));  // CRLF on disk
  CHECK(p3.events.front() == TraceEvent{0, NodeChange::add, "node1"});
  CHECK(p3.events.back() == TraceEvent{40'920'000, NodeChange::remove, "node172"});
}

TEST_CASE("trace: bundled gcloud count series load as events") {
  SUBCASE("a100: 268 rows, time order") {
    const Trace trace = load_trace(trace_path("gcloud-a100x1-east1b.txt"));
    CHECK(trace.origin == trace_path("gcloud-a100x1-east1b.txt"));
    const Tally tally = replay(trace);
    CHECK(tally.adds == 218);  // 55 at the start, then every increase
    CHECK(tally.removes == 154);
    CHECK(trace.events.size() == 372);
    CHECK(trace.peak_nodes() == 64);
    CHECK(tally.final_nodes == 64);
    CHECK(trace.duration_ms() == 95'580'000);  // line 266, 2021-12-12 13:44:30
    for (int i = 0; i < 55; ++i) CHECK(trace.events[static_cast<std::size_t>(i)].time_ms == 0);
    // Line 4 (11:15:50, 55 -> 54): the most recently added node leaves.
    CHECK(trace.events[55] == TraceEvent{260'000, NodeChange::remove, "node55"});
  }
  SUBCASE("v100: 1477 rows, some going back in time") {
    const Trace trace = load_trace(trace_path("gcloud-v100x1-east1c.txt"));
    const Tally tally = replay(trace);
    CHECK(tally.adds == 598);
    CHECK(tally.removes == 518);
    CHECK(trace.peak_nodes() == 80);
    CHECK(tally.final_nodes == 80);
    // Changes at their own rows' times: line 4 (13:08:45, 70) is a minute
    // after line 1, although line 3 says 13:09:45.
    CHECK(trace.events[80] == TraceEvent{60'000, NodeChange::remove, "node80"});
    CHECK(trace.events[89] == TraceEvent{60'000, NodeChange::remove, "node71"});
    CHECK(trace.events[90] == TraceEvent{120'000, NodeChange::remove, "node70"});  // line 7
    CHECK(trace.duration_ms() == 80'560'000);                                      // line 1366, the last change
  }
  SUBCASE("names are never reused") {
    for (const char* file : {"gcloud-a100x1-east1b.txt", "gcloud-v100x1-east1c.txt"}) {
      const Trace trace = load_trace(trace_path(file));
      std::set<std::string> added;
      for (const auto& e : trace.events) {
        if (e.change == NodeChange::add) CHECK(added.insert(e.node).second);
      }
      CHECK(added.count("node" + std::to_string(added.size())) == 1);  // node1..nodeN
    }
  }
}

TEST_CASE("trace: count series adds new names and removes the most recent first") {
  const Trace trace = parse_count_series(
      "2021-12-31, 23:59:50, 2\n"
      "2021-12-31, 23:59:55, 2\n"  // no change: no event
      "2022-01-01, 00:00:00, 4\n"  // over a year end: 10 s after the first row
      "2022-01-01, 00:00:30, 1\n"
      "\n"
      "  2022-01-01 ,00:01:00,  3  \r\n"
      "2022-01-01, 00:02:00, 3",
      "counts.txt");
  const std::vector<TraceEvent> expected = {
      {0, NodeChange::add, "node1"},         {0, NodeChange::add, "node2"},
      {10'000, NodeChange::add, "node3"},    {10'000, NodeChange::add, "node4"},
      {40'000, NodeChange::remove, "node4"}, {40'000, NodeChange::remove, "node3"},
      {40'000, NodeChange::remove, "node2"}, {70'000, NodeChange::add, "node5"},
      {70'000, NodeChange::add, "node6"},
  };
  CHECK(trace.events == expected);
  CHECK(trace.origin == "counts.txt");
  CHECK(trace.peak_nodes() == 4);

  SUBCASE("leap days and month ends") {
    const Trace leap = parse_count_series("2024-02-28, 12:00:00, 0\n2024-03-01, 12:00:00, 1\n", "x");
    REQUIRE(leap.events.size() == 1);
    CHECK(leap.events[0].time_ms == 2 * kDay);
  }
  SUBCASE("rows back in time: a change takes its row's time, never before the previous change") {
    const Trace back = parse_count_series(
        "2021-12-10, 13:00:00, 3\n"
        "2021-12-10, 13:02:00, 3\n"
        "2021-12-10, 13:01:00, 2\n"   // a change at its own time, 60 s
        "2021-12-10, 13:00:30, 1\n"   // earlier than the change before: at 60 s too
        "2021-12-10, 12:00:00, 1\n"   // no change: ignored although before the first row
        "2021-12-10, 12:59:00, 2\n",  // before the first row: at the last change's 60 s
        "x");
    const std::vector<TraceEvent> want = {
        {0, NodeChange::add, "node1"},         {0, NodeChange::add, "node2"},
        {0, NodeChange::add, "node3"},         {60'000, NodeChange::remove, "node3"},
        {60'000, NodeChange::remove, "node2"}, {60'000, NodeChange::add, "node4"},
    };
    CHECK(back.events == want);
  }
  SUBCASE("counts starting at zero") {
    const Trace zero = parse_count_series("2021-12-10, 13:00:00, 0\n2021-12-10, 13:00:01, 1\n", "x");
    CHECK(zero.events == std::vector<TraceEvent>{{1000, NodeChange::add, "node1"}});
  }
}

TEST_CASE("trace: count series errors name origin, line and what was expected") {
  struct Bad {
    const char* text;
    const char* message;
  };
  const Bad bad[] = {
      {"2021-12-10, 13:00:00, 3\n2021-12-10, 13:00:00\n",
       "c.txt:2: expected 3 comma-separated fields date, time, instance_count"},
      {"2021-12-10, 13:00:00, 3\n\n2021-13-10, 13:00:00, 3\n",
       "c.txt:3: expected a date YYYY-MM-DD, got \"2021-13-10\""},
      {"2021-02-29, 13:00:00, 3\n", "c.txt:1: expected a date YYYY-MM-DD, got \"2021-02-29\""},
      {"21-12-10, 13:00:00, 3\n", "c.txt:1: expected a date YYYY-MM-DD"},
      {"2021-12-10, 24:00:00, 3\n", "c.txt:1: expected a time of day HH:MM:SS, got \"24:00:00\""},
      {"2021-12-10, 13:00, 3\n", "c.txt:1: expected a time of day HH:MM:SS"},
      {"2021-12-10, 13:00:00, -3\n", "c.txt:1: expected instance_count, a whole number from 0"},
      {"2021-12-10, 13:00:00, 3.5\n", "c.txt:1: expected instance_count"},
      {"2021-12-10, 13:00:00, \n", "c.txt:1: expected instance_count"},
      {"", "c.txt: no rows"},
      {"\n \r\n", "c.txt: no rows"},
      {"2021-12-10, 13:00:00, 0\n2021-12-10, 13:01:00, 0\n", "c.txt: no events"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.text);
    CHECK_THROWS_WITH_AS((void)parse_count_series(b.text, "c.txt"), doctest::Contains(b.message), InputError);
  }
}

TEST_CASE("trace: CRLF, blank lines, spaces and a missing final newline read like plain LF") {
  const std::string lf = "0,add,a\n0,add,b\n1500,remove,a\n2000,add,a\n";
  const Trace plain = parse_trace(lf, "lf");
  const std::vector<TraceEvent> expected = {
      {0, NodeChange::add, "a"},
      {0, NodeChange::add, "b"},
      {1500, NodeChange::remove, "a"},
      {2000, NodeChange::add, "a"},  // a removed node may come back under its name
  };
  CHECK(plain.events == expected);
  CHECK(plain.origin == "lf");
  CHECK(plain.peak_nodes() == 2);
  CHECK(plain.duration_ms() == 2000);

  const char* variants[] = {
      "0,add,a\r\n0,add,b\r\n1500,remove,a\r\n2000,add,a\r\n",
      "0,add,a\r\n0,add,b\r\n1500,remove,a\r\n2000,add,a",
      "0,add,a\n0,add,b\n1500,remove,a\n2000,add,a",
      "\n\n0,add,a\n\n0,add,b\n   \n1500,remove,a\n\t\n2000,add,a\n\n",
      " 0 , add ,a\n0,\tadd\t, b \n1500 ,remove, a\r\n  2000,add,a  \r\n",
      "0.0,add,a\n0,add,b\n1500.000,remove,a\n2000.,add,a\n",
      "\357\273\2770,add,a\n0,add,b\n1500,remove,a\n2000,add,a\n",  // a UTF-8 byte-order mark first
  };
  for (const char* text : variants) {
    CAPTURE(text);
    CHECK(parse_trace(text, "variant").events == expected);
  }

  // The bundled p3 trace is CRLF; its LF form reads the same.
  std::string crlf = read_text_file(trace_path("p3-trace.csv"));
  REQUIRE(crlf.find("\r\n") != std::string::npos);
  std::string unix_text;
  for (char c : crlf) {
    if (c != '\r') unix_text += c;
  }
  CHECK(parse_trace(unix_text, "p3").events == parse_trace(crlf, "p3").events);
}

TEST_CASE("trace: fractional times and node names") {
  const Trace trace = parse_trace("0.25,add,gpu-host_01.example:7\n600000.5,remove,gpu-host_01.example:7\n", "f");
  REQUIRE(trace.events.size() == 2);
  CHECK(trace.events[0].time_ms == 0.25);
  CHECK(trace.events[1].time_ms == 600000.5);
  CHECK(trace.events[0].node == "gpu-host_01.example:7");
  // Equal times keep file order.
  const Trace same = parse_trace("5,add,x\n5,remove,x\n5,add,x\n", "s");
  CHECK(same.events[1].change == NodeChange::remove);
  CHECK(same.events[2].change == NodeChange::add);
}

TEST_CASE("trace: malformed event CSV names origin, line and what was expected") {
  struct Bad {
    std::string text;
    std::string message;
  };
  const std::string ok = "0,add,node1\n0,add,node2\n";  // lines 1-2
  const Bad bad[] = {
      {ok + "5,remove\n", "t.csv:3: expected 3 comma-separated fields time_ms,add|remove|slow,node_name, got 2"},
      {ok + "5,remove,node1,x\n", "t.csv:3: expected 3 comma-separated fields time_ms,add|remove|slow,node_name, got 4"},
      {ok + "\n\n5\r\n", "t.csv:5: expected 3 comma-separated fields"},
      {ok + "5,delete,node1\n", "t.csv:3: expected add, remove or slow, got \"delete\""},
      {ok + "5,ADD,node3\n", "t.csv:3: expected add, remove or slow, got \"ADD\""},
      {ok + "5,,node3\n", "t.csv:3: expected add, remove or slow, got \"\""},
      {ok + "5,slow,node1\n", "t.csv:3: slow takes a 4th field, the node's speed factor: a number in [0.01, 1] such as "
                              "0.4 (1 ends the slowdown), got none"},
      {ok + "5,slow,node1,1.5\n", "t.csv:3: slow takes a 4th field, the node's speed factor"},
      {ok + "5,slow,node1,0\n", "t.csv:3: slow takes a 4th field, the node's speed factor"},
      {ok + "5,slow,node1,x\n", "t.csv:3: slow takes a 4th field, the node's speed factor: a number in [0.01, 1] such as "
                                "0.4 (1 ends the slowdown), got \"x\""},
      {ok + "5,slow,node3,0.5\n", "t.csv:3: slows node \"node3\", which is not present; expected a node added earlier"},
      {ok + "5,slow,node1,0.5,1\n", "t.csv:3: expected 3 comma-separated fields time_ms,add|remove|slow,node_name, and a "
                                    "4th for slow (its speed factor), got 5"},
      {ok + "-5,add,node3\n",
       "t.csv:3: expected time_ms, a non-negative number of milliseconds such as 600000, got \"-5\""},
      {ok + "abc,add,node3\n", "t.csv:3: expected time_ms, a non-negative number"},
      {ok + ",add,node3\n", "t.csv:3: expected time_ms"},
      {ok + "1e3,add,node3\n", "t.csv:3: expected time_ms"},
      {ok + "1.2.3,add,node3\n", "t.csv:3: expected time_ms"},
      {ok + "nan,add,node3\n", "t.csv:3: expected time_ms"},
      {ok + "inf,add,node3\n", "t.csv:3: expected time_ms"},
      {ok + std::string(400, '9') + ",add,node3\n", "t.csv:3: expected time_ms"},
      {ok + "5,add,\n", "t.csv:3: empty node name, expected a name such as node1"},
      {ok + "5,add,  \r\n", "t.csv:3: empty node name"},
      {ok + "5,add,node 3\n", "t.csv:3: node name \"node 3\" contains whitespace"},
      {ok + "100,add,node3\n50,remove,node1\n",
       "t.csv:4: time 50 ms is before 100 ms of line 3: events must be in time order"},
      {ok + "0,add,node1\n", "t.csv:3: adds node \"node1\", already present since line 1"},
      {ok + "5,remove,node9\n", "t.csv:3: removes node \"node9\", which is not present"},
      {ok + "5,remove,node1\n6,remove,node1\n", "t.csv:4: removes node \"node1\", which is not present"},
      {"", "t.csv: no events, expected lines time_ms,add|remove|slow,node_name"},
      {"\r\n\n  \n", "t.csv: no events"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.text);
    CHECK_THROWS_WITH_AS((void)parse_trace(b.text, "t.csv"), doctest::Contains(b.message.c_str()), InputError);
  }
  // A very long bad field is shortened in the message.
  const std::string long_action(1000, 'x');
  const std::string m = message_of([&] { (void)parse_trace("0," + long_action + ",n\n", "t.csv"); });
  CHECK(m.find("t.csv:1: expected add, remove or slow") == 0);
  CHECK(m.size() < 200);
}

TEST_CASE("trace: load_trace picks the format by content and names unreadable paths") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("oobleck_test_trace_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return path;
  };
  // Extension does not matter; content does.
  const std::string counts = write("counts.csv", "\n2021-12-10, 13:00:00, 2\n2021-12-10, 13:00:10, 1\n");
  CHECK(load_trace(counts).events == std::vector<TraceEvent>{{0, NodeChange::add, "node1"},
                                                             {0, NodeChange::add, "node2"},
                                                             {10'000, NodeChange::remove, "node2"}});
  const std::string events = write("events.txt", "0,add,n1\r\n");
  CHECK(load_trace(events).events == std::vector<TraceEvent>{{0, NodeChange::add, "n1"}});
  // A broken count series reports count-series errors with the path.
  const std::string broken = write("broken.txt", "2021-12-10, 13:00:00, 2\n2021-12-10, 13:00:10, x\n");
  CHECK_THROWS_WITH_AS((void)load_trace(broken), doctest::Contains((broken + ":2: expected instance_count").c_str()),
                       InputError);
  const std::string empty = write("empty.csv", "");
  CHECK_THROWS_WITH_AS((void)load_trace(empty), doctest::Contains((empty + ": no events").c_str()), InputError);
  const std::string missing = (dir / "missing.csv").string();
  CHECK_THROWS_WITH_AS((void)load_trace(missing), doctest::Contains(missing.c_str()), InputError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("trace: trace_to_csv round-trips through parse_trace") {
  const Trace p3 = load_trace(trace_path("p3-trace.csv"));
  const std::string csv = trace_to_csv(p3);
  CHECK(csv.find('\r') == std::string::npos);
  CHECK(csv.substr(0, 24) == "0,add,node1\n0,add,node2\n");
  CHECK(parse_trace(csv, "again").events == p3.events);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 344);

  // Non-integral and large times print as shortest round-trip decimals.
  Trace odd;
  odd.events = {{0.1, NodeChange::add, "a"},
                {1.0 / 3.0, NodeChange::add, "b"},
                {600000.5, NodeChange::remove, "a"},
                {1e-7, NodeChange::remove, "b"},  // out of order: trace_to_csv does not judge
                {4.5e15, NodeChange::add, "a"}};
  const std::string odd_csv = trace_to_csv(odd);
  CHECK(odd_csv.find("0.1,add,a\n") == 0);
  CHECK(odd_csv.find("600000.5,remove,a\n") != std::string::npos);
  CHECK(odd_csv.find("0.0000001,remove,b\n") != std::string::npos);
  CHECK(odd_csv.find("4500000000000000,add,a\n") != std::string::npos);
  CHECK(odd_csv.find("e-") == std::string::npos);  // never in exponent form
  CHECK(odd_csv.find("e+") == std::string::npos);
  // In order (without the out-of-order line) it parses back bit for bit.
  odd.events.erase(odd.events.begin() + 3);
  CHECK(parse_trace(trace_to_csv(odd), "odd").events == odd.events);

  for (const Trace& generated :
       {fixed_interval_trace(30, 601'200, 15, 7), poisson_trace(64, 0.01, 3 * kHour, 30 * kDay, 7),
        spot_trace(16, 0.5, 0.2, 2 * kDay, 7)}) {
    CHECK(parse_trace(trace_to_csv(generated), "generated").events == generated.events);
  }
  CHECK(trace_to_csv(Trace{}).empty());
}

TEST_CASE("trace: peak_nodes") {
  CHECK(Trace{}.peak_nodes() == 0);
  CHECK(Trace{}.duration_ms() == 0);
  const Trace t = parse_trace("0,add,a\n1,add,b\n2,remove,a\n3,add,c\n4,add,d\n5,remove,b\n6,remove,c\n", "p");
  CHECK(t.peak_nodes() == 3);
}

TEST_CASE("trace: parse_duration") {
  CHECK(parse_duration("90m", "--d") == 90 * 60'000);
  CHECK(parse_duration("6h", "--d") == 6 * kHour);
  CHECK(parse_duration("54d", "--d") == 54 * kDay);
  CHECK(parse_duration("30s", "--d") == 30'000);
  CHECK(parse_duration("250ms", "--d") == 250);
  CHECK(parse_duration("1.5h", "--d") == 1.5 * kHour);
  CHECK(parse_duration(".5s", "--d") == 500);
  CHECK(parse_duration(" 2d ", "--d") == 2 * kDay);
  CHECK(parse_duration("0", "--mttr") == 0);  // zero needs no unit
  CHECK(parse_duration("0h", "--mttr") == 0);
  CHECK(parse_duration("601200ms", "--d") == 601'200);

  for (const char* bad : {"", "90", "5x", "h", "-5m", "5 m", "5M", "1e3s", "1..5h", "5mm", "inf", "nan", "5m5s"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(
        (void)parse_duration(bad, "--interval"),
        doctest::Contains(
            (std::string("--interval: expected a duration such as 90m, 6h or 54d, got \"") + bad + "\"").c_str()),
        InputError);
  }
}

TEST_CASE("trace: inputs beyond the limits are refused, naming the file, the line and the limit") {
  // The limits in force (README, "Replaying a trace").
  CHECK(kTraceLimits.events == 10'000'000);
  CHECK(kTraceLimits.present_nodes == 1'000'000);
  CHECK(kTraceLimits.file_bytes == std::uintmax_t{512} << 20);
  // The same checks with small limits, so the inputs stay small.
  const TraceLimits small{3, 2, 64};
  CHECK(parse_trace("0,add,a\n1,add,b\n2,remove,a\n", "t.csv", small).events.size() == 3);
  CHECK(message_of([&] { (void)parse_trace("0,add,a\n1,add,b\n2,remove,a\n3,add,c\n", "t.csv", small); }) ==
        "t.csv:4: more than 3 events, the most a trace may have; expected a shorter trace");
  CHECK(message_of([&] { (void)parse_trace("0,add,a\n0,add,b\n0,add,c\n", "t.csv", small); }) ==
        "t.csv:3: adds node \"c\" while 2 nodes are present, the most a trace may have at once; expected a remove "
        "first");
  // A count series is refused at the row that would pass the limit, before
  // its events are made.
  const std::string rows = "2021-12-10, 13:00:00, 2\n2021-12-10, 13:01:00, 1\n2021-12-10, 13:02:00, 2\n";
  CHECK(message_of([&] { (void)parse_count_series(rows, "c.txt", small); }) ==
        "c.txt:3: more than 3 events, the most a trace may have; expected a shorter trace");
  CHECK(message_of([&] { (void)parse_count_series("2021-12-10, 13:00:00, 3\n", "c.txt", small); }) ==
        "c.txt:1: expected instance_count, a whole number from 0 to 2, got \"3\"");
  CHECK(message_of([] { (void)parse_count_series("2021-12-10, 13:00:00, 1000001\n", "c.txt"); }) ==
        "c.txt:1: expected instance_count, a whole number from 0 to 1000000, got \"1000001\"");
  // A file over the size limit is refused before it is read.
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("oobleck_test_limits_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
          .string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  const std::string text(100, '#');
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  CHECK(message_of([&] { (void)load_trace(path, small); }) ==
        path + ": 100 bytes, more than the 64 a trace file may have; expected a smaller file");
  std::filesystem::remove(path);
  // Generators keep the node limit.
  for (const auto& generate : std::vector<std::function<void()>>{
           [] { (void)fixed_interval_trace(1'000'001, kHour, 0, 1); },
           [] { (void)poisson_trace(1'000'001, 0, 0, kHour, 1); },
           [] { (void)spot_trace(1'000'001, 0.5, 0.5, 0, 1); }}) {
    CHECK(message_of(generate).find(": nodes must be at most 1000000, the most a trace may have present at once, "
                                    "got 1000001") != std::string::npos);
  }
}

TEST_CASE("trace: slow events parse, keep the node count, and round-trip through the CSV") {
  const std::string text = "0,add,a\n0,add,b\n100,slow,a,0.4\n200,slow,a,1\n250,slow,b,0.25\n300,remove,b\n";
  const Trace t = parse_trace(text, "s.csv");
  REQUIRE(t.events.size() == 6);
  CHECK(t.events[2].change == NodeChange::slow);
  CHECK(t.events[2].factor == 0.4);
  CHECK(t.events[3].factor == 1);
  CHECK(t.peak_nodes() == 2);
  CHECK(t.has_stragglers());
  CHECK_FALSE(parse_trace("0,add,a\n5,remove,a\n", "p.csv").has_stragglers());
  CHECK(trace_to_csv(t) == text);
  CHECK(parse_trace(trace_to_csv(t), "again").events == t.events);
}
