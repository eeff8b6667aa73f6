// Profiles, Oobleck imports, hostfiles and plans: good input round-trips,
// bad input names the file and the field.
#include <doctest/doctest.h>

#include <filesystem>

#include "oobleck/planner.h"
#include "input_errors.h"
#include "reference.h"

using namespace oobleck;
using test::plan_error;
using test::profile_error;

namespace {

const std::filesystem::path kSource = OOBLECK_SOURCE_DIR;

std::string valid_profile_text() {
  return R"({
  "format": "oobleck.profile.v1",
  "model": {"name": "tiny", "layers": 2},
  "hardware": {"name": "box", "gpus_per_node": 2, "gpu_memory_bytes": 1000000,
               "intra_node_bytes_per_s": 1e11, "inter_node_bytes_per_s": 1e10, "latency_ms": 0.01},
  "microbatch_size": 2,
  "layers": [
    {"name": "a", "forward_ms": 1, "backward_ms": 2, "param_bytes": 100, "optimizer_bytes": 200,
     "activation_bytes": 10, "output_bytes": 1000, "tensor_parallel": {"2": {"forward_ms": 0.6, "backward_ms": 1.1}}},
    {"name": "b", "forward_ms": 1.5, "backward_ms": 3, "param_bytes": 100, "optimizer_bytes": 200,
     "activation_bytes": 10, "output_bytes": 1000}
  ]
})";
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a valid profile loads, round-trips and keeps per-degree measurements") {
  const Profile p = parse_profile(valid_profile_text(), "p.json");
  CHECK(p.model_name == "tiny");
  CHECK(p.layers.size() == 2);
  CHECK(p.hardware.gpus_per_node == 2);
  REQUIRE(p.layers[0].tensor_parallel.size() == 1);
  const CostModel cost(p, 4);
  CHECK(cost.layer_forward_ms(0, 2) == doctest::Approx(0.6));  // measured
  // Not measured: 1/t of the work plus two all-reduces of the output inside the node.
  const double allreduce = 2.0 * 1 / 2 * 1000 / 1e11 * 1000 + 2 * 1 * 0.01;
  CHECK(cost.layer_forward_ms(1, 2) == doctest::Approx(1.5 / 2 + 2 * allreduce));
  const Profile again = parse_profile(profile_to_json(p), "again.json");
  CHECK(profile_fingerprint(again) == profile_fingerprint(p));
}

TEST_CASE("the bundled profiles load") {
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "profiles")) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path());
    const Profile p = load_profile(entry.path());
    CHECK(p.layers.size() > 2);
    CHECK(p.hardware.gpus_per_node >= 1);
  }
}

TEST_CASE("bad profiles: the message names the file, the field and what was expected") {
  const std::string good = valid_profile_text();
  CHECK(profile_error(replace(good, "\"forward_ms\": 1,", "\"forward_ms\": -1,")) ==
        "p.json: layers[0].forward_ms: expected a number in [0, 1000000000], got -1");
  CHECK(profile_error(replace(good, "\"param_bytes\": 100, \"optimizer_bytes\": 200,\n     \"activation_bytes\": 10, \"output_bytes\": 1000}",
                         "\"optimizer_bytes\": 200,\n     \"activation_bytes\": 10, \"output_bytes\": 1000}")) ==
        "p.json: layers[1].param_bytes: missing (required field)");
  CHECK(profile_error(replace(good, "\"gpus_per_node\": 2", "\"gpus_per_node\": \"two\"")) ==
        "p.json: hardware.gpus_per_node: expected an integer, got string \"two\"");
  CHECK(profile_error(replace(good, "oobleck.profile.v1", "oobleck.profile.v9")) ==
        "p.json: format: expected \"oobleck.profile.v1\", got \"oobleck.profile.v9\"");
  CHECK(profile_error(replace(good, "\"2\": {\"forward_ms\"", "\"3\": {\"forward_ms\"")).find(
            "layers[0].tensor_parallel.3: expected a degree key that divides") != std::string::npos);
  CHECK(profile_error(replace(good, "\"layers\": [", "\"layers\": [}")).rfind("p.json:7:", 0) == 0);  // line:column
  CHECK(profile_error(replace(good, "\"2\": {\"forward_ms\"", "\"02\": {\"forward_ms\"")).find(
            "tensor_parallel.02: expected a degree key") != std::string::npos);  // one spelling per degree
  CHECK(profile_error(replace(good, "\"microbatch_size\": 2", "\"microbatch_size\": 2.5")) ==
        "p.json: microbatch_size: expected an integer, got number 2.5");
  CHECK(profile_error(replace(good, "\"param_bytes\": 100,", "\"param_bytes\": 100000000000000000,")).find(
            "layers[0].param_bytes: expected an integer in [0, 70368744177664]") != std::string::npos);
  CHECK(profile_error("[1, 2]").find("expected a JSON object") != std::string::npos);
  CHECK(profile_error("").find("not valid JSON") != std::string::npos);
  CHECK_THROWS_WITH_AS((void)load_profile(kSource / "no-such-profile.json"), doctest::Contains("no-such-profile.json"),
                       InputError);
}

