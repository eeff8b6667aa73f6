// Loading, validating and writing oobleck.profile.v1 (Oobleck's own profile
// folders: oobleck_import.cpp).
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/planner.h"
#include "profile_format.h"

namespace oobleck {
namespace {

using json_input::FieldPath;
using json_input::json;
using detail::kMaxBytes;
using detail::kMaxBytesPerSecond;
using detail::kMaxLayers;
using detail::kMaxMs;
using detail::check_costs;
using detail::kProfileFormat;
using detail::sort_never_falling;

// Measured gradient all-reduces: [{"ranks": k, "bytes": b, "ms": t}, ...];
// two points for one size are refused.
std::vector<AllreducePoint> parse_allreduce_table(const json& value, const FieldPath& where) {
  constexpr std::size_t kMaxPoints = 4096;
  if (!value.is_array()) throw where.error("expected an array of {\"ranks\", \"bytes\", \"ms\"} objects");
  if (value.size() > kMaxPoints) throw where.error("expected at most " + std::to_string(kMaxPoints) + " points");
  std::vector<AllreducePoint> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const FieldPath at = where[i];
    if (!value[i].is_object()) throw at.error("expected an object with ranks, bytes and ms");
    AllreducePoint p;
    p.ranks = static_cast<int>(json_input::require_integer(value[i], "ranks", at, 2, 1 << 20));
    p.bytes = json_input::require_number(value[i], "bytes", at, 1, static_cast<double>(kMaxBytes));
    p.ms = json_input::require_number(value[i], "ms", at, 0, kMaxMs);
    out.push_back(p);
  }
  sort_never_falling(out);
  for (std::size_t i = 1; i < out.size(); ++i) {
    if (out[i].ranks == out[i - 1].ranks && out[i].bytes == out[i - 1].bytes) {
      throw where.error("two points for " + std::to_string(out[i].ranks) + " ranks and " +
                        std::to_string(static_cast<long long>(out[i].bytes)) + " bytes");
    }
  }
  return out;
}

Hardware parse_hardware(const json& hw, const FieldPath& where) {
  Hardware out;
  out.name = json_input::require_string(hw, "name", where);
  out.gpus_per_node = static_cast<int>(json_input::require_integer(hw, "gpus_per_node", where, 1, 1024));
  out.gpu_memory_bytes = json_input::require_integer(hw, "gpu_memory_bytes", where, 1, kMaxBytes);
  out.intra_node_bytes_per_s = json_input::require_number(hw, "intra_node_bytes_per_s", where, 1, kMaxBytesPerSecond);
  out.inter_node_bytes_per_s = json_input::require_number(hw, "inter_node_bytes_per_s", where, 1, kMaxBytesPerSecond);
  out.latency_ms = json_input::require_number(hw, "latency_ms", where, 0, kMaxMs);
  if (hw.contains("allreduce_bytes_per_s")) {
    out.allreduce_bytes_per_s = json_input::require_number(hw, "allreduce_bytes_per_s", where, 1, kMaxBytesPerSecond);
  }
  if (hw.contains("allreduce_table")) out.allreduce_table = parse_allreduce_table(hw.at("allreduce_table"), where / "allreduce_table");
  if (hw.contains("intra_node_allreduce_table")) {
    out.intra_node_allreduce_table =
        parse_allreduce_table(hw.at("intra_node_allreduce_table"), where / "intra_node_allreduce_table");
  }
  if (hw.contains("memory_bytes_per_s")) {
    out.memory_bytes_per_s = json_input::require_number(hw, "memory_bytes_per_s", where, 1, kMaxBytesPerSecond);
  }
  return out;
}

std::vector<TensorParallelTiming> parse_tensor_parallel(const json& value, const FieldPath& where, int gpus_per_node,
                                                        Bytes activation_bytes) {
  if (!value.is_object()) throw where.error("expected an object keyed by degree, e.g. {\"2\": {...}}");
  std::vector<TensorParallelTiming> out;
  for (const auto& [key, entry] : value.items()) {
    const FieldPath at = where / key;
    int degree = 0;
    const bool digits = !key.empty() && key.size() <= 4 && key[0] != '0' &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (degree = std::stoi(key)) < 2 || gpus_per_node % degree != 0) {
      throw at.error("expected a degree key that divides hardware.gpus_per_node (" +
                     std::to_string(gpus_per_node) + ") and is at least 2");
    }
    TensorParallelTiming timing{degree, json_input::require_number(entry, "forward_ms", at, 0, kMaxMs),
                                json_input::require_number(entry, "backward_ms", at, 0, kMaxMs)};
    // One GPU's share: at least 1/degree of the layer's activations, at most all of them.
    if (auto it = entry.find("activation_bytes"); it != entry.end() && !it->is_null()) {
      timing.activation_bytes =
          json_input::require_integer(entry, "activation_bytes", at, activation_bytes / degree, activation_bytes);
    }
    out.push_back(timing);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.degree < b.degree; });
  return out;
}

