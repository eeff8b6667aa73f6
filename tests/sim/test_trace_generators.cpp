// The trace generators: the Oobleck artifact's fixed intervals, Poisson
// failures with repairs, and spot availability.
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

TEST_CASE("trace: fixed_interval_trace") {
  SUBCASE("the shape of the Oobleck artifact's synthetic traces") {
    struct Shape {
      const char* file;
      Milliseconds interval_ms;
    };
    for (const Shape& s : {Shape{"5m.csv", 298'800}, Shape{"10m.csv", 601'200}, Shape{"30m.csv", 1'800'000},
                           Shape{"1h.csv", kHour}, Shape{"3h.csv", 3 * kHour}, Shape{"6h.csv", 6 * kHour}}) {
      CAPTURE(s.file);
      const Trace bundled = load_trace(trace_path(s.file));
      const Trace generated = fixed_interval_trace(30, s.interval_ms, 15, 1);
      CHECK(times_of(generated) == times_of(bundled));
      for (std::size_t i = 0; i < bundled.events.size(); ++i) {
        CHECK(generated.events[i].change == bundled.events[i].change);
      }
    }
  }
  SUBCASE("exactly nodes - min_nodes removals, one per interval") {
    const Trace t = fixed_interval_trace(10, 1500, 3, 42);
    const Tally tally = replay(t);
    CHECK(tally.adds == 10);
    CHECK(tally.removes == 7);
    CHECK(tally.final_nodes == 3);
    for (int i = 0; i < 10; ++i) {
      CHECK(t.events[static_cast<std::size_t>(i)] == TraceEvent{0, NodeChange::add, "node" + std::to_string(i + 1)});
    }
    for (int k = 1; k <= 7; ++k) {
      const TraceEvent& e = t.events[static_cast<std::size_t>(9 + k)];
      CHECK(e.change == NodeChange::remove);
      CHECK(e.time_ms == 1500.0 * k);
    }
    CHECK(t.duration_ms() == 7 * 1500);
  }
  SUBCASE("down to zero, or nothing removed") {
    CHECK(replay(fixed_interval_trace(5, 10, 0, 1)).final_nodes == 0);
    const Trace none = fixed_interval_trace(5, 10, 5, 1);
    CHECK(none.events.size() == 5);
    CHECK(none.duration_ms() == 0);
    CHECK(fixed_interval_trace(1, 10, 0, 1).events.size() == 2);
  }
  SUBCASE("fractional intervals round to whole milliseconds") {
    const Trace t = fixed_interval_trace(4, 0.6, 0, 3);
    CHECK(times_of(t) == std::vector<Milliseconds>{0, 0, 0, 0, 1, 1, 2, 2});  // 0.6, 1.2, 1.8, 2.4
    replay(t);
  }
  SUBCASE("seeded: same seed, same trace; another seed, another") {
    CHECK(fixed_interval_trace(30, kHour, 15, 9).events == fixed_interval_trace(30, kHour, 15, 9).events);
    CHECK(fixed_interval_trace(30, kHour, 15, 9).events != fixed_interval_trace(30, kHour, 15, 10).events);
  }
  SUBCASE("the removed node is uniform among those present") {
    std::map<std::string, int> first_removed;
    for (std::uint64_t seed = 0; seed < 400; ++seed)
      ++first_removed[fixed_interval_trace(4, 1, 0, seed).events[4].node];
    CHECK(first_removed.size() == 4);
    for (const auto& node_times : first_removed) {
      const std::string& node = node_times.first;
      const int times = node_times.second;
      CAPTURE(node);
      CHECK(times > 60);  // expected 100, standard deviation under 9
      CHECK(times < 140);
    }
  }
  SUBCASE("arguments are checked") {
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(0, 10, 0, 1), doctest::Contains("nodes must be at least 1, got 0"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, 10, 6, 1),
                         doctest::Contains("min_nodes must be between 0 and nodes (5), got 6"), InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, 10, -1, 1), doctest::Contains("min_nodes"), InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, 0, 1, 1), doctest::Contains("interval_ms must be positive"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, -3, 1, 1), doctest::Contains("interval_ms"), InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, std::nan(""), 1, 1), doctest::Contains("interval_ms"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)fixed_interval_trace(5, 1e300, 1, 1), doctest::Contains("interval_ms"), InputError);
  }
}

