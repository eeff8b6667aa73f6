// The validation suite: its data as loaded, predictions against closed
// forms, Megatron's placement, calibration, and bad input.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "oobleck/planner.h"
#include "oobleck/validation.h"
#include "scratch.h"

namespace fs = std::filesystem;
using namespace oobleck;
using namespace oobleck::validation;
using oobleck::test::Run;
using oobleck::test::Scratch;

namespace {

const fs::path kSuite = fs::path(OOBLECK_SOURCE_DIR) / "tests/validation/suite.json";

MeasuredRun small_run(int tensor, int data, int pipeline, int microbatches) {
  MeasuredRun r;
  r.dataset = "test";
  r.row = 1;
  r.model = {"test", 4, 256, 8, padded_vocab(1000, tensor), 128};
  r.feedforward = 4 * r.model.hidden;
  r.tensor = tensor;
  r.data = data;
  r.pipeline = pipeline;
  r.gpus = tensor * data * pipeline;
  r.microbatch = 2;
  r.global_batch = 2 * microbatches * data;
  r.measured_ms = 1;
  return r;
}

}  // namespace

TEST_CASE("validation: the bundled suite loads every published run") {
  const Suite suite = load_suite(kSuite);
  REQUIRE(suite.datasets.size() == 2);
  const Dataset& vtrain = suite.datasets[0];
  CHECK(vtrain.runs.size() == 1440);
  CHECK(vtrain.calibrate_every == 10);
  const MeasuredRun& first = vtrain.runs.front();  // 2,16,8,1024,16,24,1024,1,1,2,372.160408
  CHECK(first.gpus == 2);
  CHECK(first.global_batch == 16);
  CHECK(first.microbatch == 8);
  CHECK(first.model.hidden == 1024);
  CHECK(first.model.layers == 24);
  CHECK(first.pipeline == 2);
  CHECK(first.measured_ms == doctest::Approx(372.160408));
  CHECK(first.model.vocab == 50304);
  for (const auto& r : vtrain.runs) CHECK(r.tensor * r.data * r.pipeline == r.gpus);
  const Dataset& megatron = suite.datasets[1];
  REQUIRE(megatron.runs.size() == 8);
  CHECK(megatron.runs[2].model.name == "gpt3-175B");
  CHECK(megatron.runs[2].interleave == 3);
  CHECK(megatron.runs[2].measured_ms == doctest::Approx(18130));
  CHECK(megatron.runs[3].recompute == "selective");
  CHECK(megatron.runs[3].sequence_parallel);
  CHECK(megatron.runs[0].model.vocab == 51200);  // 50,257 padded to a multiple of 128 x 8
  CHECK(unsupported(megatron.runs[0]).empty());
  CHECK(unsupported(megatron.runs[2]).empty());
  CHECK(unsupported(megatron.runs[1]).empty());
  MeasuredRun wide = megatron.runs[0];
  wide.feedforward = 3 * wide.model.hidden;
  CHECK(unsupported(wide) == "a feed-forward width other than 4 h");
}

TEST_CASE("validation: one GPU's run is M microbatches of forward, forward again and backward, then the step") {
  // No pipeline, no tensor or data parallelism: nothing overlaps and nothing
  // is communicated, so the iteration is the sum of its passes.
  const MeasuredRun run = small_run(1, 1, 1, 3);
  const auto hw = executor::load_hardware("a100-80gb");
  executor::AnalyticOptions options;
  options.vocabulary_parallel = true;
  const Profile profile = executor::analytic_profile(run.model, hw, run.microbatch, "bf16", options);
  double per_microbatch = 0;
  Bytes state = 0;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const auto& layer = profile.layers[l];
    const bool block = l > 0 && l + 1 < profile.layers.size();
    per_microbatch += layer.forward_ms + layer.backward_ms + (block ? layer.forward_ms : 0);
    state += layer.param_bytes + layer.optimizer_bytes;
  }
  const double step = 2.0 * static_cast<double>(state) / (hw.memory_bytes_per_s * hw.memory_efficiency) * 1000.0;
  CHECK(predict_ms(run, hw, {}) == doctest::Approx(3 * per_microbatch + step));
}

