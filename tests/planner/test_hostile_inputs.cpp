// Hostile profiles and plans: values nested 100,000 deep, megabyte-long
// values and keys, numbers beyond double, integers that would wrap, keys
// given twice. Each is refused with a short message naming the file and
// where, and oobleck-plan exits 2 and writes nothing.
#include <doctest/doctest.h>

#include <filesystem>

#include "input_errors.h"
#include "oobleck/planner.h"
#include "scratch.h"

using namespace oobleck;
using test::profile_error;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = OOBLECK_SOURCE_DIR;
const std::string kBinary = OOBLECK_PLAN_BINARY;
const fs::path kBundled = kSource / "profiles/gpt3-1.3b-a100.handwritten.json";

// Longer than any message about one field needs; the megabyte values must not show.
constexpr std::size_t kShortMessage = 300;

std::string nested_arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// `text` with its first `from` replaced by `to`.
std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

std::string bundled_text() { return read_text_file(kBundled); }

// The bundled profile with `from` replaced by `to` is refused with `message`.
struct Refusal {
  std::string from, to, message;
};
void check_refusals(std::initializer_list<Refusal> refusals) {
  const std::string good = bundled_text();
  for (const Refusal& r : refusals) {
    CAPTURE(r.to);
    CHECK(profile_error(with(good, r.from, r.to)) == r.message);
  }
}

}  // namespace

TEST_CASE("hostile profiles: a value nested 100,000 deep is refused with the file, line and column") {
  const std::string good = bundled_text();
  // The profile that once overflowed the stack while its message was written.
  for (const std::size_t depth : {std::size_t{100000}, std::size_t{10000}, std::size_t{65}}) {
    CAPTURE(depth);
    CHECK(profile_error(with(good, "\"microbatch_size\": 4", "\"microbatch_size\": " + nested_arrays(depth))) ==
          "p.json:22:85: arrays and objects nested deeper than 64 levels; expected at most 64");
  }
  // The model section is free-form, and bounded the same way.
  CHECK(profile_error(with(good, "\"dtype\": \"bf16\"", "\"dtype\": " + nested_arrays(100000)))
            .rfind("p.json:12:76: arrays and objects nested deeper than 64 levels", 0) == 0);
  // Deep but within the limit, a wrong value is described in a few characters.
  const std::string message =
      profile_error(with(good, "\"microbatch_size\": 4", "\"microbatch_size\": " + nested_arrays(60)));
  CHECK(message == "p.json: microbatch_size: expected an integer, got array " + std::string(37, '[') + "...");
}

TEST_CASE("hostile profiles: megabyte-long values and keys are quoted as short excerpts") {
  const std::string good = bundled_text();
  const std::string megabyte(1 << 20, 'x');
  const std::string wrong_format = profile_error(with(good, "oobleck.profile.v1", megabyte));
  CHECK(wrong_format.rfind("p.json: format: expected \"oobleck.profile.v1\", got \"xxxxxxxx", 0) == 0);
  CHECK(wrong_format.size() < kShortMessage);
  const std::string wrong_type =
      profile_error(with(good, "\"microbatch_size\": 4", "\"microbatch_size\": \"" + megabyte + "\""));
  CHECK(wrong_type.rfind("p.json: microbatch_size: expected an integer, got string \"xxxxxxxx", 0) == 0);
  CHECK(wrong_type.size() < kShortMessage);
  const std::string wrong_key =
      profile_error(with(good, "\"forward_ms\"", "\"tensor_parallel\": {\"" + megabyte + "\": {}}, \"forward_ms\""));
  CHECK(wrong_key.find("layers[0].tensor_parallel.xxxxxxxx") != std::string::npos);
  CHECK(wrong_key.find("expected a degree key") != std::string::npos);
  CHECK(wrong_key.size() < kShortMessage);
  // A string never closed: the syntax error quotes only its start.
  const std::string unclosed =
      profile_error(with(good, "\"microbatch_size\": 4", "\"microbatch_size\": \"" + megabyte));
  CHECK(unclosed.rfind("p.json:22:", 0) == 0);
  CHECK(unclosed.find("not valid JSON") != std::string::npos);
  CHECK(unclosed.size() < kShortMessage);
}

