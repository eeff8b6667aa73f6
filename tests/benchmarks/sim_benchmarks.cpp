// Simulator speed.
//   BM_EventQueueHold/N: the classic hold model: N events pending, each
//     handler schedules one more a random time ahead (target: >= 10 M events/s)
//   BM_EventQueueCancel: as above, with every other event cancelled
#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>

#include "oobleck/sim/engine.h"

namespace {

using oobleck::sim::Engine;

// xorshift: cheap and deterministic, so the benchmark measures the queue.
struct Random {
  std::uint64_t state = 88172645463325252ull;
  double next_ms() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<double>(state % 1000) * 0.01;
  }
};

struct Hold {
  Engine* engine;
  Random* random;
  std::int64_t* left;
  void operator()() const {
    if (--*left > 0) engine->schedule_after(random->next_ms(), *this);
  }
};

void BM_EventQueueHold(benchmark::State& state) {
  const auto pending = state.range(0);
  std::int64_t total = 0;
  for (auto _ : state) {
    Engine engine;
    Random random;
    std::int64_t left = 1'000'000;
    for (std::int64_t i = 0; i < pending; ++i) engine.schedule_at(random.next_ms(), Hold{&engine, &random, &left});
    engine.run();
    total += static_cast<std::int64_t>(engine.executed());
  }
  state.SetItemsProcessed(total);
}
BENCHMARK(BM_EventQueueHold)->Arg(16)->Arg(256)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_EventQueueCancel(benchmark::State& state) {
  std::int64_t total = 0;
  for (auto _ : state) {
    Engine engine;
    Random random;
    std::int64_t left = 1'000'000;
    struct Pair {
      Engine* engine;
      Random* random;
      std::int64_t* left;
      void operator()() const {
        if (--*left <= 0) return;
        const auto doomed = engine->schedule_after(random->next_ms(), [] {});
        engine->schedule_after(random->next_ms(), *this);
        engine->cancel(doomed);
      }
    };
    for (int i = 0; i < 1024; ++i) engine.schedule_at(random.next_ms(), Pair{&engine, &random, &left});
    engine.run();
    total += static_cast<std::int64_t>(engine.executed());
  }
  state.SetItemsProcessed(total);
}
BENCHMARK(BM_EventQueueCancel)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