TEST_CASE("validation: replicas of a stage in one node all-reduce over its links, across nodes over the network") {
  const auto hw = executor::load_hardware("a100-80gb");
  const DatasetCluster slow_network{0, 1e9}, fast_network{0, 100e9};
  // 4 replicas x 2 GPUs fill one node of 8: the network is not used.
  const MeasuredRun in_node = small_run(2, 4, 1, 2);
  CHECK(predict_ms(in_node, hw, slow_network) == predict_ms(in_node, hw, fast_network));
  // 8 replicas x 2 GPUs span two nodes: the network is.
  const MeasuredRun across = small_run(2, 8, 1, 2);
  CHECK(predict_ms(across, hw, slow_network) > predict_ms(across, hw, fast_network));
  // A pipeline of 2 stages of 8 GPUs hands over between nodes.
  const MeasuredRun two_nodes = small_run(8, 1, 2, 4);
  CHECK(predict_ms(two_nodes, hw, slow_network) > predict_ms(two_nodes, hw, fast_network));
}

TEST_CASE("validation: tensor parallelism divides the work but not the per-layer overhead") {
  auto hw = executor::load_hardware("a100-80gb");
  hw.layer_overhead_ms = 0;
  MeasuredRun one = small_run(1, 1, 1, 2), eight = small_run(8, 1, 1, 2);
  for (MeasuredRun* r : {&one, &eight}) {  // large enough that splitting pays
    r->model.hidden = 8192;
    r->model.heads = 64;
    r->model.seq_len = 2048;
    r->feedforward = 4 * 8192;
  }
  const double without_overhead = predict_ms(eight, hw, {});
  CHECK(without_overhead < predict_ms(one, hw, {}));
  hw.layer_overhead_ms = 1;
  // 6 layers, 3 + 1 passes each for the blocks (forward, forward again,
  // backward twice the forward) and 3 for the embedding and head, per
  // microbatch: each GPU pays every one of them, whatever the degree.
  const double overhead_ms = 2 * (4 * 4 + 2 * 3) * 1.0;
  CHECK(predict_ms(eight, hw, {}) == doctest::Approx(without_overhead + overhead_ms));
}

TEST_CASE("validation: calibration is deterministic and no worse than where it starts") {
  const Suite suite = load_suite(kSuite);
  const auto hw = executor::load_hardware("a100-80gb");
  const Calibration a = calibrate(suite, hw), b = calibrate(suite, hw);
  CHECK(a.rows == 144);
  CHECK(a.mean_error == b.mean_error);
  CHECK(a.hardware.compute_efficiency == b.hardware.compute_efficiency);
  // The matrix share stays at or below what the A100's best products reach.
  CHECK(suite.max_compute_efficiency == doctest::Approx(267.9 / 312).epsilon(1e-3));
  CHECK(a.hardware.compute_efficiency <= suite.max_compute_efficiency * (1 + 1e-12));
  Calibration none;
  none.hardware = hw;
  const ValidationResult start = validate(suite, none), fitted = validate(suite, a);
  CHECK(fitted.datasets[0].calibration.mean <= start.datasets[0].calibration.mean);
  CHECK(fitted.datasets[0].calibration.mean == doctest::Approx(a.mean_error));
  // Rows 1, 11, 21, ... calibrate; the others are held out.
  CHECK(fitted.datasets[0].rows[0].calibration);
  CHECK_FALSE(fitted.datasets[0].rows[1].calibration);
  CHECK(fitted.datasets[0].held_out.rows == 1296);
  CHECK(fitted.datasets[1].unsupported == 0);
  CHECK(fitted.datasets[1].held_out.rows == 8);
}

TEST_CASE("validation: error summaries: mean, median and worst of absolute errors") {
  const ErrorSummary s = summarise({0.1, 0.3, 0.2, 0.4});
  CHECK(s.rows == 4);
  CHECK(s.mean == doctest::Approx(0.25));
  CHECK(s.median == doctest::Approx(0.25));
  CHECK(s.worst == doctest::Approx(0.4));
  CHECK(summarise({}).rows == 0);
}

