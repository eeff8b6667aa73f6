// oobleck-plan as a user runs it: exit codes, messages, files.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "oobleck/planner.h"
#include "reference.h"
#include "scratch.h"

using namespace oobleck;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = OOBLECK_SOURCE_DIR;
const std::string kBinary = OOBLECK_PLAN_BINARY;

using test::Run;
using test::Scratch;

std::string bundled() { return (kSource / "profiles/gpt3-1.3b-a100.handwritten.json").string(); }

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("cli: templates, instantiate and reconfigure on the bundled profile") {
  Scratch s(kBinary);
  Run r = s.run("templates --profile " + bundled() + " --max-nodes 6 --json " + s.path("t.json").string());
  REQUIRE(r.status == 0);
  const auto templates = read_json(s.path("t.json"));
  CHECK(templates["format"] == "oobleck.templates.v1");
  CHECK(templates["templates"].size() == 6);
  for (const auto& t : templates["templates"]) {
    CHECK(t["iteration_ms"].get<double>() > 0);
    CHECK(t["stages"][0]["layers"][0] == 0);
  }

  r = s.run("instantiate --profile " + bundled() + " --nodes 12 --fault-tolerance 2 --global-microbatches 64 --json " +
            s.path("plan.json").string());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Plan:") != std::string::npos);
  CHECK(r.out.find("Templates") != std::string::npos);
  const auto plan = read_json(s.path("plan.json"));
  CHECK(plan["format"] == "oobleck.plan.v1");
  CHECK(plan["fault_tolerance"] == 2);
  CHECK(plan["pipelines"].size() >= 3);
  int microbatches = 0, nodes = 0;
  for (const auto& p : plan["pipelines"]) {
    microbatches += p["microbatches"].get<int>();
    nodes += static_cast<int>(p["nodes"].size());
    CHECK(p["template_nodes"] == p["nodes"].size());
  }
  CHECK(microbatches == 64);
  CHECK(nodes == 12);

  const std::string victim = plan["pipelines"][0]["nodes"][0];
  r = s.run("reconfigure --profile " + bundled() + " --plan " + s.path("plan.json").string() + " --lost " + victim +
            " --added spare-a --json " + s.path("next.json").string());
  REQUIRE(r.status == 0);
  const auto next = read_json(s.path("next.json"));
  CHECK(next["lost"] == nlohmann::json::array({victim}));
  CHECK(next["added"] == nlohmann::json::array({"spare-a"}));
  CHECK(next["transfers"].is_array());
  CHECK_FALSE(next["transfers"].empty());
  for (const auto& t : next["transfers"]) CHECK(t["from_node"] != victim);

  // Re-planning everything is never slower, and usually copies more.
  r = s.run("reconfigure --profile " + bundled() + " --plan " + s.path("plan.json").string() + " --lost " + victim +
            " --added spare-a --replan-all --json " + s.path("all.json").string());
  REQUIRE(r.status == 0);
  const auto all = read_json(s.path("all.json"));
  CHECK(all["iteration_ms"].get<double>() <= next["iteration_ms"].get<double>() * (1 + 1e-9));
  CHECK(all["copy_bytes"].get<double>() >= 0);

  // JSON to stdout.
  r = s.run("templates --profile " + bundled() + " --max-nodes 2 --json -");
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.out)["templates"].size() == 2);
}

