// The cost model's formulas on hand-computed cases.
#include <doctest/doctest.h>

#include <type_traits>

#include "oobleck/planner.h"
#include "reference.h"

using namespace oobleck;

TEST_CASE("T(M) of DESIGN.md on a hand-computed pipeline") {
  // Two layers of 1+2 ms, 1 MiB outputs, inter-node 10 GB/s, latency 0.01 ms.
  const Profile profile = test::uniform_profile(2, 1, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 5);
  const std::vector<Stage> stages = {{0, 1, 1, 0}, {1, 2, 1, 1}};
  const double transfer = (1 << 20) / 10e9 * 1000 + 0.01;
  CHECK(cost.transfer_ms(1, false) == doctest::Approx(transfer));
  CHECK(cost.pipeline_ms(stages, 5) == doctest::Approx(3 + 3 + 2 * transfer + 4 * 3));
  CHECK(cost.first_microbatch_ms(stages) == doctest::Approx(6 + 2 * transfer));
  CHECK(cost.bottleneck_ms(stages) == doctest::Approx(3));
}

TEST_CASE("memory rule: stage s keeps min(M, S-s+1) microbatches, split over its t GPUs") {
  const Profile profile = test::uniform_profile(4, 4, 1.0, 2.0, 1000, 100, 700);
  const CostModel cost(profile, 3);
  CHECK(cost.stage_memory_bytes(0, 2, 1, 3) == 2000 + 3 * 200);
  CHECK(cost.stage_memory_bytes(0, 2, 4, 3) == (2000 + 3 * 200 + 3) / 4);
  CHECK(cost.stage_max_in_flight(0, 1, 2) == (1400 - 1000) / 100);
  CHECK_FALSE(cost.stage_fits(0, 1, 1, 1));  // 1000 bytes of state > 700
  CHECK(cost.stage_fits(0, 1, 2, 4));
  CHECK_FALSE(cost.stage_fits(0, 1, 2, 5));
  // Four stages of one layer each on 2 GPUs: the first keeps min(3, 4) = 3, the last 1.
  const std::vector<Stage> stages = {{0, 1, 2, 0}, {1, 2, 2, 0}, {2, 3, 2, 1}, {3, 4, 2, 1}};
  CHECK(cost.pipeline_fits(stages, 3));
}

TEST_CASE("gradient synchronisation: ring all-reduce of layer 0 across the pipelines") {
  const Profile profile = test::uniform_profile(3, 1, 1.0, 2.0, 4000, 100, 1 << 20);
  const CostModel cost(profile, 2);
  CHECK(cost.gradient_sync_ms(1) == 0);
  const double bytes = profile.layers[0].param_bytes;
  CHECK(cost.gradient_sync_ms(4) == doctest::Approx(2.0 * 3 / 4 * bytes / 10e9 * 1000 + 2 * 3 * 0.01));
}

// The cost model refers to its profile: a temporary would dangle.
static_assert(!std::is_constructible_v<CostModel, Profile&&, int>);
static_assert(std::is_constructible_v<CostModel, const Profile&, int>);
