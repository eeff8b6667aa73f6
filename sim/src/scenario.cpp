// Scenario files: the cluster description and overrides of derived constants.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "oobleck/common/event_lines.h"
#include "oobleck/common/json_input.h"
#include "oobleck/sim/replay.h"

namespace oobleck::sim {
namespace {

using json_input::json;
using json_input::value_excerpt;

class Section {
 public:
  Section(const json& object, std::string origin, std::string name)
      : object_(object), origin_(std::move(origin)), name_(std::move(name)) {
    if (!object_.is_object()) throw error(name_, "expected an object, got " + std::string(object_.type_name()));
  }

  // A positive (or, with allow_zero, non-negative) finite number.
  void number(const char* key, double& target, bool allow_zero = true) {
    if (const json* v = take(key)) target = checked(key, *v, allow_zero);
  }
  void number(const char* key, std::optional<double>& target, bool allow_zero = true) {
    if (const json* v = take(key)) target = checked(key, *v, allow_zero);
  }
  // Iteration counts: up to 1e9, far beyond any run.
  void integer(const char* key, std::optional<int>& target) {
    if (const json* v = take(key)) {
      constexpr std::int64_t kMost = 1'000'000'000;
      const bool fits = v->is_number_integer() && (v->is_number_unsigned() ? v->get<std::uint64_t>() <= kMost
                                                                            : v->get<std::int64_t>() >= 0 &&
                                                                                  v->get<std::int64_t>() <= kMost);
      if (!fits) {
        throw error(path(key), "expected a non-negative integer of at most " + std::to_string(kMost) + ", got " +
                                   value_excerpt(*v));
      }
      target = static_cast<int>(v->get<std::int64_t>());
    }
  }
  // Node count -> iteration time: {"8": 1200, "16": 640}.
  void iterations_by_nodes(const char* key, std::map<int, Milliseconds>& target) {
    const json* v = take(key);
    if (v == nullptr) return;
    if (!v->is_object() || v->empty()) {
      throw error(path(key), "expected an object of node counts to iteration times in ms, such as {\"8\": 1200}, got " +
                                 value_excerpt(*v));
    }
    Section entries(*v, origin_, path(key));
    for (const auto& [count, ms] : v->items()) {
      const bool digits = !count.empty() && count.size() <= 7 &&
                          std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
      const int nodes = digits ? std::stoi(count) : 0;
      if (nodes < 1 || nodes > 1'000'000) {
        throw entries.error(entries.path(count), "expected a node count from 1 to 1000000 as the key");
      }
      std::optional<double> t;
      entries.number(count.c_str(), t, false);
      target[nodes] = *t;
    }
  }
  // Every key must have been read.
  void finish(const std::vector<std::string>& known_sections = {}) const {
    for (const auto& [key, value] : object_.items()) {
      if (!used_.count(key) && std::find(known_sections.begin(), known_sections.end(), key) == known_sections.end()) {
        std::string expected;
        for (const auto& k : used_keys_) expected += (expected.empty() ? "" : ", ") + k;
        for (const auto& k : known_sections) expected += (expected.empty() ? "" : ", ") + k;
        throw error(path(key), "unknown field; expected one of: " + expected);
      }
    }
  }