TEST_CASE("cli: the Oobleck failure case ends with three 2-node pipelines on all six survivors") {
  Scratch s(kBinary);
  s.write("profile.json", profile_to_json(test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 1000)));
  Run r = s.run("instantiate --profile " + s.path("profile.json").string() +
                " --nodes 8 --fault-tolerance 3 --global-microbatches 16 --json " + s.path("plan.json").string());
  REQUIRE(r.status == 0);
  const auto plan = read_json(s.path("plan.json"));
  REQUIRE(plan["pipelines"].size() == 4);
  const std::string a = plan["pipelines"][0]["nodes"][1], b = plan["pipelines"][2]["nodes"][0];
  r = s.run("reconfigure --profile " + s.path("profile.json").string() + " --plan " + s.path("plan.json").string() +
            " --lost " + a + "," + b + " --json " + s.path("next.json").string());
  REQUIRE(r.status == 0);
  const auto next = read_json(s.path("next.json"));
  REQUIRE(next["pipelines"].size() == 3);
  std::set<std::string> used;
  for (const auto& p : next["pipelines"]) {
    CHECK(p["template_nodes"] == 2);
    for (const auto& n : p["nodes"]) used.insert(n.get<std::string>());
  }
  CHECK(used.size() == 6);
  CHECK_FALSE(used.count(a));
  CHECK_FALSE(used.count(b));
  CHECK(next["global_microbatches"] == 16);
}

TEST_CASE("cli: bad input gets a clear message and a non-zero exit, never a half-written file") {
  Scratch s(kBinary);
  const std::string out = s.path("out.json").string();

  Run r = s.run("templates --profile " + s.path("missing.json").string() + " --max-nodes 2 --json " + out);
  CHECK(r.status == 2);
  CHECK(r.err.find("missing.json: cannot read") != std::string::npos);

  s.write("broken.json", "{\n  \"format\": \"oobleck.profile.v1\",\n  \"model\": {\n");
  r = s.run("templates --profile " + s.path("broken.json").string() + " --max-nodes 2");
  CHECK(r.status == 2);
  CHECK(r.err.find("broken.json:4:") != std::string::npos);

  s.write("negative.json", profile_to_json(test::uniform_profile(3, 1, 1.0, 2.0, 400, 10, 1000)));
  {
    std::ifstream in(s.path("negative.json"));
    std::stringstream text;
    text << in.rdbuf();
    std::string body = text.str();
    body.replace(body.find("\"latency_ms\": 0.01"), 18, "\"latency_ms\": -3");
    s.write("negative.json", body);
  }
  r = s.run("templates --profile " + s.path("negative.json").string() + " --max-nodes 2");
  CHECK(r.status == 2);
  CHECK(r.err.find("hardware.latency_ms: expected a number in [0, 1000000000], got -3") != std::string::npos);

  r = s.run("instantiate --profile " + bundled() + " --nodes abc --fault-tolerance 1 --global-microbatches 8");
  CHECK(r.status == 2);
  CHECK(r.err.find("--nodes") != std::string::npos);

  r = s.run("instantiate --profile " + bundled() + " --nodes 4 --hostfile h --fault-tolerance 1 --global-microbatches 8");
  CHECK(r.status == 2);

  r = s.run("instantiate --profile " + bundled() + " --fault-tolerance 1 --global-microbatches 8");
  CHECK(r.status == 2);
  CHECK(r.err.find("--nodes N or --hostfile H") != std::string::npos);

  s.write("hosts", "a slots=8\nb slots=2\n");
  r = s.run("instantiate --profile " + bundled() + " --hostfile " + s.path("hosts").string() +
            " --fault-tolerance 1 --global-microbatches 8");
  CHECK(r.status == 2);
  CHECK(r.err.find("hosts:2: host b has slots=2") != std::string::npos);

  // No plan: too many failures to tolerate; nothing written.
  r = s.run("instantiate --profile " + bundled() + " --nodes 3 --fault-tolerance 5 --global-microbatches 8 --json " + out);
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot form f+1 = 6 pipelines") != std::string::npos);
  CHECK_FALSE(fs::exists(out));

  r = s.run("templates --profile " + bundled() + " --max-nodes 2 --json " + s.path("no/such/dir/out.json").string());
  CHECK(r.status == 2);
  CHECK(r.err.find("no/such/dir/out.json: cannot write") != std::string::npos);

  r = s.run("frobnicate");
  CHECK(r.status == 2);
  r = s.run("--help");
  CHECK(r.status == 0);
  CHECK(r.out.find("instantiate") != std::string::npos);
}

