// The straggler detector from tables of measured and predicted times.
#include <doctest/doctest.h>

#include "oobleck/recovery/straggler_detector.h"

using namespace oobleck;
using namespace oobleck::recovery;

namespace {

// Four nodes predicted at 100 ms each; `b` measured at 100 / speed.
std::map<std::string, Milliseconds> step_with(double b_speed, double everyone = 1.0) {
  return {{"a", 100 / everyone}, {"b", 100 / (b_speed * everyone)}, {"c", 100 / everyone}, {"d", 100 / everyone}};
}
const std::map<std::string, Milliseconds> kPredicted = {{"a", 100}, {"b", 100}, {"c", 100}, {"d", 100}};

}  // namespace

TEST_CASE("straggler detector: flagged after a run of slow steps, unflagged after a run of good ones") {
  StragglerDetector d({0.8, 0.9});  // below 0.8 three steps running; above 0.9 to recover
  CHECK_FALSE(d.observe(step_with(0.4), kPredicted));
  CHECK_FALSE(d.observe(step_with(0.42), kPredicted));
  CHECK(d.flagged().empty());
  CHECK(d.measured().at("b") == doctest::Approx(0.42));
  CHECK(d.observe(step_with(0.38), kPredicted));
  REQUIRE(d.flagged().size() == 1);
  CHECK(d.flagged().at("b") == doctest::Approx(0.4));  // the median of 0.4, 0.42, 0.38
  // Between the thresholds it stays flagged, at the median of its last
  // steps; good steps end it only once all of the last ones are good.
  CHECK_FALSE(d.observe(step_with(0.85), kPredicted));  // median 0.42: no change
  CHECK(d.observe(step_with(1.0), kPredicted));         // median 0.85: faster, still flagged
  CHECK(d.flagged().at("b") == doctest::Approx(0.85));
  CHECK_FALSE(d.observe(step_with(1.0), kPredicted));   // 0.85 is among the last three
  CHECK(d.flagged().count("b") == 1);
  CHECK(d.observe(step_with(1.0), kPredicted));
  CHECK(d.flagged().empty());
}

TEST_CASE("straggler detector: noise, a uniformly slow machine and a changing factor") {
  StragglerDetector noisy;
  for (int i = 0; i < 30; ++i) noisy.observe(step_with(i % 2 == 0 ? 0.7 : 0.95), kPredicted);
  CHECK(noisy.flagged().empty());
  StragglerDetector uniform;
  for (int i = 0; i < 10; ++i) uniform.observe(step_with(1.0, 0.3), kPredicted);
  CHECK(uniform.flagged().empty());
  StragglerDetector changing;
  for (int i = 0; i < 3; ++i) changing.observe(step_with(0.6), kPredicted);
  CHECK(changing.flagged().at("b") == doctest::Approx(0.6));
  changing.observe(step_with(0.3), kPredicted);
  CHECK(changing.observe(step_with(0.3), kPredicted));  // the median of 0.6, 0.3, 0.3 moved by half
  CHECK(changing.flagged().at("b") == doctest::Approx(0.3));
  changing.forget("b");
  CHECK(changing.flagged().empty());
  // Nodes without a prediction, or with nothing measured, are left out.
  StragglerDetector partial;
  CHECK_FALSE(partial.observe({{"a", 100}, {"z", 1000}}, {{"a", 100}}));
  CHECK(partial.measured().count("z") == 0);
}
