// Simulator speed.
//   BM_EventQueueHold/N: the classic hold model: N events pending, each
//     handler schedules one more a random time ahead (target: >= 10 M events/s)
//   BM_EventQueueCancel: each handler schedules two events and cancels one;
//     items are events scheduled (run or cancelled)
//   BM_Iteration/N: one iteration of the 175B plan on N nodes, op by op
//   BM_ReplayLlama3/2048: 54 days of 2048 8-GPU nodes failing at the Llama 3
//     rate and repaired after 3 h on average, all four policies (< 5 s)
//   BM_ReplayCountTrace/N: a count series of N nodes, then 1, then N again
//     (3N events), replayed by checkpoint, inmemory and bamboo one after
//     another; items are trace events, so a flat rate across N is replay in
//     O(events log nodes)
// Counters named work_* count the work done (events run, plans made): they do
// not depend on timing, so tools/bench-compare.sh flags any growth in them
// exactly, however noisy the machine.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "oobleck/planner.h"
#include "oobleck/sim/engine.h"
#include "oobleck/sim/iteration.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"

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
  std::int64_t total = 0, last = 0;
  for (auto _ : state) {
    Engine engine;
    Random random;
    std::int64_t left = 1'000'000;
    for (std::int64_t i = 0; i < pending; ++i) engine.schedule_at(random.next_ms(), Hold{&engine, &random, &left});
    engine.run();
    last = static_cast<std::int64_t>(engine.executed());
    total += last;
  }
  state.SetItemsProcessed(total);
  state.counters["work_events"] = static_cast<double>(last);
}
BENCHMARK(BM_EventQueueHold)->Arg(16)->Arg(256)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_EventQueueCancel(benchmark::State& state) {
  std::int64_t total = 0, last = 0;
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
    last = static_cast<std::int64_t>(engine.executed());
    total += 2 * last;  // each ran one and cancelled one
  }
  state.SetItemsProcessed(total);
  state.counters["work_events"] = static_cast<double>(last);
}
BENCHMARK(BM_EventQueueCancel)->Unit(benchmark::kMillisecond);

const oobleck::Profile& gpt3_175b() {
  static const oobleck::Profile profile =
      oobleck::load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles/gpt3-175b-a100.handwritten.json");
  return profile;
}

void BM_Iteration(benchmark::State& state) {
  std::vector<std::string> names;
  for (int i = 0; i < state.range(0); ++i) names.push_back("node" + std::to_string(i));
  const auto cluster = oobleck::plan_cluster(gpt3_175b(), names, 3, 4096);
  const oobleck::CostModel cost(gpt3_175b(), cluster.plan.template_microbatches);
  oobleck::sim::IterationResult result;
  for (auto _ : state) {
    result = oobleck::sim::simulate_iteration(cost, cluster.plan);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(result.events) * state.iterations());
  state.counters["iteration_ms"] = result.iteration_ms;
  state.counters["planner_ms"] = cluster.plan.iteration_ms;
  state.counters["work_events"] = static_cast<double>(result.events);
}
BENCHMARK(BM_Iteration)->Arg(32)->Arg(2048)->Unit(benchmark::kMillisecond);

// Plans a replay made: every policy's reconfigurations and restarts.
double replans(const oobleck::sim::ReplayResult& result) {
  double total = 0;
  for (const auto& p : result.policies) total += p.reconfigurations + p.restarts;
  return total;
}

void BM_ReplayLlama3(benchmark::State& state) {
  using namespace oobleck::sim;
  const int nodes = static_cast<int>(state.range(0));
  const Trace trace = poisson_trace(nodes, kLlama3FailuresPerGpuHour * 8, 3 * 3.6e6, 54 * 24 * 3.6e6, 1);
  ReplayOptions options;
  options.fault_tolerance = 3;
  options.global_microbatches = 4096;
  ReplayResult result;
  for (auto _ : state) {
    result = replay(gpt3_175b(), trace, options);
    benchmark::DoNotOptimize(result);
  }
  state.counters["trace_events"] = static_cast<double>(trace.events.size());
  for (const auto& p : result.policies) {
    state.counters[std::string(policy_name(p.policy)) + "_goodput"] = p.goodput;
  }
  state.counters["work_replans"] = replans(result);
}
BENCHMARK(BM_ReplayLlama3)->Arg(2048)->Unit(benchmark::kSecond)->Iterations(1);

void BM_ReplayCountTrace(benchmark::State& state) {
  using namespace oobleck::sim;
  static const oobleck::Profile profile = oobleck::load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) /
                                                                 "profiles/gpt3-1.3b-a100.handwritten.json");
  const std::string n = std::to_string(state.range(0));
  const Trace trace = parse_count_series(
      "2021-12-10, 00:00:00, " + n + "\n2021-12-10, 01:00:00, 1\n2021-12-10, 02:00:00, " + n + "\n", "count series");
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 8;
  options.policies = {Policy::checkpoint, Policy::inmemory, Policy::bamboo};
  options.parallel = false;
  ReplayResult result;
  for (auto _ : state) {
    result = replay(profile, trace, options);
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(trace.events.size()) * state.iterations());
  state.counters["trace_events"] = static_cast<double>(trace.events.size());
  state.counters["work_replans"] = replans(result);
}
BENCHMARK(BM_ReplayCountTrace)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