TEST_CASE("trace: poisson_trace") {
  const double llama3_per_node_hour = kLlama3FailuresPerGpuHour * 8;
  const Milliseconds days54 = 54 * kDay;

  SUBCASE("Llama 3 rate on 2048 nodes for 54 days: about 419 failures, quickly") {
    const auto start = std::chrono::steady_clock::now();
    const Trace t = poisson_trace(2048, llama3_per_node_hour, 3 * kHour, days54, 2024);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < 2.0);  // milliseconds in practice; only a quadratic algorithm gets near this
    const Tally tally = replay(t);
    // Expected: 2048 nodes * 1296 h / (MTBF + MTTR) with MTBF = 1 / rate =
    // 6334.7 h, so 419 * 6334.7 / 6337.7 = 418.8; Poisson-like, sd about 20.5.
    CHECK(tally.removes > 419 - 6 * 21);
    CHECK(tally.removes < 419 + 6 * 21);
    // Every failed node is back 3 h later on average, so few are still down.
    CHECK(tally.adds - 2048 <= tally.removes);
    CHECK(tally.removes - (tally.adds - 2048) < 20);
    CHECK(tally.peak == 2048);
    CHECK(t.duration_ms() <= days54);
    CHECK(std::all_of(t.events.begin(), t.events.begin() + 2048,
                      [](const TraceEvent& e) { return e.time_ms == 0 && e.change == NodeChange::add; }));
    CHECK(std::all_of(t.events.begin(), t.events.end(),
                      [](const TraceEvent& e) { return e.time_ms == std::round(e.time_ms); }));
  }
  SUBCASE("never repaired: each node fails at most once") {
    const Trace t = poisson_trace(2048, llama3_per_node_hour, 0, days54, 5);
    const Tally tally = replay(t);
    CHECK(tally.adds == 2048);
    // Binomial(2048, 1 - exp(-419 / 2048)): mean 378.9, sd 17.6.
    CHECK(tally.removes > 379 - 6 * 18);
    CHECK(tally.removes < 379 + 6 * 18);
  }
  SUBCASE("a huge rate without repair: every node fails almost at once") {
    const Trace t = poisson_trace(100, 3.6e9, 0, kHour, 11);  // mean uptime 1 us
    const Tally tally = replay(t);
    CHECK(tally.adds == 100);
    CHECK(tally.removes == 100);
    CHECK(tally.final_nodes == 0);
    CHECK(t.duration_ms() == 0);  // every uptime rounds to 0 ms
    // All adds come before the removals at time 0; removals in node order.
    for (int i = 0; i < 100; ++i) {
      const std::string name = "node" + std::to_string(i + 1);
      CHECK(t.events[static_cast<std::size_t>(i)] == TraceEvent{0, NodeChange::add, name});
      CHECK(t.events[static_cast<std::size_t>(100 + i)] == TraceEvent{0, NodeChange::remove, name});
    }
  }
  SUBCASE("a huge rate with quick repair stays consistent at equal times") {
    const Trace t = poisson_trace(50, 3.6e6, 1, 2000, 12);  // mean up 1 ms, down 1 ms
    const Tally tally = replay(t);
    CHECK(tally.removes > 10'000);
    CHECK(t.duration_ms() <= 2000);
    // Equal times are ordered by node name index, then by order within a node.
    for (std::size_t i = 51; i < t.events.size(); ++i) {
      if (t.events[i].time_ms != t.events[i - 1].time_ms) continue;
      const int a = std::stoi(t.events[i - 1].node.substr(4)), b = std::stoi(t.events[i].node.substr(4));
      CHECK(a <= b);
    }
  }
  SUBCASE("zero rate or zero duration: only the initial nodes") {
    const Trace none = poisson_trace(8, 0, kHour, days54, 1);
    CHECK(none.events.size() == 8);
    CHECK(none.events.back() == TraceEvent{0, NodeChange::add, "node8"});
    CHECK(poisson_trace(8, 1, kHour, 0, 1).events.size() == 8);
  }
  SUBCASE("seeded") {
    const Trace a = poisson_trace(256, 0.01, kHour, 30 * kDay, 77);
    CHECK(a.events == poisson_trace(256, 0.01, kHour, 30 * kDay, 77).events);
    CHECK(a.events != poisson_trace(256, 0.01, kHour, 30 * kDay, 78).events);
    CHECK(a.events.size() > 256 + 100);  // 256 * 720 h * 0.01 = 1843 failures expected
    replay(a);
  }
  SUBCASE("arguments are checked") {
    CHECK_THROWS_WITH_AS((void)poisson_trace(0, 1, 0, kHour, 1), doctest::Contains("nodes must be at least 1"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)poisson_trace(4, -1, 0, kHour, 1), doctest::Contains("failures_per_node_hour"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)poisson_trace(4, std::numeric_limits<double>::infinity(), 0, kHour, 1),
                         doctest::Contains("failures_per_node_hour"), InputError);
    CHECK_THROWS_WITH_AS((void)poisson_trace(4, 1, -1, kHour, 1), doctest::Contains("mttr_ms"), InputError);
    CHECK_THROWS_WITH_AS((void)poisson_trace(4, 1, 0, -1, 1), doctest::Contains("duration_ms"), InputError);
    CHECK_THROWS_WITH_AS((void)poisson_trace(4, 1, 0, std::nan(""), 1), doctest::Contains("duration_ms"), InputError);
    // Billions of events would exhaust memory: refused instead.
    CHECK_THROWS_WITH_AS((void)poisson_trace(1000, 3.6e6, 1, 54 * kDay, 1), doctest::Contains("events"), InputError);
  }
}