TEST_CASE("Oobleck profile folders import, with their assumptions listed") {
  const auto folder = kSource / "tests/data/oobleck-gpt2-tiny";
  const Profile p = import_oobleck_profile(folder);
  REQUIRE(p.layers.size() == 4);
  CHECK(p.microbatch_size == 2);
  CHECK(p.layers[1].forward_ms == doctest::Approx(2.0));
  CHECK(p.layers[1].param_bytes == 28320768);
  CHECK(p.layers[1].optimizer_bytes == 3 * 28320768);
  CHECK(p.layers[3].activation_bytes == 103022592);
  CHECK(p.layers[3].output_bytes == p.layers[3].activation_bytes);
  CHECK(p.hardware.gpus_per_node == 4);
  // The sample was written with 100 GB/s in a node, 10 GB/s across and 0.02 ms latency.
  CHECK(p.hardware.intra_node_bytes_per_s == doctest::Approx(100e9).epsilon(1e-6));
  CHECK(p.hardware.inter_node_bytes_per_s == doctest::Approx(10e9).epsilon(1e-6));
  CHECK(p.hardware.latency_ms == doctest::Approx(0.02).epsilon(1e-6));
  // Its measured points inside a node (written at 100 GB/s and 0.002 ms a
  // ring step) price tensor-parallel all-reduces: each prices itself.
  REQUIRE(p.hardware.intra_node_allreduce_table.size() == 6);  // 3 layer sizes x 2 group sizes
  const CostModel imported(p, 2);
  for (const auto& point : p.hardware.intra_node_allreduce_table) {
    CHECK(point.ms == doctest::Approx(ring_allreduce_ms(point.bytes, point.ranks, 100e9, 0.002)).epsilon(1e-6));
    CHECK(imported.intra_node_allreduce_ms(point.bytes, point.ranks) == doctest::Approx(point.ms));
  }
  CHECK(p.notes.size() >= 5);
  // The converted profile is a valid oobleck.profile.v1 and plans like the folder.
  const Profile converted = parse_profile(profile_to_json(p), "converted.json");
  CHECK(profile_fingerprint(converted) == profile_fingerprint(p));
  CHECK(load_profile(folder).layers.size() == 4);
  OobleckImportOptions options;
  options.microbatch_size = 8;
  CHECK_THROWS_WITH_AS((void)import_oobleck_profile(folder, options), doctest::Contains("no mb8.json"), InputError);
  CHECK_THROWS_WITH_AS((void)import_oobleck_profile(kSource / "profiles"), doctest::Contains("no mb{B}.json"),
                       InputError);
}

TEST_CASE("hostfiles: MPI style, slots must match the nodes' GPUs") {
  const auto hosts = parse_hostfile("# cluster\nalpha slots=8\nbeta slots=8 max_slots=8\n\ngamma  # default slots\n",
                                    "hosts", 8);
  CHECK(hosts == std::vector<std::string>{"alpha", "beta", "gamma"});
  CHECK_THROWS_WITH_AS((void)parse_hostfile("alpha slots=8\nbeta slots=4\n", "hosts", 8),
                       doctest::Contains("hosts:2: host beta has slots=4"), InputError);
  CHECK_THROWS_WITH_AS((void)parse_hostfile("alpha slots=8\nalpha slots=8\n", "hosts", 8),
                       doctest::Contains("hosts:2: host alpha is listed twice"), InputError);
  CHECK_THROWS_WITH_AS((void)parse_hostfile("alpha gpus=8\n", "hosts", 8), doctest::Contains("hosts:1: expected \"slots=N\""),
                       InputError);
  CHECK_THROWS_WITH_AS((void)parse_hostfile("alpha slots=x\n", "hosts", 8), doctest::Contains("positive number"),
                       InputError);
  CHECK_THROWS_AS((void)parse_hostfile("# nothing\n", "hosts", 8), InputError);
}