LayerProfile parse_layer(const json& layer, const FieldPath& where, int gpus_per_node) {
  LayerProfile out;
  out.name = json_input::require_string(layer, "name", where);
  out.forward_ms = json_input::require_number(layer, "forward_ms", where, 0, kMaxMs);
  out.backward_ms = json_input::require_number(layer, "backward_ms", where, 0, kMaxMs);
  out.param_bytes = json_input::require_integer(layer, "param_bytes", where, 0, kMaxBytes);
  out.optimizer_bytes = json_input::require_integer(layer, "optimizer_bytes", where, 0, kMaxBytes);
  out.activation_bytes = json_input::require_integer(layer, "activation_bytes", where, 0, kMaxBytes);
  out.output_bytes = json_input::require_integer(layer, "output_bytes", where, 0, kMaxBytes);
  if (auto it = layer.find("tensor_parallel"); it != layer.end() && !it->is_null()) {
    out.tensor_parallel = parse_tensor_parallel(*it, where / "tensor_parallel", gpus_per_node, out.activation_bytes);
  }
  if (auto it = layer.find("attention_core"); it != layer.end() && !it->is_null()) {
    const FieldPath at = where / "attention_core";
    if (!it->is_object()) throw at.error("expected an object {forward_ms, activation_bytes}");
    out.attention_forward_ms = json_input::require_number(*it, "forward_ms", at, 0, kMaxMs);
    out.attention_activation_bytes = json_input::require_integer(*it, "activation_bytes", at, 0, out.activation_bytes);
  }
  return out;
}

json layer_to_json(const LayerProfile& layer) {
  json out = {{"name", layer.name},
              {"forward_ms", layer.forward_ms},
              {"backward_ms", layer.backward_ms},
              {"param_bytes", layer.param_bytes},
              {"optimizer_bytes", layer.optimizer_bytes},
              {"activation_bytes", layer.activation_bytes},
              {"output_bytes", layer.output_bytes}};
  if (!layer.tensor_parallel.empty()) {
    json tp = json::object();
    for (const auto& t : layer.tensor_parallel) {
      tp[std::to_string(t.degree)] = {{"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}};
      if (t.activation_bytes > 0) tp[std::to_string(t.degree)]["activation_bytes"] = t.activation_bytes;
    }
    out["tensor_parallel"] = std::move(tp);
  }
  // Absent when not recorded, so that profiles without it keep their fingerprints.
  if (layer.attention_forward_ms > 0 || layer.attention_activation_bytes > 0) {
    out["attention_core"] = {{"forward_ms", layer.attention_forward_ms},
                             {"activation_bytes", layer.attention_activation_bytes}};
  }
  return out;
}

json hardware_to_json(const Hardware& hw) {
  json out = {{"name", hw.name},
              {"gpus_per_node", hw.gpus_per_node},
              {"gpu_memory_bytes", hw.gpu_memory_bytes},
              {"intra_node_bytes_per_s", hw.intra_node_bytes_per_s},
              {"inter_node_bytes_per_s", hw.inter_node_bytes_per_s},
              {"latency_ms", hw.latency_ms}};
  if (hw.allreduce_bytes_per_s > 0) out["allreduce_bytes_per_s"] = hw.allreduce_bytes_per_s;
  if (hw.memory_bytes_per_s > 0) out["memory_bytes_per_s"] = hw.memory_bytes_per_s;  // absent: fingerprints stand
  if (!hw.allreduce_table.empty()) {
    json table = json::array();
    for (const auto& p : hw.allreduce_table) table.push_back({{"ranks", p.ranks}, {"bytes", p.bytes}, {"ms", p.ms}});
    out["allreduce_table"] = std::move(table);
  }
  if (!hw.intra_node_allreduce_table.empty()) {
    json table = json::array();
    for (const auto& p : hw.intra_node_allreduce_table) {
      table.push_back({{"ranks", p.ranks}, {"bytes", p.bytes}, {"ms", p.ms}});
    }
    out["intra_node_allreduce_table"] = std::move(table);
  }
  return out;
}

}  // namespace

Profile parse_profile(std::string_view json_text, const std::string& origin) {
  const json root = json_input::parse(json_text, origin);
  const FieldPath where(origin);
  json_input::require_format(root, kProfileFormat, where);
  Profile profile;
  profile.origin = origin;
  if (auto it = root.find("source"); it != root.end() && it->is_string()) profile.source = it->get<std::string>();
  const json& model = json_input::require_object(root, "model", where);
  if (auto it = model.find("name"); it != model.end() && it->is_string()) profile.model_name = it->get<std::string>();
  profile.model_json = model.dump();
  profile.hardware = parse_hardware(json_input::require_object(root, "hardware", where), where / "hardware");
  profile.microbatch_size = static_cast<int>(json_input::require_integer(root, "microbatch_size", where, 1, 1 << 24));
  const json& layers = json_input::require_array(root, "layers", where);
  if (layers.empty()) throw (where / "layers").error("expected at least one layer");
  if (layers.size() > kMaxLayers) {
    throw (where / "layers").error("expected at most " + std::to_string(kMaxLayers) + " layers");
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    profile.layers.push_back(parse_layer(layers[i], (where / "layers")[i], profile.hardware.gpus_per_node));
  }
  if (auto it = root.find("sequence_parallel"); it != root.end() && !it->is_null()) {
    if (!it->is_boolean()) throw (where / "sequence_parallel").error("expected true or false");
    profile.sequence_parallel = it->get<bool>();
  }
  if (auto it = root.find("notes"); it != root.end() && it->is_array()) {
    for (const auto& note : *it) {
      if (note.is_string()) profile.notes.push_back(note.get<std::string>());
    }
  }
  check_costs(profile);
  return profile;
}

Profile load_profile(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return import_oobleck_profile(path);
  return parse_profile(read_text_file(path), path.string());
}

std::string profile_to_json(const Profile& profile) {
  json layers = json::array();
  for (const auto& layer : profile.layers) layers.push_back(layer_to_json(layer));
  json out = {{"format", kProfileFormat},
              {"source", profile.source},
              {"model", profile.model_json.empty() ? json::object() : json::parse(profile.model_json)},
              {"hardware", hardware_to_json(profile.hardware)},
              {"microbatch_size", profile.microbatch_size},
              {"layers", std::move(layers)}};
  if (profile.sequence_parallel) out["sequence_parallel"] = true;
  if (!profile.notes.empty()) out["notes"] = profile.notes;
  return out.dump(2) + "\n";
}

std::string profile_fingerprint(const Profile& profile) {
  json layers = json::array();
  for (const auto& layer : profile.layers) layers.push_back(layer_to_json(layer));
  json fields = {{"hardware", hardware_to_json(profile.hardware)},
                 {"microbatch_size", profile.microbatch_size},
                 {"layers", layers}};
  if (profile.sequence_parallel) fields["sequence_parallel"] = true;  // absent: fingerprints made before it stand
  const std::string canonical = fields.dump();
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : canonical) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, hash);
  return text;
}