TEST_CASE("hostile profiles: integers say their range instead of wrapping") {
  check_refusals({
      {"\"gpus_per_node\": 8", "\"gpus_per_node\": 2147483648",
       "p.json: hardware.gpus_per_node: expected an integer in [1, 1024], got 2147483648"},
      {"\"microbatch_size\": 4", "\"microbatch_size\": 1e300",
       "p.json: microbatch_size: expected an integer in [1, 16777216], got 1e+300"},
      {"\"param_bytes\": 214241280", "\"param_bytes\": 18446744073709551615",
       "p.json: layers[0].param_bytes: expected an integer in [0, 70368744177664], got 18446744073709551615"},
      {"\"param_bytes\": 214241280", "\"param_bytes\": -9223372036854775808",
       "p.json: layers[0].param_bytes: expected an integer in [0, 70368744177664], got -9223372036854775808"},
  });
}

TEST_CASE("hostile profiles: numbers beyond double and 400-digit integers name the field") {
  const std::string good = bundled_text();
  CHECK(profile_error(with(good, "\"forward_ms\": 0.041943", "\"forward_ms\": 1e999")) ==
        "p.json:26:21: layers[0].forward_ms: expected a number between -1.8e308 and 1.8e308, got 1e999");
  const std::string digits(400, '9');
  const std::string message = profile_error(with(good, "\"param_bytes\": 214241280", "\"param_bytes\": " + digits));
  CHECK(message.rfind("p.json:28:22: layers[0].param_bytes: expected a number between", 0) == 0);
  CHECK(message.size() < kShortMessage);
}

TEST_CASE("hostile profiles: a key given twice is refused, naming the key and where") {
  check_refusals({
      {"\"microbatch_size\": 4", "\"microbatch_size\": 4, \"microbatch_size\": 8",
       "p.json:22:25: key \"microbatch_size\" appears twice in one object; expected each key once"},
      {"\"forward_ms\": 0.041943", "\"forward_ms\": 0.041943, \"forward_ms\": 9",
       "p.json:26:31: layers[0]: key \"forward_ms\" appears twice in one object; expected each key once"},
  });
}

TEST_CASE("hostile profiles: a hardware name that is not a string") {
  check_refusals({{"\"name\": \"8x NVIDIA A100-SXM4-80GB, NVSwitch, 8x200 Gb/s InfiniBand\"", "\"name\": 8",
                   "p.json: hardware.name: expected a string, got number 8"}});
}

TEST_CASE("hostile plans: nesting, numbers beyond double, wrapping integers, repeated keys, long names") {
  const Profile profile = load_profile(kBundled);
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 4);
  const std::string good = plan_to_json(instantiate(cost, templates, {"a", "b", "c", "d"}, 1, 8), templates, profile);
  REQUIRE(parse_plan(good, "plan.json", profile).pipelines.size() >= 2);
  auto plan_error = [&](const std::string& text) { return test::plan_error(text, profile); };
  CHECK(plan_error(with(good, "\"fault_tolerance\": 1", "\"fault_tolerance\": " + nested_arrays(100000)))
            .find("arrays and objects nested deeper than 64 levels") != std::string::npos);
  CHECK(plan_error(with(good, "\"fault_tolerance\": 1", "\"fault_tolerance\": " + std::string(400, '1')))
            .find(": fault_tolerance: expected a number between -1.8e308 and 1.8e308") != std::string::npos);
  CHECK(plan_error(with(good, "\"iteration_ms\"", "\"sync_ms\": -1e999, \"iteration_ms\""))
            .find(": sync_ms: expected a number between") != std::string::npos);
  CHECK(plan_error(with(good, "\"fault_tolerance\": 1", "\"fault_tolerance\": 4294967297")) ==
        "plan.json: fault_tolerance: expected an integer in [0, 1048576], got 4294967297");
  CHECK(plan_error(with(good, "\"fault_tolerance\": 1", "\"fault_tolerance\": 1, \"fault_tolerance\": 0"))
            .find("key \"fault_tolerance\" appears twice in one object") != std::string::npos);
  // A megabyte-long node name given twice: the message quotes its start.
  const std::string name(1 << 20, 'n');
  const std::string twice = plan_error(with(with(good, "\"a\"", "\"" + name + "\""), "\"b\"", "\"" + name + "\""));
  CHECK(twice.find("appears twice in the plan") != std::string::npos);
  CHECK(twice.size() < kShortMessage);
}