 private:
  const json* take(const char* key) {
    used_keys_.push_back(key);
    auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    used_.insert(key);
    return &*it;
  }
  // Durations (`_ms`) up to 1e12 ms (about 30 years), bandwidths
  // (`_bytes_per_s`) from 1 byte/s, other numbers (factors) up to 1e6: every
  // derived time stays finite.
  double checked(const char* key, const json& v, bool allow_zero) const {
    if (!v.is_number()) throw error(path(key), "expected a number, got " + value_excerpt(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (!allow_zero && x == 0)) {
      throw error(path(key), std::string("expected a ") + (allow_zero ? "non-negative" : "positive") +
                                 " number, got " + value_excerpt(v));
    }
    const std::string_view name = key;
    const bool bandwidth = name.ends_with("_bytes_per_s");
    const bool duration = name.ends_with("_ms");
    if (bandwidth && x != 0 && x < 1) throw error(path(key), "expected at least 1 byte/s, got " + value_excerpt(v));
    if (duration && x > 1e12) throw error(path(key), "expected at most 1e12 ms, got " + value_excerpt(v));
    if (duration && !allow_zero && x < 1e-3) {
      throw error(path(key), "expected at least 0.001 ms, got " + value_excerpt(v));
    }
    if (!bandwidth && !duration && x > 1e6) throw error(path(key), "expected at most 1e6, got " + value_excerpt(v));
    return x;
  }
  // Keys come from the file: cut short like any quoted value.
  std::string path(const std::string& key) const { return (name_.empty() ? "" : name_ + ".") + excerpt(key); }
  InputError error(const std::string& field, const std::string& what) const {
    return InputError(origin_ + ": " + field + ": " + what);
  }

  const json& object_;
  std::string origin_, name_;
  std::set<std::string> used_;
  std::vector<std::string> used_keys_;
};


// Every override but the iteration table, parsed and merged alike.
struct OverrideField {
  const char* key;
  std::optional<double> Overrides::*number = nullptr;
  std::optional<int> Overrides::*integer = nullptr;
  bool allow_zero = true;
};
const OverrideField kOverrideFields[] = {
    {"iteration_ms", &Overrides::iteration_ms, nullptr, false},
    {"checkpoint_interval_iterations", nullptr, &Overrides::checkpoint_interval_iterations},
    {"checkpoint_save_ms", &Overrides::checkpoint_save_ms},
    {"checkpoint_load_ms", &Overrides::checkpoint_load_ms},
    {"oobleck_copy_ms", &Overrides::oobleck_copy_ms},
    {"inmemory_save_ms", &Overrides::inmemory_save_ms},
    {"inmemory_restore_ms", &Overrides::inmemory_restore_ms},
    {"bamboo_slowdown", &Overrides::bamboo_slowdown, nullptr, false},
    {"bamboo_failover_ms", &Overrides::bamboo_failover_ms},
    {"bamboo_rebalance_ms", &Overrides::bamboo_rebalance_ms},
    {"snapshot_every_iterations", nullptr, &Overrides::snapshot_every_iterations},
    {"mirror_every_iterations", nullptr, &Overrides::mirror_every_iterations},
    {"snapshot_stall_ms", &Overrides::snapshot_stall_ms},
    {"snapshot_restore_memory_ms", &Overrides::snapshot_restore_memory_ms},
    {"snapshot_restore_mirror_ms", &Overrides::snapshot_restore_mirror_ms},
    {"snapshot_restore_disk_ms", &Overrides::snapshot_restore_disk_ms},
};

void parse_overrides(Section& o, Overrides& v, const std::string& origin, const std::string& where) {
  for (const OverrideField& f : kOverrideFields) {
    if (f.number) o.number(f.key, v.*f.number, f.allow_zero);
    if (f.integer) o.integer(f.key, v.*f.integer);
  }
  o.iterations_by_nodes("iteration_ms_by_nodes", v.iteration_ms_by_nodes);
  o.finish();
  if (v.iteration_ms && !v.iteration_ms_by_nodes.empty()) {
    throw InputError(origin + ": " + where + ": give iteration_ms or iteration_ms_by_nodes, not both");
  }
}

// Only snapshots taken are mirrored (as oobleck-run --mirror-every).
void check_mirrors(const Overrides& v, const std::string& origin, const std::string& where) {
  const int every = v.snapshot_every_iterations.value_or(kDefaultSnapshotEveryIterations);
  const int mirror = v.mirror_every_iterations.value_or(kDefaultMirrorEveryIterations);
  if (every > 0 && mirror > 0 && mirror % every != 0) {
    throw InputError(origin + ": " + where + ".mirror_every_iterations: expected 0 or a multiple of " +
                     "snapshot_every_iterations (" + std::to_string(every) + "), got " + std::to_string(mirror));
  }
}

}  // namespace

Overrides Scenario::overrides_for(Policy policy) const {
  const auto it = policy_overrides.find(policy);
  if (it == policy_overrides.end()) return overrides;
  const Overrides& p = it->second;
  Overrides o = overrides;
  if (p.iteration_ms || !p.iteration_ms_by_nodes.empty()) {
    o.iteration_ms = p.iteration_ms;
    o.iteration_ms_by_nodes = p.iteration_ms_by_nodes;
  }
  for (const OverrideField& f : kOverrideFields) {
    if (f.number == &Overrides::iteration_ms) continue;  // (above, with the table)
    if (f.number && p.*f.number) o.*f.number = p.*f.number;
    if (f.integer && p.*f.integer) o.*f.integer = p.*f.integer;
  }
  return o;
}

std::optional<Milliseconds> overridden_iteration_ms(const Overrides& overrides, int nodes) {
  if (overrides.iteration_ms) return overrides.iteration_ms;
  const auto& table = overrides.iteration_ms_by_nodes;
  if (table.empty() || nodes < 1) return std::nullopt;
  const auto above = table.lower_bound(nodes);
  if (above != table.end() && above->first == nodes) return above->second;
  // Beyond the table: the nearest count's samples per second per node.
  if (above == table.begin()) return above->second * above->first / nodes;
  const auto below = std::prev(above);
  if (above == table.end()) return below->second * below->first / nodes;
  const double x = static_cast<double>(nodes - below->first) / (above->first - below->first);
  return below->second + x * (above->second - below->second);
}

Scenario parse_scenario(std::string_view json_text, const std::string& origin) {
  json doc = json_input::parse(json_text, origin);
  Scenario scenario;
  Section top(doc, origin, "");
  top.finish({"cluster", "overrides", "policy_overrides", "format", "description"});
  if (doc.contains("format") && doc["format"] != "oobleck.scenario.v1") {
    throw InputError(origin + ": format: expected \"oobleck.scenario.v1\", got " + value_excerpt(doc["format"]));
  }
  if (doc.contains("cluster")) {
    Section c(doc["cluster"], origin, "cluster");
    Cluster& k = scenario.cluster;
    c.number("storage_bytes_per_s", k.storage_bytes_per_s, false);
    c.number("detection_ms", k.detection_ms);
    c.number("restart_ms", k.restart_ms);
    c.number("communicator_ms", k.communicator_ms);
    c.number("host_copy_bytes_per_s", k.host_copy_bytes_per_s, false);
    c.number("device_memory_bytes_per_s", k.device_memory_bytes_per_s);
    c.number("network_bytes_per_s", k.network_bytes_per_s, false);
    c.finish();
  }
  if (doc.contains("overrides")) {
    Section o(doc["overrides"], origin, "overrides");
    parse_overrides(o, scenario.overrides, origin, "overrides");
  }
  check_mirrors(scenario.overrides, origin, "overrides");
  if (doc.contains("policy_overrides")) {
    const json& section = doc["policy_overrides"];
    Section all(section, origin, "policy_overrides");
    for (const auto& item : section.items()) {
      const std::string& name = item.key();
      const json& value = item.value();
      const auto policy = std::find_if(std::begin(kAllPolicies), std::end(kAllPolicies),
                                       [&](Policy p) { return policy_name(p) == name; });
      if (policy == std::end(kAllPolicies)) {
        std::string names;
        for (const Policy p : kAllPolicies) names += (names.empty() ? "" : ", ") + std::string(policy_name(p));
        throw InputError(origin + ": policy_overrides." + excerpt(name) + ": no such policy; expected one of: " +
                         names);
      }
      const std::string where = "policy_overrides." + name;
      Section o(value, origin, where);
      parse_overrides(o, scenario.policy_overrides[*policy], origin, where);
      check_mirrors(scenario.overrides_for(*policy), origin, where);
    }
  }
  return scenario;
}

double device_memory_bytes_per_s(const Cluster& cluster, const Hardware& hardware) {
  if (cluster.device_memory_bytes_per_s) return *cluster.device_memory_bytes_per_s;
  return hardware.memory_bytes_per_s > 0 ? hardware.memory_bytes_per_s : kDefaultDeviceMemoryBytesPerS;
}

}  // namespace oobleck::sim