TEST_CASE("cli: hostfile names and an explicit M") {
  Scratch s(kBinary);
  s.write("hosts", "# four hosts\ngpu-a slots=8\ngpu-b slots=8\ngpu-c\ngpu-d slots=8 max_slots=8\n");
  Run r = s.run("instantiate --profile " + bundled() + " --hostfile " + s.path("hosts").string() +
                " --fault-tolerance 1 --global-microbatches 16 --microbatches 5 --json " + s.path("plan.json").string());
  REQUIRE(r.status == 0);
  const auto plan = read_json(s.path("plan.json"));
  CHECK(plan["microbatches"] == 5);
  std::vector<std::string> order;
  for (const auto& p : plan["pipelines"]) {
    for (const auto& n : p["nodes"]) order.push_back(n.get<std::string>());
  }
  CHECK(order == std::vector<std::string>{"gpu-a", "gpu-b", "gpu-c", "gpu-d"});
  for (const auto& t : plan["templates"]) CHECK(t["microbatches"] == 5);
}

TEST_CASE("cli: reconfigure refuses unknown nodes and says when a checkpoint is needed") {
  Scratch s(kBinary);
  s.write("profile.json", profile_to_json(test::uniform_profile(4, 1, 1.0, 2.0, 400, 10, 1000)));
  const std::string profile = s.path("profile.json").string();
  Run r = s.run("instantiate --profile " + profile + " --nodes 4 --fault-tolerance 1 --global-microbatches 8 --json " +
                s.path("plan.json").string());
  REQUIRE(r.status == 0);
  const auto plan = read_json(s.path("plan.json"));
  const std::string first = plan["pipelines"][0]["nodes"][0], second = plan["pipelines"][1]["nodes"][0];

  r = s.run("reconfigure --profile " + profile + " --plan " + s.path("plan.json").string() + " --lost ghost");
  CHECK(r.status == 2);
  CHECK(r.err.find("node \"ghost\" is not in the plan") != std::string::npos);
  r = s.run("reconfigure --profile " + profile + " --plan " + s.path("plan.json").string() + " --lost " + first +
            " --node-speed ghost=0.5");
  CHECK(r.status == 2);
  CHECK(r.err.find("--node-speed: node \"ghost\" is not in the cluster") != std::string::npos);
  r = s.run("reconfigure --profile " + profile + " --plan " + s.path("plan.json").string() + " --lost " + first +
            " --node-speed " + second + "=half");
  CHECK(r.status == 2);
  CHECK(r.err.find("expected NAME=FACTOR") != std::string::npos);

  r = s.run("reconfigure --profile " + profile + " --plan " + s.path("plan.json").string() + " --lost " + first + "," +
            second + " --json " + s.path("next.json").string());
  CHECK(r.status == 3);
  CHECK(r.err.find("no surviving replica") != std::string::npos);
  CHECK(r.err.find("checkpoint") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("next.json")));

  s.write("other.json", profile_to_json(test::uniform_profile(5, 1, 1.0, 2.0, 400, 10, 1000)));
  r = s.run("reconfigure --profile " + s.path("other.json").string() + " --plan " + s.path("plan.json").string() +
            " --lost " + first);
  CHECK(r.status == 2);
  CHECK(r.err.find("made for 4 layers") != std::string::npos);
}

TEST_CASE("cli: Oobleck profile folders can be planned directly or converted") {
  Scratch s(kBinary);
  const std::string folder = (kSource / "tests/data/oobleck-gpt2-tiny").string();
  Run r = s.run("import-oobleck " + folder + " --out " + s.path("imported.json").string() + " --gpu-memory-bytes 17179869184");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Assumptions:") != std::string::npos);
  const Profile imported = load_profile(s.path("imported.json"));
  CHECK(imported.hardware.gpu_memory_bytes == 17179869184LL);
  r = s.run("templates --profile " + folder + " --max-nodes 2");
  CHECK(r.status == 0);
  CHECK(r.err.find("assumed") != std::string::npos);
}

