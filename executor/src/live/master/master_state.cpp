#include "master_state.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <tuple>

#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"

namespace oobleck::executor {
namespace {

using nlohmann::ordered_json;
using namespace json_input;

constexpr const char* kFormat = "oobleck.master-state.v1";
// MasterOptions::Stragglers by value.
const std::array<std::string, 5> straggler_names = {"mitigate", "resplit", "replan", "drop", "keep"};

ordered_json options_json(const MasterOptions& o) {
  return {{"plan", o.plan_path},
          {"profile", o.profile_path},
          {"data", o.data_path},
          {"steps", o.steps},
          {"seed", o.seed},
          {"learning_rate", o.learning_rate},
          {"threads", o.threads},
          {"device", o.device},
          {"deterministic", o.deterministic},
          {"metrics", o.metrics_path},
          {"chrome_trace", o.chrome_trace_path},
          {"hostfile", o.hostfile},
          {"launcher", o.launcher},
          {"heartbeat_timeout_ms", o.heartbeat_timeout_ms},
          {"comm_timeout_s", o.comm_timeout_s},
          {"checkpoint", o.checkpoint_dir},
          {"checkpoint_every", o.checkpoint_every},
          {"resume", o.resume_dir},
          {"wait_for_nodes_s", o.wait_for_nodes_s},
          {"join_spares", o.join_spares},
          {"snapshot_every", o.snapshot_every},
          {"mirror_every", o.mirror_every},
          {"stragglers", straggler_names.at(static_cast<std::size_t>(o.stragglers))},
          {"straggler_thresholds", {o.straggler_slow_below, o.straggler_recovered_above}},
          {"straggler_probation_steps", o.straggler_probation_steps},
          {"master_wait_s", o.master_wait_s},
          {"standby_workers", o.standby_workers},
          {"state_dir", o.state_dir}};
}

MasterOptions parse_options(const json& j, const FieldPath& where) {
  MasterOptions o;
  o.plan_path = require_string(j, "plan", where);
  o.profile_path = require_string(j, "profile", where);
  o.data_path = require_string(j, "data", where);
  o.steps = static_cast<int>(require_integer(j, "steps", where, 1, 100000000));
  o.seed = static_cast<std::uint64_t>(require_integer(j, "seed", where, 0, std::numeric_limits<std::int64_t>::max()));
  o.learning_rate = require_number(j, "learning_rate", where, 0);
  o.threads = static_cast<int>(require_integer(j, "threads", where, 1, 1024));
  o.device = require_string(j, "device", where);
  o.metrics_path = require_string(j, "metrics", where);
  o.chrome_trace_path = require_string(j, "chrome_trace", where);
  o.hostfile = require_string(j, "hostfile", where);
  o.launcher = require_string(j, "launcher", where);
  o.heartbeat_timeout_ms = require_number(j, "heartbeat_timeout_ms", where, 50, 3600000);
  o.comm_timeout_s = require_number(j, "comm_timeout_s", where, 1, 86400);
  o.checkpoint_dir = require_string(j, "checkpoint", where);
  o.checkpoint_every = static_cast<int>(require_integer(j, "checkpoint_every", where, 0, 100000000));
  o.resume_dir = require_string(j, "resume", where);
  o.wait_for_nodes_s = require_number(j, "wait_for_nodes_s", where, 0, 31536000);
  const json& spares = require(j, "join_spares", where);
  if (!spares.is_boolean()) throw (where / "join_spares").error("expected true or false");
  o.join_spares = spares.get<bool>();
  o.snapshot_every = static_cast<int>(require_integer(j, "snapshot_every", where, 0, 100000000));
  o.mirror_every = static_cast<int>(require_integer(j, "mirror_every", where, 1, 100000000));
  o.master_wait_s = require_number(j, "master_wait_s", where, 0, 31536000);
  o.state_dir = require_string(j, "state_dir", where);
  if (j.contains("stragglers")) {  // (states kept before stragglers were handled lack both)
    const std::string name = require_string(j, "stragglers", where);
    const auto it = std::find(straggler_names.begin(), straggler_names.end(), name);
    if (it == straggler_names.end()) throw (where / "stragglers").error("expected mitigate, resplit, replan, drop or keep");
    o.stragglers = static_cast<MasterOptions::Stragglers>(it - straggler_names.begin());
    const json& t = require_array(j, "straggler_thresholds", where);
    if (t.size() != 2) throw (where / "straggler_thresholds").error("expected [slow, recovered]");
    o.straggler_slow_below = as_number(t[0], (where / "straggler_thresholds")[0], 0.01, 1);
    o.straggler_recovered_above = as_number(t[1], (where / "straggler_thresholds")[1], 0.01, 1);
  }
  if (j.contains("deterministic")) {  // (states kept before it existed lack it)
    const json& deterministic = j.at("deterministic");
    if (!deterministic.is_boolean()) throw (where / "deterministic").error("expected true or false");
    o.deterministic = deterministic.get<bool>();
  }
  if (j.contains("standby_workers")) {  // (states kept before it existed lack it)
    const json& standby = j.at("standby_workers");
    if (!standby.is_boolean()) throw (where / "standby_workers").error("expected true or false");
    o.standby_workers = standby.get<bool>();
  }
  if (j.contains("straggler_probation_steps")) {  // (states kept before it existed lack it)
    o.straggler_probation_steps =
        static_cast<int>(require_integer(j, "straggler_probation_steps", where, 1, 100000000));
  }
  return o;
}

std::vector<std::string> string_list(const json& object, std::string_view key, const FieldPath& where) {
  const json& list = require_array(object, key, where);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) throw (where / key)[i].error("expected a node name");
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

bool boolean(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (!value.is_boolean()) throw (where / key).error("expected true or false");
  return value.get<bool>();
}

std::optional<int> optional_step(const json& object, std::string_view key, const FieldPath& where) {
  const json& value = require(object, key, where);
  if (value.is_null()) return std::nullopt;
  return static_cast<int>(as_integer(value, where / key, -1, 100000000));
}

recovery::StateSource source(const json& object, std::string_view key, const FieldPath& where) {
  const auto s = recovery::source_named(require_string(object, key, where));
  if (!s) throw (where / key).error("expected replicas, initial, checkpoint, memory or mirror");
  return *s;
}

ordered_json generation_json(const recovery::Generation& g, const TemplateSet& templates, const Profile& profile) {
  return {{"number", g.number},
          {"cause", recovery::cause_name(g.cause)},
          {"plan", ordered_json::parse(plan_to_json(g.plan, templates, profile))},
          {"resume_step", g.resume_step},
          {"source", recovery::source_name(g.source)},
          {"rolled_back", g.rolled_back},
          {"rolled_back_from", g.rolled_back_from},
          {"base_generation", g.base_generation},
          {"copy_bytes", g.copy_bytes},
          {"copy_ms", g.copy_ms},
          {"lost", g.lost},
          {"added", g.added}};
}

Plan plan_in(const json& object, std::string_view key, const FieldPath& where, const Profile& profile) {
  return parse_plan(require_object(object, key, where).dump(), (where / key).str(), profile);
}

recovery::Generation parse_generation(const json& j, const FieldPath& where, const Profile& profile) {
  recovery::Generation g;
  g.number = static_cast<int>(require_integer(j, "number", where, 1, 100000000));
  const auto cause = recovery::cause_named(require_string(j, "cause", where));
  if (!cause) throw (where / "cause").error("expected a cause of a generation");
  g.cause = *cause;
  g.plan = plan_in(j, "plan", where, profile);
  g.resume_step = static_cast<int>(require_integer(j, "resume_step", where, 0, 100000000));
  g.source = source(j, "source", where);
  g.rolled_back = boolean(j, "rolled_back", where);
  g.rolled_back_from = static_cast<int>(require_integer(j, "rolled_back_from", where, -1, 100000000));
  g.base_generation = static_cast<int>(require_integer(j, "base_generation", where, 0, 100000000));
  g.copy_bytes = require_integer(j, "copy_bytes", where, 0, std::numeric_limits<std::int64_t>::max());
  g.copy_ms = require_number(j, "copy_ms", where, 0);
  g.lost = string_list(j, "lost", where);
  g.added = string_list(j, "added", where);
  return g;
}

ordered_json controller_json(const recovery::ControllerState& c, const TemplateSet& templates,
                             const Profile& profile) {
  ordered_json j = {{"generations", c.generations},
                    {"current", nullptr},
                    {"gone", c.gone},
                    {"ready", c.ready},
                    {"established", c.established},
                    {"committed", c.committed},
                    {"base", nullptr},
                    {"base_generation", c.base_generation},
                    {"start_source", recovery::source_name(c.start_source)},
                    {"lost_since_base", c.lost_since_base},
                    {"added_since_base", c.added_since_base},
                    {"pending_joins", c.pending_joins},
                    {"dropped_for_speed", c.dropped_for_speed},
                    {"saved_step", nullptr},
                    {"rolled_back_from", c.rolled_back_from}};
  if (c.current) j["current"] = generation_json(*c.current, templates, profile);
  if (c.base) j["base"] = ordered_json::parse(plan_to_json(*c.base, templates, profile));
  if (c.saved_step) j["saved_step"] = *c.saved_step;
  return j;
}

recovery::ControllerState parse_controller(const json& j, const FieldPath& where, const Profile& profile) {
  recovery::ControllerState c;
  c.generations = static_cast<int>(require_integer(j, "generations", where, 0, 100000000));
  if (!require(j, "current", where).is_null())
    c.current = parse_generation(require_object(j, "current", where), where / "current", profile);
  c.gone = string_list(j, "gone", where);
  c.ready = boolean(j, "ready", where);
  c.established = boolean(j, "established", where);
  c.committed = static_cast<int>(require_integer(j, "committed", where, -1, 100000000));
  if (!require(j, "base", where).is_null()) c.base = plan_in(j, "base", where, profile);
  c.base_generation = static_cast<int>(require_integer(j, "base_generation", where, 0, 100000000));
  c.start_source = source(j, "start_source", where);
  c.lost_since_base = string_list(j, "lost_since_base", where);
  c.added_since_base = string_list(j, "added_since_base", where);
  c.pending_joins = string_list(j, "pending_joins", where);
  c.saved_step = optional_step(j, "saved_step", where);
  c.rolled_back_from = static_cast<int>(require_integer(j, "rolled_back_from", where, -1, 100000000));
  if (j.contains("dropped_for_speed")) c.dropped_for_speed = string_list(j, "dropped_for_speed", where);
  return c;
}

std::string absolute(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

MasterOptions with_absolute_paths(MasterOptions o) {
  for (std::string* path : {&o.plan_path, &o.profile_path, &o.data_path, &o.metrics_path, &o.chrome_trace_path,
                            &o.hostfile, &o.checkpoint_dir, &o.resume_dir, &o.state_dir}) {
    *path = absolute(*path);
  }
  return o;
}

void write_master_state(const std::string& dir, const MasterState& s, const Profile& profile,
                        const TemplateSet& templates) {
  if (!std::filesystem::is_directory(dir)) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) throw InputError("--state-dir " + dir + ": cannot create (" + error.message() + ")");
    ::chmod(dir.c_str(), 0700);
    write_file_atomically(std::filesystem::path(dir) / "token", s.token + "\n", 0600);
  }
  ordered_json nodes = ordered_json::array();
  for (const auto& n : s.nodes) {
    nodes.push_back({{"name", n.name}, {"alive", n.alive}, {"local", n.local}, {"agent_pid", n.agent_pid}});
  }
  ordered_json snapshots = ordered_json::array();
  for (const auto& k : s.snapshots) {
    snapshots.push_back({{"holder", k.holder},
                         {"owner", k.owner},
                         {"gpu", k.gpu},
                         {"step", k.step},
                         {"layers", {k.layer_begin, k.layer_end}},
                         {"shard", {k.shard, k.degree}},
                         {"mirrored", k.mirrored}});
  }
  const ordered_json state = {
      {"format", kFormat},
      {"finished", s.finished},
      {"options", options_json(s.options)},
      {"master_addr", s.master_addr},
      {"control_port", s.control_port},
      {"wire", s.wire},
      {"rollbacks", s.rollbacks},
      {"training_start_unix_ms", s.training_start_unix_ms},
      {"nodes", nodes},
      {"controller", controller_json(s.controller, templates, profile)},
      {"snapshots", snapshots},
      {"snapshot_pin", s.snapshot_pin ? ordered_json(*s.snapshot_pin) : ordered_json(nullptr)},
      {"last_step_record", s.last_step_record}};
  write_file_atomically(std::filesystem::path(dir) / "state.json", state.dump() + "\n", 0600);
}

MasterState read_master_state(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "state.json").string();
  if (!std::filesystem::exists(path)) {
    throw InputError("--resume-master " + dir + ": no state.json there (expected the folder a master kept its "
                     "state in: --state-dir, or the one it printed)");
  }
  MasterState s = parse_master_state(read_text_file(path), path,
                                     [](const std::string& profile) { return load_profile(profile); });
  const std::string token_path = (std::filesystem::path(dir) / "token").string();
  s.token = read_text_file(token_path);
  while (!s.token.empty() && (s.token.back() == '\n' || s.token.back() == '\r')) s.token.pop_back();
  if (s.token.empty()) throw InputError(token_path + ": empty (expected the job's token)");
  return s;
}