TEST_CASE("plans round-trip through JSON, and bad plans are refused") {
  const Profile profile = test::uniform_profile(6, 2, 1.0, 2.0, 1000, 100, 1 << 20);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 5);
  const Plan plan = instantiate(cost, templates, {"a", "b", "c", "d", "e"}, 1, 9);
  const std::string text = plan_to_json(plan, templates, profile);
  const Plan back = parse_plan(text, "plan.json", profile);
  REQUIRE(back.pipelines.size() == plan.pipelines.size());
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    CHECK(back.pipelines[i].nodes == plan.pipelines[i].nodes);
    CHECK(back.pipelines[i].stages == plan.pipelines[i].stages);
    CHECK(back.pipelines[i].microbatches == plan.pipelines[i].microbatches);
  }
  CHECK(back.fault_tolerance == 1);
  CHECK(back.global_microbatches == 9);
  CHECK(back.profile_fingerprint == profile_fingerprint(profile));

  const Profile other = test::uniform_profile(5, 2, 1.0, 2.0, 1000, 100, 1 << 20);
  CHECK(plan_error(text, other).find("the plan was made for 6 layers") != std::string::npos);
  CHECK(plan_error(replace(text, "\"global_microbatches\": 9", "\"global_microbatches\": 10"), profile)
            .find("microbatches add up to 9") != std::string::npos);
  CHECK(plan_error(replace(text, "\"format\": \"oobleck.plan.v1\"", "\"format\": \"other\""), profile) ==
        "plan.json: format: expected \"oobleck.plan.v1\", got \"other\"");
  CHECK(plan_error(replace(text, "\"a\"", "\"b\""), profile).find("appears twice") != std::string::npos);
}

TEST_CASE("plans with stages over whole nodes round-trip; a stage may not outrun its pipeline or the plan's span") {
  // Two layers of 1500 bytes' state on GPUs of 1000, one per node: each
  // layer needs a stage over two or three nodes.
  const Profile profile = test::uniform_profile(2, 1, 1.0, 2.0, 1500, 10, 1000);
  CostModel cost(profile, 4);
  cost.set_tensor_parallel_nodes(3);
  const TemplateSet templates = build_templates(cost, 6);
  const Plan plan = instantiate(cost, templates, {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, 1, 8);
  REQUIRE(plan.pipelines.size() == 2);
  CHECK(plan.tensor_parallel_nodes == 3);
  const std::string text = plan_to_json(plan, templates, profile);
  const Plan back = parse_plan(text, "plan.json", profile);
  REQUIRE(back.pipelines.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(back.pipelines[i].stages == plan.pipelines[i].stages);
    for (const auto& s : back.pipelines[i].stages) CHECK(s.node_span == s.gpus);
  }
  CHECK(back.tensor_parallel_nodes == 3);
  // Without the field, the widest stage's span; below it, refused.
  const std::string field = "\"tensor_parallel_nodes\": 3";
  REQUIRE(text.find(field) != std::string::npos);
  CHECK(parse_plan(replace(text, ",\n  " + field, ""), "plan.json", profile).tensor_parallel_nodes == 3);
  CHECK(plan_error(replace(text, field, "\"tensor_parallel_nodes\": 2"), profile).find("tensor_parallel_nodes") !=
        std::string::npos);
  CHECK(plan_error(replace(text, field, "\"tensor_parallel_nodes\": 9"), profile).find("tensor_parallel_nodes") !=
        std::string::npos);
  // The 6-node pipeline's second stage moved to its last node: three nodes from there are more than it has.
  const std::string error = plan_error(replace(text, "\"node\": 3", "\"node\": 5"), profile);
  CHECK(error.find("stages[1].node") != std::string::npos);
  CHECK(error.find("needs more than the pipeline's 6") != std::string::npos);
  // A degree neither dividing a node's GPUs nor whole nodes of them.
  const Profile two = test::uniform_profile(2, 2, 1.0, 2.0, 100, 10, 1 << 20);
  CostModel two_cost(two, 2);
  two_cost.set_tensor_parallel_nodes(2);
  const TemplateSet two_templates = build_templates(two_cost, 2);
  const std::string two_text = plan_to_json(instantiate(two_cost, two_templates, {"a", "b"}, 0, 2), two_templates, two);
  CHECK(parse_plan(two_text, "plan.json", two).pipelines.size() >= 1);
  CHECK(plan_error(replace(two_text, "\"gpus\": 2", "\"gpus\": 3"), two).find("or a multiple of it") != std::string::npos);
}