std::vector<int> degrees_split_over(const Profile& profile, const std::vector<int>& degrees) {
  std::vector<int> out;
  for (const int t : degrees) {
    if (t >= 1) out.push_back(t);
  }
  if (profile.model_json.empty()) return out;
  const json model = json::parse(profile.model_json, nullptr, false);
  if (!model.is_object()) return out;
  // (A free-form section: a field that is not a count from 1 to 2^40 names nothing.)
  const auto count = [&](const char* field) -> std::int64_t {
    const auto it = model.find(field);
    if (it == model.end() || !it->is_number_integer()) return 0;
    const auto n = it->get<std::int64_t>();
    return n >= 1 && n <= (std::int64_t{1} << 40) ? n : 0;
  };
  const auto architecture = model.find("architecture");
  const std::string kind =
      architecture != model.end() && architecture->is_string() ? architecture->get<std::string>() : "gpt2";
  const std::int64_t heads = count("heads");
  const bool llama = kind == "llama";
  const std::int64_t key_value_heads = llama && count("kv_heads") > 0 ? count("kv_heads") : heads;
  const std::int64_t mlp_units = llama ? count("ffn_hidden") : 4 * count("hidden");
  std::erase_if(out, [&](int t) {
    if (t == 1) return false;
    if (kind == "torchscript") return true;
    if (heads == 0) return false;
    const auto divides = [t](std::int64_t n) { return n % t == 0; };
    return !(divides(heads) && divides(key_value_heads) && (mlp_units == 0 || divides(mlp_units)));
  });
  return out;
}

bool splits_over(const Profile& profile, int degree) { return !degrees_split_over(profile, {degree}).empty(); }

namespace detail {

void sort_never_falling(std::vector<AllreducePoint>& table) {
  std::sort(table.begin(), table.end(), [](const AllreducePoint& a, const AllreducePoint& b) {
    return a.ranks != b.ranks ? a.ranks < b.ranks : a.bytes < b.bytes;
  });
  for (std::size_t i = 1; i < table.size(); ++i) {
    if (table[i].ranks == table[i - 1].ranks) table[i].ms = std::max(table[i].ms, table[i - 1].ms);
  }
}

void check_costs(const Profile& profile) {
  double total = 0;
  for (const auto& layer : profile.layers) total += layer.forward_ms + layer.backward_ms;
  if (total <= 0) throw InputError(profile.origin + ": layers: every forward_ms and backward_ms is 0; expected measured times");
}

}  // namespace detail
}  // namespace oobleck