TEST_CASE("trace: spot_trace") {
  SUBCASE("consistent, hourly, removals before additions, in slot order") {
    const Trace t = spot_trace(40, 0.5, 0.3, 48 * kHour, 3);
    const Tally tally = replay(t);
    CHECK(tally.peak == 40);
    CHECK(t.duration_ms() <= 48 * kHour);
    for (int i = 0; i < 40; ++i) CHECK(t.events[static_cast<std::size_t>(i)].time_ms == 0);
    for (std::size_t i = 40; i < t.events.size(); ++i) {
      const TraceEvent& e = t.events[i];
      CHECK(e.time_ms > 0);
      CHECK(std::fmod(e.time_ms, kHour) == 0);
      if (t.events[i - 1].time_ms != e.time_ms) continue;
      const TraceEvent& before = t.events[i - 1];
      // Within one hour: removals then additions, each by slot index.
      CHECK_FALSE((before.change == NodeChange::add && e.change == NodeChange::remove));
      if (before.change == e.change) CHECK(std::stoi(before.node.substr(4)) < std::stoi(e.node.substr(4)));
    }
    // Slots keep their names node1..node40.
    std::set<std::string> names;
    for (const auto& e : t.events) names.insert(e.node);
    CHECK(names.size() == 40);
    CHECK(names.count("node40") == 1);
  }
  SUBCASE("certain removal and return alternate every hour") {
    const Trace t = spot_trace(3, 1, 1, 3.5 * kHour, 1);
    const std::vector<TraceEvent> want = {
        {0, NodeChange::add, "node1"},
        {0, NodeChange::add, "node2"},
        {0, NodeChange::add, "node3"},
        {kHour, NodeChange::remove, "node1"},
        {kHour, NodeChange::remove, "node2"},
        {kHour, NodeChange::remove, "node3"},
        {2 * kHour, NodeChange::add, "node1"},
        {2 * kHour, NodeChange::add, "node2"},
        {2 * kHour, NodeChange::add, "node3"},
        {3 * kHour, NodeChange::remove, "node1"},
        {3 * kHour, NodeChange::remove, "node2"},
        {3 * kHour, NodeChange::remove, "node3"},
    };
    CHECK(t.events == want);
    CHECK(spot_trace(3, 1, 1, 4 * kHour, 1).events.size() == want.size() + 3);  // the hour at duration counts
  }
  SUBCASE("never removed, or never back") {
    CHECK(spot_trace(10, 1, 0, 100 * kHour, 1).events.size() == 10);
    const Trace gone = spot_trace(10, 0, 1, 100 * kHour, 1);
    CHECK(replay(gone).final_nodes == 0);
    CHECK(gone.duration_ms() == kHour);
    CHECK(spot_trace(10, 0.5, 0.5, kHour - 1, 1).events.size() == 10);
  }
  SUBCASE("roughly the given probabilities") {
    const Trace t = spot_trace(1000, 0.5, 0.05, 2 * kHour, 8);
    int first_hour_removals = 0, second_hour_adds = 0;
    for (const auto& e : t.events) {
      if (e.time_ms == kHour) first_hour_removals += e.change == NodeChange::remove ? 1 : 0;
      if (e.time_ms == 2 * kHour) second_hour_adds += e.change == NodeChange::add ? 1 : 0;
    }
    CHECK(first_hour_removals > 20);  // Binomial(1000, 0.05): 50, sd 6.9
    CHECK(first_hour_removals < 80);
    CHECK(second_hour_adds > first_hour_removals / 2 - 25);  // half of those come back
    CHECK(second_hour_adds < first_hour_removals / 2 + 25);
    replay(t);
  }
  SUBCASE("seeded") {
    CHECK(spot_trace(64, 0.5, 0.1, 5 * kDay, 1).events == spot_trace(64, 0.5, 0.1, 5 * kDay, 1).events);
    CHECK(spot_trace(64, 0.5, 0.1, 5 * kDay, 1).events != spot_trace(64, 0.5, 0.1, 5 * kDay, 2).events);
  }
  SUBCASE("arguments are checked") {
    CHECK_THROWS_WITH_AS((void)spot_trace(0, 0.5, 0.5, kHour, 1), doctest::Contains("nodes must be at least 1"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)spot_trace(4, 1.5, 0.5, kHour, 1),
                         doctest::Contains("add_probability must be between 0 and 1, got 1.5"), InputError);
    CHECK_THROWS_WITH_AS((void)spot_trace(4, 0.5, -0.1, kHour, 1), doctest::Contains("remove_probability"), InputError);
    CHECK_THROWS_WITH_AS((void)spot_trace(4, std::nan(""), 0.5, kHour, 1), doctest::Contains("add_probability"),
                         InputError);
    CHECK_THROWS_WITH_AS((void)spot_trace(4, 0.5, 0.5, -kHour, 1), doctest::Contains("duration_ms"), InputError);
    // A draw per slot and hour: a million slots for 54 days is too much work.
    CHECK_THROWS_WITH_AS((void)spot_trace(1 << 20, 0.5, 0.5, 54 * kDay, 1),
                         doctest::Contains("nodes times hours must be at most 1e9"), InputError);
  }
}