TEST_CASE("cli: --recompute: templates where memory allows none without it, kept through reconfigure") {
  Scratch s(kBinary);
  const std::string big = (kSource / "profiles/gpt3-175b-a100.analytic.json").string();
  const auto smallest = [&](const std::string& recompute) {
    const Run r = s.run("templates --profile " + big + " --max-nodes 8 --recompute " + recompute + " --json -");
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out)["templates"][0];
  };
  const auto none = smallest("none"), automatic = smallest("auto"), full = smallest("full");
  const auto selective = smallest("selective");
  // Recomputing fits the model on fewer nodes; every stage of `full` recomputes.
  CHECK(automatic["nodes"].get<int>() < none["nodes"].get<int>());
  CHECK(selective["nodes"].get<int>() < none["nodes"].get<int>());
  CHECK(selective["nodes"].get<int>() >= full["nodes"].get<int>());
  bool recomputes = false;
  for (const auto& st : automatic["stages"]) recomputes |= st.value("recompute", "none") != "none";
  CHECK(recomputes);
  for (const auto& st : full["stages"]) CHECK(st["recompute"] == "full");
  for (const auto& st : selective["stages"]) CHECK(st["recompute"] == "selective");
  for (const auto& st : none["stages"]) CHECK_FALSE(st.contains("recompute"));
  // On as many nodes, choosing per stage (selectively where that suffices)
  // is faster than recomputing everything fully: the attention cores are a
  // few per cent of a block's forward.
  const Run both = s.run("templates --profile " + big + " --max-nodes 8 --recompute auto --json -");
  const Run all = s.run("templates --profile " + big + " --max-nodes 8 --recompute full --json -");
  REQUIRE(both.status == 0);
  REQUIRE(all.status == 0);
  const auto at_smallest_full = [&](const Run& r) {
    const auto parsed = nlohmann::json::parse(r.out);
    for (const auto& t : parsed["templates"]) {
      if (t["nodes"] == full["nodes"]) return t["iteration_ms"].get<double>();
    }
    return 0.0;
  };
  CHECK(at_smallest_full(both) < 0.9 * at_smallest_full(all));
  // A profile that records no attention cores cannot recompute them.
  const Run without = s.run("templates --profile " + (kSource / "profiles/gpt3-175b-a100.handwritten.json").string() +
                            " --max-nodes 8 --recompute selective");
  CHECK(without.status == 2);
  CHECK(without.err.find("attention_core") != std::string::npos);

  REQUIRE(s.run("instantiate --profile " + big + " --nodes 10 --fault-tolerance 1 --global-microbatches 64 "
                "--recompute auto --json " + s.str("plan.json"))
              .status == 0);
  const auto plan = read_json(s.path("plan.json"));
  CHECK(plan["recompute"] == "auto");
  // Read back, the plan and its stages are the same.
  const Profile profile = load_profile(big);
  const Plan parsed = parse_plan(s.read("plan.json"), "plan.json", profile);
  CHECK(parsed.recompute == RecomputePolicy::automatic);
  for (std::size_t p = 0; p < parsed.pipelines.size(); ++p) {
    for (std::size_t k = 0; k < parsed.pipelines[p].stages.size(); ++k) {
      CHECK((parsed.pipelines[p].stages[k].recompute == Recompute::full) ==
            (plan["pipelines"][p]["stages"][k].value("recompute", "none") == "full"));
    }
  }
  const Run next = s.run("reconfigure --profile " + big + " --plan " + s.str("plan.json") +
                         " --lost node0 --json " + s.str("next.json"));
  REQUIRE(next.status == 0);
  CHECK(read_json(s.path("next.json"))["recompute"] == "auto");

  // Bad values, named.
  const Run bad = s.run("templates --profile " + big + " --max-nodes 2 --recompute sometimes");
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--recompute") != std::string::npos);
  auto edited = plan;
  edited["pipelines"][0]["stages"][0]["recompute"] = "half";
  s.write("edited.json", edited.dump());
  CHECK_THROWS_WITH_AS((void)parse_plan(s.read("edited.json"), "edited.json", profile),
                       doctest::Contains("pipelines[0].stages[0].recompute: expected none, selective or full"), InputError);
  edited = plan;
  edited["recompute"] = "maybe";
  s.write("edited.json", edited.dump());
  CHECK_THROWS_WITH_AS((void)parse_plan(s.read("edited.json"), "edited.json", profile),
                       doctest::Contains("recompute: expected none, auto, selective or full"), InputError);
}

