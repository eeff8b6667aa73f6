// The experiments over many replays: generator specs, percentiles, Monte
// Carlo over seeds and sweeps, and their JSON and table outputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bundled_profiles.h"
#include "oobleck/planner.h"
#include "oobleck/sim/experiment.h"
#include "oobleck/sim/monte_carlo.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/sweep.h"
#include "oobleck/sim/trace.h"
#include "oobleck/sim/trace_generator.h"

using namespace oobleck;
using namespace oobleck::sim;

using oobleck::test::gpt3_1_3b_a100;

namespace {

// The message of the InputError `make` throws; empty when it throws none.
template <typename Make>
std::string input_error(Make make) {
  try {
    (void)make();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TraceSpec poisson_spec() {
  return {.kind = "poisson", .nodes = 8, .failures_per_node_hour = 0.02, .mttr = "2h", .duration = "2d", .seed = 11};
}

TraceSet generated(const TraceSpec& spec, int runs) {
  TraceSet traces;
  traces.spec = spec;
  traces.runs = runs;
  return traces;
}

ExperimentOptions on_threads(int threads) {
  ExperimentOptions options;
  options.threads = threads;
  return options;
}

PolicyResult policy_result(Policy policy, double samples_per_s, double goodput, int failures,
                           Milliseconds lost_work_ms) {
  PolicyResult r;
  r.policy = policy;
  r.samples_per_s = samples_per_s;
  r.goodput = goodput;
  r.failures = failures;
  r.time.lost_work_ms = lost_work_ms;
  return r;
}

}  // namespace

// ------------------------------------------------------------------ generator specs

TEST_CASE("experiments: a generator spec makes the traces the generators make for the same seed") {
  constexpr Milliseconds kHour = 3'600'000;
  SUBCASE("fixed") {
    const TraceSpec spec{.kind = "fixed", .nodes = 10, .interval = "2h", .min_nodes = 4};
    const Trace trace = generate_trace(spec, 7, 8);
    CHECK(trace.events == fixed_interval_trace(10, 2 * kHour, 4, 7).events);
    CHECK(trace.origin == "fixed trace (seed 7)");
    CHECK(trace.events.size() == 16);  // 10 adds, 6 removals
  }
  SUBCASE("poisson with a failure rate") {
    const TraceSpec spec = poisson_spec();
    const Trace trace = generate_trace(spec, 3, 8);
    CHECK(trace.events == poisson_trace(8, 0.02, 2 * kHour, 48 * kHour, 3).events);
    CHECK(trace.origin == "poisson trace (seed 3)");
    CHECK(trace.events != generate_trace(spec, 4, 8).events);
  }
  SUBCASE("poisson with the preset: per GPU, times the default GPUs per node unless given") {
    TraceSpec spec = poisson_spec();
    spec.failures_per_node_hour = -1;
    spec.preset = "llama3-405b";
    spec.duration = "30d";
    CHECK(generate_trace(spec, 5, 4).events ==
          poisson_trace(8, kLlama3FailuresPerGpuHour * 4, 2 * kHour, 720 * kHour, 5).events);
    spec.gpus_per_node = 16;
    CHECK(generate_trace(spec, 5, 4).events ==
          poisson_trace(8, kLlama3FailuresPerGpuHour * 16, 2 * kHour, 720 * kHour, 5).events);
  }
  SUBCASE("spot") {
    const TraceSpec spec{
        .kind = "spot", .nodes = 6, .duration = "3d", .add_probability = 0.4, .remove_probability = 0.1};
    const Trace trace = generate_trace(spec, 9, 8);
    CHECK(trace.events == spot_trace(6, 0.4, 0.1, 72 * kHour, 9).events);
    CHECK(trace.origin == "spot trace (seed 9)");
  }
}

TEST_CASE("experiments: bad generator specs are input errors naming the flag") {
  const auto error_of = [](const TraceSpec& spec) { return input_error([&] { return generate_trace(spec, 1, 8); }); };
  TraceSpec spec = poisson_spec();
  SUBCASE("no nodes") {
    spec.nodes = 0;
    CHECK(error_of(spec) == "--nodes: required with --generate");
  }
  SUBCASE("a duration without a unit") {
    spec.duration = "3 weeks";
    CHECK(error_of(spec) == "--duration: expected a duration such as 90m, 6h or 54d, got \"3 weeks\"");
  }
  SUBCASE("a bad repair time") {
    spec.mttr = "3x";
    CHECK(error_of(spec).rfind("--mttr: expected a duration", 0) == 0);
  }
  SUBCASE("a bad interval for fixed traces") {
    spec.kind = "fixed";
    spec.interval = "often";
    CHECK(error_of(spec).rfind("--interval: expected a duration", 0) == 0);
  }
  SUBCASE("poisson without a rate") {
    spec.failures_per_node_hour = -1;
    CHECK(error_of(spec) == "--failure-rate: required for poisson traces (or --preset llama3-405b)");
  }
  SUBCASE("poisson with a rate and a preset") {
    spec.preset = "llama3-405b";
    CHECK(error_of(spec) == "--failure-rate and --preset: give one of them");
  }
  SUBCASE("an unknown preset") {
    spec.failures_per_node_hour = -1;
    spec.preset = "gpt5";
    CHECK(error_of(spec) == "--preset: expected llama3-405b, got \"gpt5\"");
  }
  SUBCASE("an unknown generator") {
    spec.kind = "weibull";
    CHECK(error_of(spec) == "--generate: expected fixed, poisson or spot, got \"weibull\"");
  }
}

TEST_CASE("experiments: a trace set gives the given trace every run, or seeds from spec.seed on") {
  TraceSet traces = generated(poisson_spec(), 3);
  CHECK(traces.trace_for_run(0)->events == generate_trace(poisson_spec(), 11, 8).events);
  CHECK(traces.trace_for_run(2)->events == generate_trace(poisson_spec(), 13, 8).events);
  CHECK(traces.trace_for_run(2)->origin == "poisson trace (seed 13)");
  traces.given = std::make_shared<const Trace>(parse_trace("0,add,a\n10,remove,a\n", "given"));
  CHECK(traces.trace_for_run(2) == traces.given);  // the same trace, not a copy
  CHECK(traces.trace_for_run(2)->origin == "given");
}

// ------------------------------------------------------------------ percentiles

TEST_CASE("experiments: percentiles interpolate linearly between the closest ranks") {
  const std::vector<double> values = {10, 1, 3, 2};  // sorted: 1 2 3 10
  CHECK(percentile(values, 0.5) == 2.5);
  CHECK(percentile(values, 0) == 1);
  CHECK(percentile(values, 1) == 10);
  CHECK(percentile(values, 0.05) == doctest::Approx(1.15));  // rank 0.15
  CHECK(percentile(values, 0.95) == doctest::Approx(8.95));  // rank 2.85: 3 + 0.85 * 7
  CHECK(percentile({1, 2, 3, 4, 5}, 0.5) == 3);
  CHECK(percentile({7}, 0.05) == 7);
  CHECK(percentile({}, 0.5) == 0);
}

// ------------------------------------------------------------------ Monte Carlo

TEST_CASE("experiments: seeds are summarized per policy as median, 5th and 95th percentiles") {
  std::vector<ReplayResult> runs(3);
  const double rates[] = {10, 30, 20}, lost_ms[] = {1000, 5000, 3000};
  const int failures[] = {2, 0, 1};
  for (int i = 0; i < 3; ++i) {
    runs[i].policies = {policy_result(Policy::oobleck, rates[i], rates[i] / 40, failures[i], lost_ms[i]),
                        policy_result(Policy::bamboo, 0, 0, 0, 0)};
    runs[i].policies[1].runnable = false;
  }
  const SeedsSummary summary = summarize_seeds(runs, 5);
  CHECK(summary.seeds == 3);
  CHECK(summary.first_seed == 5);
  REQUIRE(summary.policies.size() == 2);
  const PolicySpread& oobleck = summary.policies[0];
  CHECK(oobleck.policy == Policy::oobleck);
  CHECK(oobleck.runnable);
  CHECK(oobleck.samples_per_s.median == 20);
  CHECK(oobleck.samples_per_s.p5 == doctest::Approx(11));   // rank 0.1 between 10 and 20
  CHECK(oobleck.samples_per_s.p95 == doctest::Approx(29));  // rank 1.9 between 20 and 30
  CHECK(oobleck.goodput.median == 0.5);
  CHECK(oobleck.failures.median == 1);
  CHECK(oobleck.failures.p95 == doctest::Approx(1.9));
  CHECK(oobleck.lost_work_s.median == 3);
  CHECK(oobleck.lost_work_s.p5 == doctest::Approx(1.2));
  CHECK(summary.policies[1].policy == Policy::bamboo);
  CHECK_FALSE(summary.policies[1].runnable);
  CHECK_THROWS_AS((void)summarize_seeds({}, 1), std::invalid_argument);
}

TEST_CASE("experiments: Monte Carlo gives the same summary on one thread or several") {
  const TraceSet traces = generated(poisson_spec(), 4);
  ReplayOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 16;
  std::vector<std::string> reports;
  std::mutex reports_mutex;
  ExperimentOptions several = on_threads(3);
  several.progress = [&](std::string_view line) {
    std::lock_guard lock(reports_mutex);
    reports.emplace_back(line);
  };
  const SeedsSummary one = replay_seeds(gpt3_1_3b_a100(), traces, options, {}, on_threads(1));
  const SeedsSummary many = replay_seeds(gpt3_1_3b_a100(), traces, options, {}, several);
  CHECK(one == many);
  CHECK(seeds_to_json(one) == seeds_to_json(many));

  // The same as replaying seeds 11..14 one by one.
  std::vector<ReplayResult> runs;
  for (std::uint64_t seed = 11; seed < 15; ++seed) {
    runs.push_back(replay(gpt3_1_3b_a100(), generate_trace(poisson_spec(), seed, 8), options));
  }
  CHECK(one == summarize_seeds(runs, 11));
  REQUIRE(one.policies.size() == std::size(kAllPolicies));
  CHECK(one.policies[0].samples_per_s.median > 0);
  CHECK(one.policies[0].samples_per_s.p5 <= one.policies[0].samples_per_s.median);
  CHECK(one.policies[0].samples_per_s.median <= one.policies[0].samples_per_s.p95);

  std::sort(reports.begin(), reports.end());
  CHECK(reports == std::vector<std::string>{"trace 1/4 done", "trace 2/4 done", "trace 3/4 done", "trace 4/4 done"});
}

TEST_CASE("experiments: the seeds JSON and table") {
  SeedsSummary summary;
  summary.seeds = 2;
  summary.first_seed = 7;
  PolicySpread p;
  p.policy = Policy::checkpoint;
  p.runnable = true;
  p.samples_per_s = {12.5, 10, 15};
  p.goodput = {0.75, 0.5, 1};
  p.failures = {1, 0, 2};
  p.unrecoverable = {0, 0, 0};
  p.lost_work_s = {3.5, 1, 6};
  summary.policies = {p};
  CHECK(seeds_to_json(summary) == R"({
  "format": "oobleck.replay-seeds.v1",
  "seeds": 2,
  "first_seed": 7,
  "policies": {
    "checkpoint": {
      "runnable": true,
      "samples_per_s": {
        "median": 12.5,
        "p5": 10.0,
        "p95": 15.0
      },
      "goodput": {
        "median": 0.75,
        "p5": 0.5,
        "p95": 1.0
      },
      "failures": {
        "median": 1.0,
        "p5": 0.0,
        "p95": 2.0
      },
      "unrecoverable": {
        "median": 0.0,
        "p5": 0.0,
        "p95": 0.0
      },
      "lost_work_s": {
        "median": 3.5,
        "p5": 1.0,
        "p95": 6.0
      }
    }
  }
}
)");
  CHECK(seeds_summary_table(summary) ==
        "2 generated traces: median [5th, 95th percentile]\n"
        "policy      samples/s                         goodput                     \n"
        "checkpoint      12.50 [    10.00,     15.00]    75.0% [  50.0%,  100.0%]\n");
}

// ------------------------------------------------------------------ sweeps

TEST_CASE("experiments: lists of f and checkpoint intervals") {
  CHECK(parse_fault_tolerances("0,1,2,3", "--fault-tolerance") == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_checkpoint_intervals("auto,10,500", "--checkpoint-interval") ==
        std::vector<std::optional<int>>{std::nullopt, 10, 500});
  CHECK(input_error([] { return parse_fault_tolerances("1,x", "--fault-tolerance"); }) ==
        "--fault-tolerance: expected a comma-separated list of non-negative integers, got \"x\"");
  CHECK(input_error([] { return parse_fault_tolerances("auto", "--fault-tolerance"); }) ==
        "--fault-tolerance: expected a comma-separated list of non-negative integers, got \"auto\"");
  CHECK(input_error([] { return parse_fault_tolerances("-1", "--fault-tolerance"); }) ==
        "--fault-tolerance: expected a comma-separated list of non-negative integers, got \"-1\"");
  CHECK(input_error([] { return parse_checkpoint_intervals("10,2000000", "--checkpoint-interval"); }) ==
        "--checkpoint-interval: expected a comma-separated list of non-negative integers or auto, got \"2000000\"");
  CHECK(input_error([] { return parse_checkpoint_intervals(",", "--checkpoint-interval"); }) ==
        "--checkpoint-interval: expected a comma-separated list of non-negative integers or auto, got \"\"");
  CHECK(input_error([] { return parse_checkpoint_intervals("", "--checkpoint-interval"); }) ==
        "--checkpoint-interval: empty list");
}

TEST_CASE("experiments: a sweep's rows are medians of replays, and it recommends the best rows") {
  const TraceSet traces = generated(poisson_spec(), 2);
  SweepOptions options;
  options.fault_tolerances = {0, 1, 2};
  options.checkpoint_intervals = {std::nullopt, 50};
  options.global_microbatches = 16;
  const SweepResult one = sweep(gpt3_1_3b_a100(), traces, options, {}, on_threads(1));
  const SweepResult many = sweep(gpt3_1_3b_a100(), traces, options, {}, on_threads(4));
  CHECK(one == many);
  CHECK(one.seeds == 2);
  REQUIRE(one.rows.size() == 5);

  // The f = 1 row against its two replays.
  std::vector<double> rates;
  for (int run = 0; run < 2; ++run) {
    ReplayOptions replay_options;
    replay_options.fault_tolerance = 1;
    replay_options.global_microbatches = 16;
    replay_options.policies = {Policy::oobleck};
    rates.push_back(replay(gpt3_1_3b_a100(), *traces.trace_for_run(run), replay_options).policies.front().samples_per_s);
  }
  CHECK(one.rows[1].policy == Policy::oobleck);
  CHECK(one.rows[1].fault_tolerance == 1);
  CHECK(rates[0] != rates[1]);
  CHECK(one.rows[1].samples_per_s == doctest::Approx((rates[0] + rates[1]) / 2).epsilon(1e-12));

  // Checkpoint rows come after, with f = 0 and the interval asked for.
  CHECK(one.rows[3].policy == Policy::checkpoint);
  CHECK(one.rows[3].fault_tolerance == 0);
  CHECK_FALSE(one.rows[3].requested_checkpoint_interval_iterations.has_value());
  CHECK(one.rows[3].checkpoint_interval_iterations > 0);  // Young/Daly's
  CHECK(one.rows[4].requested_checkpoint_interval_iterations == 50);
  CHECK(one.rows[4].checkpoint_interval_iterations == 50);

  const SweepRow* best_oobleck = nullptr;
  const SweepRow* best_checkpoint = nullptr;
  for (const SweepRow& row : one.rows) {
    const SweepRow*& best = row.policy == Policy::oobleck ? best_oobleck : best_checkpoint;
    if (best == nullptr || row.samples_per_s > best->samples_per_s) best = &row;
  }
  CHECK(one.recommended_fault_tolerance == best_oobleck->fault_tolerance);
  CHECK(one.recommended_checkpoint_interval_iterations == best_checkpoint->checkpoint_interval_iterations);
}

TEST_CASE("experiments: the sweep JSON and table") {
  SweepResult result;
  result.seeds = 3;
  result.rows = {{Policy::oobleck, 1, std::nullopt, 0, 120.5, 0.875},
                 {Policy::checkpoint, 0, std::nullopt, 240, 100.25, 0.75},
                 {Policy::checkpoint, 0, 50, 50, 90, 0.5}};
  result.recommended_fault_tolerance = 1;
  result.recommended_checkpoint_interval_iterations = 240;
  CHECK(sweep_to_json(result) == R"({
  "format": "oobleck.sweep.v1",
  "seeds": 3,
  "runs": [
    {
      "policy": "oobleck",
      "fault_tolerance": 1,
      "checkpoint_interval": "auto",
      "checkpoint_interval_iterations": 0,
      "samples_per_s": 120.5,
      "goodput": 0.875
    },
    {
      "policy": "checkpoint",
      "fault_tolerance": 0,
      "checkpoint_interval": "auto",
      "checkpoint_interval_iterations": 240,
      "samples_per_s": 100.25,
      "goodput": 0.75
    },
    {
      "policy": "checkpoint",
      "fault_tolerance": 0,
      "checkpoint_interval": 50,
      "checkpoint_interval_iterations": 50,
      "samples_per_s": 90.0,
      "goodput": 0.5
    }
  ],
  "recommended": {
    "fault_tolerance": 1,
    "checkpoint_interval_iterations": 240
  }
}
)");
  CHECK(sweep_summary_table(result) ==
        "policy        f  interval       samples/s   goodput\n"
        "oobleck       1  0 (auto)          120.50     87.5%\n"
        "checkpoint    0  240 (auto)        100.25     75.0%\n"
        "checkpoint    0  50                 90.00     50.0%\n"
        "Recommended: f = 1 for oobleck; a checkpoint every 240 iterations for checkpoint-restart\n");
}
