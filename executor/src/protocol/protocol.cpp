// The wire format: one JSON object per line, its "type" naming the message,
// the other keys its fields (optional fields absent when unset).
#include "protocol.h"

#include <nlohmann/json.hpp>

#include <array>
#include <tuple>
#include <utility>

namespace oobleck::executor::protocol {
namespace {

using Json = nlohmann::json;

// The wire names, in the order of Message's alternatives.
constexpr std::array<std::string_view, 23> kTypeNames = {
    "hello",  "heartbeat",        "worker_exit",     "kill",     "hang",  "welcome",    "generation",
    "commit", "finish",           "recovering",      "recovered", "started", "ready",   "comm_error",
    "saved",  "done",             "crash",           "worker_restarted", "snapshot_stored", "mirror_to",
    "slow",   "restore_failed",   "passed"};
static_assert(kTypeNames.size() == std::variant_size_v<Message>);

template <typename T>
T field(const Json& j, const char* key) {
  return j.at(key).get<T>();
}

}  // namespace

// ---------------------------------------------------------------- fields

void to_json(Json& j, const SnapshotStored& m);
void from_json(const Json& j, SnapshotStored& m);

void to_json(Json& j, const Hello& m) {
  j = {{"role", m.role == Role::agent ? "agent" : "worker"}, {"node", m.node}, {"token", m.token}, {"pid", m.pid}};
  if (m.role == Role::agent) j["worker_pids"] = m.worker_pids;
  if (m.role == Role::agent) j["snapshot_port"] = m.snapshot_port;
  if (m.role == Role::agent && !m.snapshots.empty()) j["snapshots"] = m.snapshots;
  if (m.role == Role::worker) j["gpu"] = m.gpu;
  if (m.role == Role::worker && m.generation > 0) j["generation"] = m.generation;
}
void from_json(const Json& j, Hello& m) {
  const auto role = field<std::string>(j, "role");
  if (role != "agent" && role != "worker") throw ProtocolError("hello: role \"" + role + "\"");
  m.role = role == "agent" ? Role::agent : Role::worker;
  m.node = field<std::string>(j, "node");
  m.token = field<std::string>(j, "token");
  m.pid = field<std::int64_t>(j, "pid");
  m.worker_pids = j.value("worker_pids", std::vector<std::int64_t>{});
  m.gpu = j.value("gpu", 0);
  m.snapshot_port = j.value("snapshot_port", 0);
  m.generation = j.value("generation", 0);
  m.snapshots = j.value("snapshots", std::vector<SnapshotStored>{});
}

void to_json(Json& j, const Heartbeat&) { j = Json::object(); }
void from_json(const Json&, Heartbeat&) {}
void to_json(Json& j, const Kill&) { j = Json::object(); }
void from_json(const Json&, Kill&) {}
void to_json(Json& j, const Hang&) { j = Json::object(); }
void from_json(const Json&, Hang&) {}
void to_json(Json& j, const Finish&) { j = Json::object(); }
void from_json(const Json&, Finish&) {}

void to_json(Json& j, const WorkerExit& m) { j = {{"gpu", m.gpu}, {"status", m.status}}; }
void from_json(const Json& j, WorkerExit& m) {
  m.gpu = field<int>(j, "gpu");
  m.status = field<int>(j, "status");
}

void to_json(Json& j, const Slow& m) { j = {{"factor", m.factor}}; }
void from_json(const Json& j, Slow& m) {
  m.factor = field<double>(j, "factor");
  if (!(m.factor > 0 && m.factor <= 1)) throw ProtocolError("slow: factor out of (0, 1]");
}

void to_json(Json& j, const Crash& m) { j = {{"gpu", m.gpu}}; }
void from_json(const Json& j, Crash& m) { m.gpu = field<int>(j, "gpu"); }

void to_json(Json& j, const WorkerRestarted& m) {
  j = {{"gpu", m.gpu}, {"status", m.status}, {"pid", m.pid}, {"standby", m.standby}};
}
void from_json(const Json& j, WorkerRestarted& m) {
  m.gpu = field<int>(j, "gpu");
  m.status = field<int>(j, "status");
  m.pid = field<std::int64_t>(j, "pid");
  m.standby = field<bool>(j, "standby");
}

void to_json(Json& j, const SnapshotStored& m) {
  j = {{"owner", m.owner},           {"gpu", m.gpu},     {"step", m.step},
       {"layers", {m.layer_begin, m.layer_end}}, {"shard", {m.shard, m.degree}}, {"mirrored", m.mirrored}};
}
void from_json(const Json& j, SnapshotStored& m) {
  m.owner = field<std::string>(j, "owner");
  m.gpu = field<int>(j, "gpu");
  m.step = field<int>(j, "step");
  std::tie(m.layer_begin, m.layer_end) = field<std::pair<int, int>>(j, "layers");
  std::tie(m.shard, m.degree) = field<std::pair<int, int>>(j, "shard");
  m.mirrored = field<bool>(j, "mirrored");
}

void to_json(Json& j, const MirrorTo& m) { j = {{"host", m.host}, {"port", m.port}, {"every", m.every}}; }
void from_json(const Json& j, MirrorTo& m) {
  m.host = field<std::string>(j, "host");
  m.port = field<int>(j, "port");
  m.every = field<int>(j, "every");
}

void to_json(Json& j, const SnapshotSource& m) {
  j = {{"layer", m.layer}, {"shard", {m.shard, m.degree}}, {"owner", m.owner}, {"host", m.host}, {"port", m.port}};
}
void from_json(const Json& j, SnapshotSource& m) {
  m.layer = field<int>(j, "layer");
  std::tie(m.shard, m.degree) = field<std::pair<int, int>>(j, "shard");
  m.owner = field<std::string>(j, "owner");
  m.host = field<std::string>(j, "host");
  m.port = field<int>(j, "port");
}

void to_json(Json& j, const Welcome& m) {
  j = {{"profile", m.profile},
       {"profile_origin", m.profile_origin},
       {"data", m.data},
       {"device", m.device},
       {"steps", m.steps},
       {"threads", m.threads},
       {"store_port", m.store_port},
       {"seed", m.seed},
       {"comm_timeout_ms", m.comm_timeout_ms},
       {"learning_rate", m.learning_rate},
       {"snapshot_every", m.snapshot_every},
       {"deterministic", m.deterministic}};
}
void from_json(const Json& j, Welcome& m) {
  m.profile = field<std::string>(j, "profile");
  m.profile_origin = field<std::string>(j, "profile_origin");
  m.data = field<std::string>(j, "data");
  m.device = field<std::string>(j, "device");
  m.steps = field<int>(j, "steps");
  m.threads = field<int>(j, "threads");
  m.store_port = field<int>(j, "store_port");
  m.seed = field<std::uint64_t>(j, "seed");
  m.comm_timeout_ms = field<std::int64_t>(j, "comm_timeout_ms");
  m.learning_rate = field<double>(j, "learning_rate");
  m.snapshot_every = field<int>(j, "snapshot_every");
  m.deterministic = field<bool>(j, "deterministic");
}

void to_json(Json& j, const LayerCopy& m) {
  j = {{"layer", m.layer}, {"from", m.from}, {"to", m.to}, {"from_shard", {m.from_shard, m.from_degree}}};
}
void from_json(const Json& j, LayerCopy& m) {
  m.layer = field<int>(j, "layer");
  m.from = field<int>(j, "from");
  m.to = field<int>(j, "to");
  const auto shard = field<std::pair<int, int>>(j, "from_shard");
  m.from_shard = shard.first;
  m.from_degree = shard.second;
}

void to_json(Json& j, const SumCopy& m) { j = {m.layer, m.from, m.to}; }
void from_json(const Json& j, SumCopy& m) {
  if (!j.is_array() || j.size() != 3) throw std::invalid_argument("a sum copy is [layer, from, to]");
  m.layer = j.at(0).get<int>();
  m.from = j.at(1).get<int>();
  m.to = j.at(2).get<int>();
}

void to_json(Json& j, const NewGeneration& m) {
  j = {{"generation", m.generation},
       {"plan", m.plan},
       {"ranks", m.ranks},
       {"resume_step", m.resume_step},
       {"holds", {m.holds_begin, m.holds_end}},
       {"holds_shard", {m.holds_shard, m.holds_degree}},
       {"copies", m.copies}};
  if (!m.checkpoint_folder.empty()) j["checkpoint"] = m.checkpoint_folder;
  if (m.snapshot_step >= 0) j["snapshot"] = {{"step", m.snapshot_step}, {"sources", m.snapshot}};
  if (m.discard_held) j["discard_held"] = true;
  if (m.step_listed) {
    j["step_microbatches"] = {{"train", m.step_microbatches}, {"kept", m.kept_microbatches}, {"sums", m.sum_copies}};
  }
}
void from_json(const Json& j, NewGeneration& m) {
  m.generation = field<int>(j, "generation");
  m.plan = field<std::string>(j, "plan");
  m.ranks = field<std::vector<std::string>>(j, "ranks");
  m.resume_step = field<int>(j, "resume_step");
  const auto holds = field<std::pair<int, int>>(j, "holds");
  m.holds_begin = holds.first;
  m.holds_end = holds.second;
  const auto shard = field<std::pair<int, int>>(j, "holds_shard");
  m.holds_shard = shard.first;
  m.holds_degree = shard.second;
  m.copies = field<std::vector<LayerCopy>>(j, "copies");
  m.checkpoint_folder = j.value("checkpoint", std::string());
  if (j.contains("snapshot")) {
    m.snapshot_step = field<int>(j.at("snapshot"), "step");
    m.snapshot = field<std::vector<SnapshotSource>>(j.at("snapshot"), "sources");
  }
  m.discard_held = j.value("discard_held", false);
  m.step_listed = j.contains("step_microbatches");
  if (m.step_listed) {
    m.step_microbatches = field<std::vector<int>>(j.at("step_microbatches"), "train");
    m.kept_microbatches = field<std::vector<int>>(j.at("step_microbatches"), "kept");
    m.sum_copies = field<std::vector<SumCopy>>(j.at("step_microbatches"), "sums");
  }
}

void to_json(Json& j, const Commit& m) {
  j = {{"generation", m.generation}, {"step", m.step}, {"pause", m.pause}, {"finish", m.finish}};
  if (m.save) j["save"] = {{"folder", m.save->folder}, {"step", m.save->step}};
}
void from_json(const Json& j, Commit& m) {
  m.generation = field<int>(j, "generation");
  m.step = field<int>(j, "step");
  m.pause = field<bool>(j, "pause");
  m.finish = field<bool>(j, "finish");
  if (j.contains("save")) m.save = Save{field<std::string>(j.at("save"), "folder"), field<int>(j.at("save"), "step")};
}

void to_json(Json& j, const Recovering& m) { j = {{"generation", m.generation}}; }
void from_json(const Json& j, Recovering& m) { m.generation = field<int>(j, "generation"); }

void to_json(Json& j, const Recovered& m) {
  j = {
      {"generation", m.generation}, {"rebuild_ms", m.rebuild_ms}, {"copy_ms", m.copy_ms}, {"copy_bytes", m.copy_bytes}};
}
void from_json(const Json& j, Recovered& m) {
  m.generation = field<int>(j, "generation");
  m.rebuild_ms = field<double>(j, "rebuild_ms");
  m.copy_ms = field<double>(j, "copy_ms");
  m.copy_bytes = field<std::int64_t>(j, "copy_bytes");
}

void to_json(Json& j, const Started& m) { j = {{"generation", m.generation}, {"step", m.step}}; }
void from_json(const Json& j, Started& m) {
  m.generation = field<int>(j, "generation");
  m.step = field<int>(j, "step");
}

void to_json(Json& j, const Passed& m) { j = {{"generation", m.generation}, {"step", m.step}}; }
void from_json(const Json& j, Passed& m) {
  m.generation = field<int>(j, "generation");
  m.step = field<int>(j, "step");
}

void to_json(Json& j, const Ready& m) {
  j = {{"generation", m.generation}, {"step", m.step},
       {"loss", m.loss},  {"compute_ms", m.compute_ms},
       {"optimizer_ms", m.optimizer_ms}};
  if (!m.samples.empty()) {
    std::vector<std::pair<int, int>> ranges;
    for (const auto& r : m.samples) ranges.emplace_back(r.first, r.count);
    j["samples"] = ranges;
  }
}
void from_json(const Json& j, Ready& m) {
  m.generation = field<int>(j, "generation");
  m.step = field<int>(j, "step");
  m.loss = field<double>(j, "loss");
  m.compute_ms = j.value("compute_ms", 0.0);
  m.optimizer_ms = j.value("optimizer_ms", 0.0);
  if (j.contains("samples")) {
    for (const auto& [first, count] : field<std::vector<std::pair<int, int>>>(j, "samples")) {
      m.samples.push_back({first, count});
    }
  }
}

void to_json(Json& j, const CommunicationFailed& m) {
  j = {{"generation", m.generation}, {"what", m.what}};
  if (m.missing_snapshot_step >= 0) {
    j["missing_snapshot_step"] = m.missing_snapshot_step;
    j["missing_snapshot_port"] = m.missing_snapshot_port;
  }
  if (m.sums_lost) j["sums_lost"] = true;
}
void from_json(const Json& j, CommunicationFailed& m) {
  m.generation = field<int>(j, "generation");
  m.what = field<std::string>(j, "what");
  if (j.contains("missing_snapshot_step")) {
    m.missing_snapshot_step = field<int>(j, "missing_snapshot_step");
    m.missing_snapshot_port = field<int>(j, "missing_snapshot_port");
  }
  m.sums_lost = j.value("sums_lost", false);
}

void to_json(Json& j, const RestoreFailed& m) { j = {{"generation", m.generation}, {"what", m.what}}; }
void from_json(const Json& j, RestoreFailed& m) {
  m.generation = field<int>(j, "generation");
  m.what = field<std::string>(j, "what");
}

void to_json(Json& j, const Saved& m) { j = {{"generation", m.generation}, {"step", m.step}}; }
void from_json(const Json& j, Saved& m) {
  m.generation = field<int>(j, "generation");
  m.step = field<int>(j, "step");
}

void to_json(Json& j, const Done& m) {
  j = {{"generation", m.generation}};
  if (!m.timeline) return;
  const StepTimeline& t = *m.timeline;
  Json ops = Json::array();
  for (const auto& op : t.ops) ops.push_back({std::string(1, op.kind), op.index, op.start_ms, op.end_ms});
  j["timeline"] = {
      {"step_start_ms", t.step_start_ms}, {"compute_ms", t.compute_ms}, {"wait_ms", t.wait_ms}, {"sync_ms", t.sync_ms},
      {"optimizer_ms", t.optimizer_ms},   {"tensor_parallel_ms", t.tensor_parallel_ms}, {"ops", std::move(ops)}};
}
void from_json(const Json& j, Done& m) {
  m.generation = field<int>(j, "generation");
  if (!j.contains("timeline")) return;
  const Json& t = j.at("timeline");
  StepTimeline timeline{field<double>(t, "step_start_ms"), field<double>(t, "compute_ms"),
                        field<double>(t, "wait_ms"),       field<double>(t, "sync_ms"),
                        field<double>(t, "optimizer_ms"),  field<double>(t, "tensor_parallel_ms"), {}};
  for (const auto& op : t.at("ops")) {
    const auto kind = op.at(0).get<std::string>();
    if (kind.size() != 1) throw ProtocolError("done: an op kind of " + std::to_string(kind.size()) + " characters");
    timeline.ops.push_back({kind[0], op.at(1).get<int>(), op.at(2).get<double>(), op.at(3).get<double>()});
  }
  m.timeline = std::move(timeline);
}

// ---------------------------------------------------------------- lines

std::string_view type_name(const Message& message) { return kTypeNames[message.index()]; }

std::string encode(const Message& message) {
  Json j;
  std::visit([&](const auto& m) { to_json(j, m); }, message);
  j["type"] = type_name(message);
  return j.dump();
}

namespace {

template <std::size_t... I>
Message decode_as(std::size_t index, const Json& j, std::index_sequence<I...>) {
  Message out;
  // The alternative whose index the type named.
  (void)((index == I ? (out = j.get<std::variant_alternative_t<I, Message>>(), true) : false) || ...);
  return out;
}

}  // namespace

Message decode(std::string_view line) {
  const Json j = Json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ProtocolError("not a JSON object");
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string()) throw ProtocolError("no \"type\"");
  const std::string name = type->get<std::string>();
  for (std::size_t i = 0; i < kTypeNames.size(); ++i) {
    if (kTypeNames[i] != name) continue;
    try {
      return decode_as(i, j, std::make_index_sequence<std::variant_size_v<Message>>());
    } catch (const nlohmann::json::exception& e) {
      throw ProtocolError(name + ": " + e.what());
    }
  }
  throw ProtocolError("unknown type \"" + name.substr(0, 40) + "\"");
}

bool send(channel::Connection& connection, const Message& message) { return connection.send(encode(message)); }

bool receive(channel::Connection& connection, std::vector<Message>& out, std::chrono::milliseconds timeout,
             std::vector<std::string>* malformed) {
  std::vector<std::string> lines;
  const bool open = timeout.count() > 0 ? connection.receive(lines, timeout) : connection.receive(lines);
  for (const auto& line : lines) {
    try {
      out.push_back(decode(line));
    } catch (const ProtocolError& e) {
      if (malformed) malformed->push_back(e.what());
    }
  }
  return open;
}

}  // namespace oobleck::executor::protocol