TEST_CASE("cli: instantiate over several microbatch sizes with --global-batch") {
  Scratch s(kBinary);
  for (const int size : {1, 2, 4}) {
    Profile p = test::uniform_profile(8, 1, 1.0 + size, 2.0 + 2 * size, 1 << 20, Bytes{size} << 20, Bytes{1} << 30);
    p.microbatch_size = size;
    s.write("mb" + std::to_string(size) + ".json", profile_to_json(p));
  }
  const std::string profiles = "--profile " + s.str("mb1.json") + " --profile " + s.str("mb2.json") + " " + s.str("mb4.json");
  const Run r = s.run("instantiate " + profiles + " --nodes 4 --fault-tolerance 1 --global-batch 32 --json " +
                      s.str("plan.json"));
  REQUIRE(r.status == 0);
  const auto plan = read_json(s.path("plan.json"));
  REQUIRE(plan["microbatch_sizes"].size() == 3);
  int chosen = 0;
  double best = 1e300;
  for (const auto& c : plan["microbatch_sizes"]) {
    CHECK(c["global_microbatches"] == 32 / c["microbatch_size"].get<int>());
    best = std::min(best, c["iteration_ms"].get<double>());
    if (c["chosen"] == true) {
      ++chosen;
      CHECK(c["microbatch_size"] == plan["microbatch_size"]);
      CHECK(c["iteration_ms"].get<double>() == doctest::Approx(plan["iteration_ms"].get<double>()));
      CHECK(plan["global_microbatches"] == c["global_microbatches"]);
    }
  }
  CHECK(chosen == 1);
  CHECK(plan["iteration_ms"].get<double>() == doctest::Approx(best));
  // The plan is the chosen profile's: it reads back against it.
  const Profile chosen_profile =
      load_profile(s.path("mb" + std::to_string(plan["microbatch_size"].get<int>()) + ".json"));
  CHECK(parse_plan(s.read("plan.json"), "plan.json", chosen_profile).pipelines.size() == plan["pipelines"].size());
  const Run human = s.run("instantiate " + profiles + " --nodes 4 --fault-tolerance 1 --global-batch 32");
  CHECK(human.out.find("Microbatch sizes") != std::string::npos);
  CHECK(human.out.find("chosen") != std::string::npos);

  // Refusals: both batches, neither, several profiles without samples, M with samples, no size dividing.
  CHECK(s.run("instantiate " + profiles + " --nodes 4 --fault-tolerance 1 --global-batch 32 --global-microbatches 8")
            .status == 2);
  const Run neither = s.run("instantiate --profile " + s.str("mb1.json") + " --nodes 4 --fault-tolerance 1");
  CHECK(neither.status == 2);
  CHECK(neither.err.find("--global-microbatches B or --global-batch SAMPLES") != std::string::npos);
  const Run several = s.run("instantiate " + profiles + " --nodes 4 --fault-tolerance 1 --global-microbatches 8");
  CHECK(several.status == 2);
  CHECK(several.err.find("--global-batch") != std::string::npos);
  CHECK(s.run("instantiate " + profiles + " --nodes 4 --fault-tolerance 1 --global-batch 32 --microbatches 4").status ==
        2);
  const Run odd = s.run("instantiate --profile " + s.str("mb2.json") + " " + s.str("mb4.json") +
                        " --nodes 4 --fault-tolerance 1 --global-batch 3 --json " + s.str("odd.json"));
  CHECK(odd.status == 2);
  CHECK(odd.err.find("no microbatch size given divides it") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("odd.json")));
}