TEST_CASE("validation: bad suites and datasets name the file, the line or the field") {
  Scratch s("true");
  const auto refused = [&](const std::string& suite_text, const std::string& data_name, const std::string& data,
                           const std::string& expected) {
    CAPTURE(expected);
    s.write("suite.json", suite_text);
    s.write(data_name, data);
    CHECK_THROWS_WITH_AS((void)load_suite(s.path("suite.json")), doctest::Contains(expected.c_str()), InputError);
  };
  const std::string suite = R"({"format": "oobleck.validation-suite.v1", "datasets": [{"name": "d", "file": "d.csv",
    "bounds": {"mean_error": 0.1, "worst_error": 0.2}}]})";
  const std::string header = "# GPUs,global batch,micro batch,hidden,heads,layers,seq,t,d,p,ms\n";
  refused(suite, "d.csv", header + "2,16,8,1024,16,24,1024,1,1,2\n", "d.csv:2: expected 11 comma-separated fields");
  refused(suite, "d.csv", header + "2,16,8,1024,16,24,1024,1,1,4,300\n",
          "d.csv:2: tensor x pipeline x data parallel degrees (1 x 4 x 1) must equal the GPUs (2)");
  refused(suite, "d.csv", header + "2,16,8,1024,16,24,1024,1,1,2,-3\n",
          "d.csv:2: iteration time (ms): expected a number in (0, 1e9]");
  refused(suite, "d.csv", header + "2,16,8,1024,16,23,1024,1,1,2,300\n", "23 blocks do not divide among 2 stages");
  refused(suite, "d.csv", header + "2,15,8,1024,16,24,1024,1,1,2,300\n",
          "global batch 15 is not a multiple of microbatch x data degree (8)");
  refused(suite, "d.csv", header + "2,16,x,1024,16,24,1024,1,1,2,300\n", "d.csv:2: micro batch: expected an integer");
  refused(suite, "d.csv", header, "d.csv: no runs");
  refused(suite, "d.csv", header + "2,16000000,1,1024,16,24,1024,1,1,2,300\n",
          "32000000 microbatch passes a pipeline (microbatches x stages x virtual stages); at most 10000000");
  refused(R"({"format": "oobleck.validation-suite.v1", "datasets": [{"name": "d", "file": "../d.csv",
    "bounds": {"mean_error": 0.1, "worst_error": 0.2}}]})",
          "d.csv", "", "datasets[0].file: expected a file name beside the suite");
  refused(R"({"format": "oobleck.validation-suite.v1", "datasets": [{"name": "d", "file": "d.csv"}]})", "d.csv", "",
          "datasets[0].bounds: missing");
  refused(R"({"format": "oobleck.validation-suite.v1", "datasets": [{"name": "d", "file": "d.json",
    "bounds": {"mean_error": 0.1, "worst_error": 0.2}}]})",
          "d.json", R"({"format": "oobleck.validation.v1", "rows": [{"model_name": "m", "model": {"hidden": 64,
    "feedforward": 256, "seq_size": 16, "attn_heads": 4, "attn_size": 15, "num_blocks": 2}, "execution": {}}]})",
          "rows[0].model.attn_size: expected hidden / attn_heads = 16");
  refused(R"({"format": "oobleck.validation-suite.v1", "max_compute_efficiency": 1.5, "datasets": [{"name": "d",
    "file": "d.csv", "bounds": {"mean_error": 0.1, "worst_error": 0.2}}]})",
          "d.csv", header + "2,16,8,1024,16,24,1024,1,1,2,300\n", "max_compute_efficiency");
}

TEST_CASE("validation: oobleck-sim validate reports, writes JSON, and exits 1 beyond the bounds") {
  Scratch s(OOBLECK_SIM_BINARY);
  const Run ok = s.run("validate --suite " + kSuite.string() + " --json " + s.str("v.json"));
  CHECK(ok.status == 0);
  CHECK(ok.out.find("vtrain-a100-single-node (1440 runs)") != std::string::npos);
  CHECK(ok.out.find("megatron-1T seq+sel, t8 p64 d1, B 512") != std::string::npos);
  const auto doc = nlohmann::json::parse(s.read("v.json"));
  CHECK(doc["format"] == "oobleck.validation-result.v1");
  CHECK(doc["within_bounds"] == true);
  CHECK(doc["datasets"][0]["rows"].size() == 1440);

  // The same data with bounds no model meets.
  fs::copy(fs::path(OOBLECK_SOURCE_DIR) / "tests/validation/vtrain-a100-single-node.csv", s.path("v.csv"));
  s.write("tight.json", R"({"format": "oobleck.validation-suite.v1", "datasets": [{"name": "v", "file": "v.csv",
    "calibrate_every": 10, "bounds": {"mean_error": 0.001, "worst_error": 0.002}}]})");
  const Run tight = s.run("validate --suite " + s.str("tight.json"));
  CHECK(tight.status == 1);
  CHECK(tight.out.find("EXCEEDED") != std::string::npos);
  CHECK(tight.err.find("beyond the bounds in " + s.str("tight.json")) != std::string::npos);

  const Run missing = s.run("validate --suite " + s.str("none.json"));
  CHECK(missing.status == 2);
  CHECK(missing.err.find("none.json") != std::string::npos);
}