MasterState parse_master_state(std::string_view text, const std::string& path,
                               const std::function<Profile(const std::string&)>& profile_of) {
  const json root = parse(text, path);
  const FieldPath where(path);
  require_format(root, kFormat, where);
  MasterState s;
  s.finished = boolean(root, "finished", where);
  s.options = parse_options(require_object(root, "options", where), where / "options");
  s.master_addr = require_string(root, "master_addr", where);
  s.control_port = static_cast<int>(require_integer(root, "control_port", where, 1, 65535));
  s.wire = static_cast<int>(require_integer(root, "wire", where, 0, 1000000000));
  s.rollbacks = static_cast<int>(require_integer(root, "rollbacks", where, 0, 100000000));
  s.training_start_unix_ms = require_number(root, "training_start_unix_ms", where, 0);
  const json& nodes = require_array(root, "nodes", where);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const FieldPath at = (where / "nodes")[i];
    KeptNode n;
    n.name = require_string(nodes[i], "name", at);
    n.alive = boolean(nodes[i], "alive", at);
    n.local = boolean(nodes[i], "local", at);
    n.agent_pid = require_integer(nodes[i], "agent_pid", at, 0, std::numeric_limits<std::int32_t>::max());
    s.nodes.push_back(std::move(n));
  }
  const Profile profile = profile_of(s.options.profile_path);
  s.controller = parse_controller(require_object(root, "controller", where), where / "controller", profile);
  const json& snapshots = require_array(root, "snapshots", where);
  for (std::size_t i = 0; i < snapshots.size(); ++i) {
    const FieldPath at = (where / "snapshots")[i];
    const json& j = snapshots[i];
    KeptSnapshot k;
    k.holder = require_string(j, "holder", at);
    k.owner = require_string(j, "owner", at);
    k.gpu = static_cast<int>(require_integer(j, "gpu", at, 0, 1 << 20));
    k.step = static_cast<int>(require_integer(j, "step", at, 0, 100000000));
    const auto pair_of = [&](std::string_view key, std::int64_t most) {
      const json& p = require_array(j, key, at);
      if (p.size() != 2) throw (at / key).error("expected two whole numbers");
      return std::pair{static_cast<int>(as_integer(p[0], (at / key)[0], 0, most)),
                       static_cast<int>(as_integer(p[1], (at / key)[1], 0, most))};
    };
    std::tie(k.layer_begin, k.layer_end) = pair_of("layers", 1 << 20);
    std::tie(k.shard, k.degree) = pair_of("shard", 1 << 20);
    if (k.layer_begin >= k.layer_end) throw (at / "layers").error("expected [begin, end) with begin < end");
    if (k.shard >= k.degree) throw (at / "shard").error("expected [shard, degree) with shard < degree");
    k.mirrored = boolean(j, "mirrored", at);
    s.snapshots.push_back(std::move(k));
  }
  s.snapshot_pin = optional_step(root, "snapshot_pin", where);
  s.last_step_record = require_string(root, "last_step_record", where);
  if (!s.last_step_record.empty()) {
    // What the restarted master appends to the metrics: one step's record.
    const json record = json::parse(s.last_step_record, nullptr, false);
    if (!record.is_object() || record.value("kind", "") != "step" || !record.contains("step") ||
        !record["step"].is_number_integer()) {
      throw (where / "last_step_record").error("expected a metrics line of kind step, or \"\"");
    }
  }
  return s;
}

}  // namespace oobleck::executor