TEST_CASE("cli: --gradient-sync after-backward is priced, kept in the plan and through reconfigure") {
  Scratch s(kBinary);
  const std::string profile = (kSource / "profiles/gpt3-1.3b-a100.analytic.json").string();
  const std::string args = "instantiate --profile " + profile + " --nodes 64 --fault-tolerance 1 --global-microbatches 512";
  REQUIRE(s.run(args + " --json " + s.str("layer.json")).status == 0);
  REQUIRE(s.run(args + " --gradient-sync after-backward --json " + s.str("after.json")).status == 0);
  const auto layer = read_json(s.path("layer.json")), after = read_json(s.path("after.json"));
  CHECK_FALSE(layer.contains("gradient_sync"));
  CHECK(after["gradient_sync"] == "after-backward");
  // Nothing of the all-reduces overlaps the backward: more is exposed.
  CHECK(after["sync_ms"].get<double>() > layer["sync_ms"].get<double>());
  const Profile loaded = load_profile(profile);
  CHECK(parse_plan(s.read("after.json"), "after.json", loaded).gradient_sync == GradientSync::after_backward);
  REQUIRE(s.run("reconfigure --profile " + profile + " --plan " + s.str("after.json") + " --lost node0 --json " +
                s.str("next.json"))
              .status == 0);
  CHECK(read_json(s.path("next.json"))["gradient_sync"] == "after-backward");
  CHECK(s.run(args + " --gradient-sync sometimes").status == 2);
  auto edited = after;
  edited["gradient_sync"] = "never";
  s.write("edited.json", edited.dump());
  CHECK_THROWS_WITH_AS((void)parse_plan(s.read("edited.json"), "edited.json", loaded),
                       doctest::Contains("gradient_sync: expected per-layer, after-backward or buckets"), InputError);

  // In buckets of 400 MiB (four 1.3B blocks each): recorded, priced as the
  // simulator plays it, and kept through reconfigure.
  REQUIRE(s.run(args + " --gradient-sync buckets --gradient-bucket-mb 400 --json " + s.str("buckets.json")).status ==
          0);
  const auto buckets = read_json(s.path("buckets.json"));
  CHECK(buckets["gradient_sync"] == "buckets");
  CHECK(buckets["gradient_bucket_bytes"].get<double>() == 400.0 * (1 << 20));
  const Plan parsed = parse_plan(s.read("buckets.json"), "buckets.json", loaded);
  CHECK(parsed.gradient_sync == GradientSync::buckets);
  CHECK(parsed.gradient_bucket_bytes == 400.0 * (1 << 20));
  REQUIRE(s.run("reconfigure --profile " + profile + " --plan " + s.str("buckets.json") + " --lost node0 --json " +
                s.str("next-buckets.json"))
              .status == 0);
  const auto next = read_json(s.path("next-buckets.json"));
  CHECK(next["gradient_sync"] == "buckets");
  CHECK(next["gradient_bucket_bytes"].get<double>() == 400.0 * (1 << 20));
  CHECK(s.run(args + " --gradient-sync buckets --gradient-bucket-mb 0").status == 2);
  auto zero = buckets;
  zero["gradient_bucket_bytes"] = 0;
  s.write("zero.json", zero.dump());
  CHECK_THROWS_WITH_AS((void)parse_plan(s.read("zero.json"), "zero.json", loaded),
                       doctest::Contains("gradient_bucket_bytes"), InputError);
}

