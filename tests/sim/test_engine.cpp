#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "oobleck/sim/engine.h"

using oobleck::sim::Engine;
using oobleck::sim::EventId;

TEST_CASE("engine: events run by time, equal times in the order they were scheduled") {
  Engine engine;
  std::vector<int> order;
  engine.schedule_at(5, [&] { order.push_back(3); });
  engine.schedule_at(1, [&] { order.push_back(0); });
  engine.schedule_at(5, [&] { order.push_back(4); });
  engine.schedule_at(2, [&] { order.push_back(1); });
  engine.schedule_at(2, [&] { order.push_back(2); });
  engine.run();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(engine.now() == 5);
  CHECK(engine.executed() == 5);
  CHECK(engine.pending() == 0);
}

TEST_CASE("engine: a handler scheduling at the current time runs after the events already due then") {
  Engine engine;
  std::vector<char> order;
  engine.schedule_at(1, [&] {
    order.push_back('a');
    engine.schedule_after(0, [&] { order.push_back('c'); });
  });
  engine.schedule_at(1, [&] { order.push_back('b'); });
  engine.run();
  CHECK(order == std::vector<char>{'a', 'b', 'c'});
}

TEST_CASE("engine: matches a stable sort of random events, including many ties") {
  std::mt19937_64 random(7);
  Engine engine;
  struct Scheduled {
    double time;
    int index;
  };
  std::vector<Scheduled> expected;
  std::vector<int> ran;
  for (int i = 0; i < 5000; ++i) {
    const double t = static_cast<double>(random() % 50);  // many equal times
    expected.push_back({t, i});
    engine.schedule_at(t, [&ran, i] { ran.push_back(i); });
  }
  std::stable_sort(expected.begin(), expected.end(), [](auto& a, auto& b) { return a.time < b.time; });
  engine.run();
  REQUIRE(ran.size() == expected.size());
  for (std::size_t i = 0; i < ran.size(); ++i) CHECK(ran[i] == expected[i].index);
}

TEST_CASE("engine: cancellation") {
  Engine engine;
  std::vector<int> ran;
  const EventId a = engine.schedule_at(1, [&] { ran.push_back(1); });
  const EventId b = engine.schedule_at(2, [&] { ran.push_back(2); });
  engine.schedule_at(3, [&] { ran.push_back(3); });
  CHECK(engine.pending() == 3);
  CHECK(engine.cancel(b));
  CHECK_FALSE(engine.cancel(b));  // already cancelled
  CHECK(engine.pending() == 2);
  engine.run();
  CHECK(ran == std::vector<int>{1, 3});
  CHECK_FALSE(engine.cancel(a));  // already ran
  CHECK_FALSE(engine.cancel(EventId{}));

  SUBCASE("a stale id does not cancel the event that reuses its slot") {
    Engine e;
    int count = 0;
    const EventId first = e.schedule_at(1, [&] { ++count; });
    CHECK(e.cancel(first));
    e.run();  // the cancelled entry surfaces and frees its slot
    const EventId second = e.schedule_at(2, [&] { ++count; });
    CHECK(second.slot == first.slot);
    CHECK_FALSE(e.cancel(first));
    e.run();
    CHECK(count == 1);
  }
  SUBCASE("a handler can cancel a later event") {
    Engine e;
    std::vector<int> order;
    EventId later;
    e.schedule_at(1, [&] {
      order.push_back(1);
      e.cancel(later);
    });
    later = e.schedule_at(2, [&] { order.push_back(2); });
    e.run();
    CHECK(order == std::vector<int>{1});
  }
}

TEST_CASE("engine: run_until stops at the limit and moves the clock there") {
  Engine engine;
  std::vector<int> ran;
  engine.schedule_at(1, [&] { ran.push_back(1); });
  engine.schedule_at(10, [&] { ran.push_back(10); });
  engine.run_until(5);
  CHECK(ran == std::vector<int>{1});
  CHECK(engine.now() == 5);
  CHECK(engine.pending() == 1);
  engine.run_until(10);
  CHECK(ran == std::vector<int>{1, 10});
}

TEST_CASE("engine: the past cannot be scheduled") {
  Engine engine;
  engine.schedule_at(4, [] {});
  engine.run();
  CHECK_THROWS_AS(engine.schedule_at(3, [] {}), std::logic_error);
  CHECK_THROWS_AS(engine.schedule_after(-1, [] {}), std::logic_error);
}
