// Scenario files: the cluster description and overrides of derived constants.
#include <algorithm>
#include <cmath>
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

}  // namespace

Scenario parse_scenario(std::string_view json_text, const std::string& origin) {
  json doc = json_input::parse(json_text, origin);
  Scenario scenario;
  Section top(doc, origin, "");
  top.finish({"cluster", "overrides", "format", "description"});
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
    Overrides& v = scenario.overrides;
    o.number("iteration_ms", v.iteration_ms, false);
    o.integer("checkpoint_interval_iterations", v.checkpoint_interval_iterations);
    o.number("checkpoint_save_ms", v.checkpoint_save_ms);
    o.number("checkpoint_load_ms", v.checkpoint_load_ms);
    o.number("oobleck_copy_ms", v.oobleck_copy_ms);
    o.number("inmemory_save_ms", v.inmemory_save_ms);
    o.number("inmemory_restore_ms", v.inmemory_restore_ms);
    o.number("bamboo_slowdown", v.bamboo_slowdown, false);
    o.number("bamboo_failover_ms", v.bamboo_failover_ms);
    o.integer("snapshot_every_iterations", v.snapshot_every_iterations);
    o.integer("mirror_every_iterations", v.mirror_every_iterations);
    o.number("snapshot_stall_ms", v.snapshot_stall_ms);
    o.number("snapshot_restore_memory_ms", v.snapshot_restore_memory_ms);
    o.number("snapshot_restore_mirror_ms", v.snapshot_restore_mirror_ms);
    o.number("snapshot_restore_disk_ms", v.snapshot_restore_disk_ms);
    o.finish();
    // Only snapshots taken are mirrored (as oobleck-run --mirror-every).
    const int every = v.snapshot_every_iterations.value_or(kDefaultSnapshotEveryIterations);
    const int mirror = v.mirror_every_iterations.value_or(kDefaultMirrorEveryIterations);
    if (every > 0 && mirror > 0 && mirror % every != 0) {
      throw InputError(origin + ": overrides.mirror_every_iterations: expected 0 or a multiple of " +
                       "snapshot_every_iterations (" + std::to_string(every) + "), got " + std::to_string(mirror));
    }
  }
  return scenario;
}

}  // namespace oobleck::sim