TEST_CASE("cli: --pipelines-per-node: r pipelines on every node, chosen with auto, kept through reconfigure") {
  Scratch s(kBinary);
  const std::string profile = (kSource / "profiles/gpt3-1.3b-h100.analytic.json").string();
  const std::string plan = s.path("plan.json").string();
  Run r = s.run("instantiate --profile " + profile +
                " --nodes 4 --fault-tolerance 1 --global-microbatches 64 --pipelines-per-node auto --json " + plan);
  REQUIRE(r.status == 0);
  const auto chosen = read_json(plan);
  CHECK(chosen["pipelines_per_node"] == 8);
  CHECK(chosen["pipelines"].size() == 32);
  CHECK(chosen["nodes"] == 4);
  r = s.run("instantiate --profile " + profile + " --nodes 4 --fault-tolerance 1 --global-microbatches 64 "
            "--pipelines-per-node 2");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Pipelines share nodes: 2 on each node, each on 4 of its GPUs") != std::string::npos);
  const std::string next = s.path("next.json").string();
  r = s.run("reconfigure --profile " + profile + " --plan " + plan + " --lost node1 --json " + next);
  REQUIRE(r.status == 0);
  const auto after = read_json(next);
  CHECK(after["pipelines_per_node"] == 8);
  CHECK(after["pipelines"].size() == 24);
  CHECK(after["copy_bytes"] == 0);
  // Bad requests: exit 2 and what was expected.
  r = s.run("instantiate --profile " + profile + " --nodes 4 --fault-tolerance 1 --global-microbatches 64 "
            "--pipelines-per-node 3");
  CHECK(r.status == 2);
  CHECK(r.err.find("--pipelines-per-node \"3\": expected auto or a divisor of the 8 GPUs per node") != std::string::npos);
  r = s.run("instantiate --profile " + profile + " --nodes 4 --fault-tolerance 1 --global-microbatches 64 "
            "--pipelines-per-node 2 --node-speed node1=0.5");
  CHECK(r.status == 2);
  CHECK(r.err.find("--node-speed plans pipelines on whole nodes") != std::string::npos);
  r = s.run("instantiate --profile " + profile + " --nodes 4 --fault-tolerance 4 --global-microbatches 64 "
            "--pipelines-per-node 8");
  CHECK(r.status == 3);  // no plan
  CHECK(r.err.find("4 nodes cannot hold pipelines on f+1 = 5 nodes") != std::string::npos);
}

TEST_CASE("cli: --interleave: devices holding several chunks where that plays faster, kept through reconfigure") {
  Scratch s(kBinary);
  const std::string profile = (kSource / "profiles/gpt3-175b-a100.analytic.json").string();
  const std::string plan = s.path("plan.json").string();
  Run r = s.run("instantiate --profile " + profile +
                " --nodes 64 --fault-tolerance 1 --global-microbatches 128 --interleave 4 --json " + plan);
  REQUIRE(r.status == 0);
  const auto chosen = read_json(plan);
  CHECK(chosen["interleave"] == 4);
  CHECK(chosen["pipelines"][0]["interleave"].get<int>() > 1);
  r = s.run("instantiate --profile " + profile + " --nodes 64 --fault-tolerance 1 --global-microbatches 128 "
            "--interleave 4");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("chunks a device: n0-n15, 16 devices of 8 GPUs") != std::string::npos);
  const std::string next = s.path("next.json").string();
  r = s.run("reconfigure --profile " + profile + " --plan " + plan + " --lost node5 --json " + next);
  REQUIRE(r.status == 0);
  CHECK(read_json(next)["interleave"] == 4);
  r = s.run("instantiate --profile " + profile + " --nodes 64 --fault-tolerance 1 --global-microbatches 128 "
            "--interleave 65");
  CHECK(r.status == 2);
  r = s.run("instantiate --profile " + profile + " --nodes 64 --fault-tolerance 1 --global-microbatches 128 "
            "--interleave 2 --node-speed node1=0.5");
  CHECK(r.status == 2);
  CHECK(r.err.find("--node-speed plans pipelines without interleaving") != std::string::npos);
}