TEST_CASE("hostfiles: megabyte-long words are quoted as short excerpts") {
  const std::string word(1 << 20, 'h');
  const std::string bad_word = test::input_error([&] { (void)parse_hostfile("alpha " + word + "\n", "hosts", 8); });
  CHECK(bad_word.rfind("hosts:1: expected \"slots=N\" after the host name, got \"hhhh", 0) == 0);
  CHECK(bad_word.size() < kShortMessage);
}

TEST_CASE("hostfiles: a host that ssh would read as an option, a user or a shell word, or that is not text, is "
          "refused") {
  const std::vector<std::string> hosts = {"-F/tmp/ssh_config", "-oProxyCommand=x", "root@alpha", "alpha;reboot",
                                          "$(id)", "caf\xc3\xa9", "bad\xff\xfe", std::string(254, 'a')};
  for (const std::string& host : hosts) {
    CAPTURE(host);
    const std::string message = test::input_error([&] { (void)parse_hostfile(host + " slots=8\n", "hosts", 8); });
    CHECK(message.rfind("hosts:1: expected a host name first", 0) == 0);
    CHECK(message.size() < kShortMessage);
  }
  const auto fine = parse_hostfile("gpu-01.cluster slots=8\nnode_2 slots=8\n10.0.0.3\nfe80::1\n", "hosts", 8);
  CHECK(fine == std::vector<std::string>{"gpu-01.cluster", "node_2", "10.0.0.3", "fe80::1"});
}

TEST_CASE("cli: hostile profiles and plans exit 2 with a short message and write nothing") {
  test::Scratch s(kBinary);
  const std::string good = bundled_text();
  const std::string out = " --json " + s.str("out.json");
  struct Case {
    const char* name;
    std::string text, message;  // after the file's path
  };
  const Case cases[] = {
      {"deep.json", with(good, "\"microbatch_size\": 4", "\"microbatch_size\": " + nested_arrays(100000)),
       ":22:85: arrays and objects nested deeper than 64 levels"},
      {"infinite.json", with(good, "\"forward_ms\": 0.041943", "\"forward_ms\": 1e999"),
       ":26:21: layers[0].forward_ms: expected a number between"},
      {"digits.json", with(good, "\"param_bytes\": 214241280", "\"param_bytes\": " + std::string(400, '9')),
       ":28:22: layers[0].param_bytes: expected a number between"},
      {"wraps.json", with(good, "\"gpus_per_node\": 8", "\"gpus_per_node\": 2147483648"),
       ": hardware.gpus_per_node: expected an integer in [1, 1024]"},
      {"twice.json", with(good, "\"latency_ms\": 0.01", "\"latency_ms\": 0.01, \"latency_ms\": 1"),
       ":20:25: hardware: key \"latency_ms\" appears twice"},
      {"long.json", with(good, "oobleck.profile.v1", std::string(1 << 20, 'x')),
       ": format: expected \"oobleck.profile.v1\", got \"xxx"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    s.write(c.name, c.text);
    const test::Run r = s.run("templates --profile " + s.str(c.name) + " --max-nodes 4" + out);
    CHECK(r.status == 2);
    CHECK(r.err.rfind("oobleck-plan: error: " + s.str(c.name) + c.message, 0) == 0);
    CHECK(r.err.size() < kShortMessage + s.str("").size());
    CHECK_FALSE(fs::exists(s.path("out.json")));
  }

  // A plan whose number is beyond double, given to reconfigure.
  REQUIRE(s.run("instantiate --profile " + kBundled.string() +
                " --nodes 4 --fault-tolerance 1 --global-microbatches 8" + " --json " + s.str("plan.json"))
              .status == 0);
  s.write("bad-plan.json", with(s.read("plan.json"), "\"sync_ms\": ", "\"sync_ms\": 1e999, \"ignored\": "));
  const test::Run r =
      s.run("reconfigure --profile " + kBundled.string() + " --plan " + s.str("bad-plan.json") + " --lost node0" + out);
  CHECK(r.status == 2);
  CHECK(r.err.find(s.str("bad-plan.json") + ":") != std::string::npos);
  CHECK(r.err.find(": sync_ms: expected a number between") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("out.json")));
}
