// Importing Oobleck's own profile folders (mb{B}.json, allreduce_in_node.json,
// allreduce_across_nodes.json) as oobleck.profile.v1: what Oobleck does not
// record is filled in from the options and listed in the profile's notes.
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <regex>

#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/planner.h"
#include "profile_format.h"

namespace oobleck {
namespace {

using json_input::FieldPath;
using json_input::json;
using detail::kMaxBytes;
using detail::kMaxLayers;
using detail::kMaxMs;

struct Fit {
  double bytes_per_s = 0;
  double latency_ms = 0;
  std::size_t points = 0;
};

// Least-squares fit of time_ms = latency_ms * steps + bytes / bandwidth over
// ring all-reduce measurements (steps = 2(k-1), bytes = 2(k-1)/k * size).
std::optional<Fit> fit_allreduce(const std::vector<std::array<double, 3>>& points) {
  // points: {steps, ring_bytes, time_ms}
  double suu = 0, sux = 0, sxx = 0, suy = 0, sxy = 0;
  for (const auto& [u, x, y] : points) {
    suu += u * u;
    sux += u * x;
    sxx += x * x;
    suy += u * y;
    sxy += x * y;
  }
  if (points.size() < 2 || sxx <= 0) return std::nullopt;
  const double det = suu * sxx - sux * sux;
  double latency = 0, inverse_bandwidth = 0;
  if (det > 1e-12 * suu * sxx) {
    latency = (suy * sxx - sxy * sux) / det;
    inverse_bandwidth = (suu * sxy - sux * suy) / det;
  }
  if (latency < 0 || inverse_bandwidth <= 0) {  // fall back to bandwidth only
    latency = 0;
    inverse_bandwidth = sxy / sxx;
  }
  if (!(inverse_bandwidth > 0)) return std::nullopt;
  return Fit{1000.0 / inverse_bandwidth, latency, points.size()};
}

json read_json_file(const std::filesystem::path& path) {
  return json_input::parse(read_text_file(path), path.string());
}

// The fit of a per-layer all-reduce file; `measured`, when given, gets its
// points: each layer's gradient (its param_bytes) among each group size.
std::optional<Fit> fit_oobleck_allreduce(const std::filesystem::path& path, const std::vector<LayerProfile>& layers,
                                         int* largest_group, std::vector<AllreducePoint>* measured = nullptr) {
  const json data = read_json_file(path);
  const FieldPath root(path.string());
  if (!data.is_array()) throw root.error("expected a list with one {group size: ms} object per layer");
  if (data.size() != layers.size()) {
    throw root.error("expected " + std::to_string(layers.size()) + " entries (one per layer, as in mb*.json), got " +
                     std::to_string(data.size()));
  }
  std::vector<std::array<double, 3>> points;
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (!data[i].is_object()) throw root[i].error("expected an object {group size: ms}");
    for (const auto& [key, value] : data[i].items()) {
      int group = 0;
      try {
        group = std::stoi(key);
      } catch (const std::exception&) {
      }
      if (group < 1) throw (root[i] / key).error("expected a positive group size as key");
      const double ms = json_input::as_number(value, root[i] / key, 0, 1e12);
      if (largest_group) *largest_group = std::max(*largest_group, group);
      if (group < 2 || layers[i].param_bytes <= 0) continue;
      const double k = group;
      points.push_back({2 * (k - 1), 2 * (k - 1) / k * static_cast<double>(layers[i].param_bytes), ms});
      if (measured) measured->push_back({group, static_cast<double>(layers[i].param_bytes), ms});
    }
  }
  return fit_allreduce(points);
}

// Which mb{B}.json: the one for `microbatch_size`, or with 0 the only one.
std::pair<int, std::filesystem::path> choose_layer_file(const std::filesystem::path& folder, int microbatch_size) {
  std::map<int, std::filesystem::path> by_microbatch;
  const std::regex name_pattern(R"(mb([0-9]{1,6})\.json)");
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, name_pattern)) by_microbatch[std::stoi(match[1])] = entry.path();
  }
  if (by_microbatch.empty()) throw InputError(folder.string() + ": no mb{B}.json file (Oobleck's per-layer profile)");
  std::filesystem::path mb_path;
  if (microbatch_size > 0) {
    auto it = by_microbatch.find(microbatch_size);
    if (it == by_microbatch.end()) {
      throw InputError(folder.string() + ": no mb" + std::to_string(microbatch_size) + ".json");
    }
    mb_path = it->second;
  } else if (by_microbatch.size() == 1) {
    microbatch_size = by_microbatch.begin()->first;
    mb_path = by_microbatch.begin()->second;
  } else {
    std::string sizes;
    for (const auto& [size, path] : by_microbatch) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    throw InputError(folder.string() + ": several microbatch sizes (" + sizes + "); choose one with --microbatch-size");
  }
  if (microbatch_size < 1) throw InputError(mb_path.string() + ": microbatch size must be at least 1");
  return {microbatch_size, mb_path};
}

// The layers of an mb{B}.json: {forward, backward, mem_required: [params,
// activations]} each; the optimizer state is a multiple of the weights.
std::vector<LayerProfile> read_oobleck_layers(const std::filesystem::path& mb_path,
                                              double optimizer_bytes_per_param_byte) {
  const json mb = read_json_file(mb_path);
  const FieldPath mb_where(mb_path.string());
  if (!mb.is_array() || mb.empty() || mb.size() > kMaxLayers) {
    throw mb_where.error("expected a list of 1 to " + std::to_string(kMaxLayers) +
                         " {forward, backward, mem_required} objects");
  }
  std::vector<LayerProfile> layers;
  for (std::size_t i = 0; i < mb.size(); ++i) {
    const FieldPath at = mb_where[i];
    LayerProfile layer;
    layer.name = "layer" + std::to_string(i);
    layer.forward_ms = json_input::require_number(mb[i], "forward", at, 0, kMaxMs);
    layer.backward_ms = json_input::require_number(mb[i], "backward", at, 0, kMaxMs);
    const json& memory = json_input::require_array(mb[i], "mem_required", at);
    if (memory.size() != 2) throw (at / "mem_required").error("expected [param_bytes, activation_bytes]");
    layer.param_bytes = json_input::as_integer(memory[0], (at / "mem_required")[0], 0, kMaxBytes);
    layer.activation_bytes = json_input::as_integer(memory[1], (at / "mem_required")[1], 0, kMaxBytes);
    const double optimizer = static_cast<double>(layer.param_bytes) * optimizer_bytes_per_param_byte;
    if (!(optimizer >= 0 && optimizer <= static_cast<double>(kMaxBytes))) {
      throw (at / "mem_required").error("param_bytes x optimizer_bytes_per_param_byte is out of range");
    }
    layer.optimizer_bytes = static_cast<Bytes>(optimizer);
    layer.output_bytes = layer.activation_bytes;
    layers.push_back(std::move(layer));
  }
  return layers;
}

void note_layer_assumptions(Profile& profile, const std::filesystem::path& mb_path,
                            double optimizer_bytes_per_param_byte) {
  profile.notes.push_back("layer times and memory from " + mb_path.filename().string() + " (Oobleck profile)");
  char buffer[160];
  std::snprintf(buffer, sizeof buffer,
                "optimizer_bytes = %.3g x param_bytes (not recorded by Oobleck; AdamW with fp32 gradient and moments)",
                optimizer_bytes_per_param_byte);
  profile.notes.emplace_back(buffer);
  profile.notes.emplace_back(
      "output_bytes = activation_bytes: Oobleck records the memory its no-grad forward allocates, "
      "which is the layer's output");
}

// Measured all-reduces as a table: layers of one size and group measured
// alike are averaged into one point, the times made never to fall.
std::vector<AllreducePoint> table_of(const std::vector<AllreducePoint>& measured) {
  std::map<std::pair<int, double>, std::pair<double, int>> by_size;
  for (const auto& p : measured) {
    auto& [sum, count] = by_size[{p.ranks, p.bytes}];
    sum += p.ms;
    count += 1;
  }
  std::vector<AllreducePoint> out;
  for (const auto& [key, value] : by_size) out.push_back({key.first, key.second, value.first / value.second});
  detail::sort_never_falling(out);
  return out;
}

// Bandwidth inside a node from allreduce_in_node.json, where it has enough
// group sizes, and its points as the intra-node table (they price
// tensor-parallel all-reduces); returns the largest group (1 without the file).
int fit_in_node_links(Profile& profile, const std::filesystem::path& in_node) {
  int largest_in_node = 1;
  if (!std::filesystem::exists(in_node)) {
    profile.notes.emplace_back("intra_node_bytes_per_s = 1.5e11 (default: no allreduce_in_node.json)");
    return largest_in_node;
  }
  std::vector<AllreducePoint> measured;
  const auto fit = fit_oobleck_allreduce(in_node, profile.layers, &largest_in_node, &measured);
  profile.hardware.intra_node_allreduce_table = table_of(measured);
  if (!measured.empty()) {
    profile.notes.push_back("intra_node_allreduce_table: " +
                            std::to_string(profile.hardware.intra_node_allreduce_table.size()) +
                            " points (each layer's gradient among each GPU count) from " +
                            in_node.filename().string() + ", never falling as sizes grow");
  }
  if (fit) {
    profile.hardware.intra_node_bytes_per_s = fit->bytes_per_s;
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, "intra_node_bytes_per_s = %.4g fitted to %zu ring all-reduce times in %s",
                  fit->bytes_per_s, fit->points, in_node.filename().c_str());
    profile.notes.emplace_back(buffer);
  } else {
    profile.notes.push_back("intra_node_bytes_per_s = 1.5e11 (default: " + in_node.filename().string() +
                            " has too few group sizes to fit)");
  }
  return largest_in_node;
}

// Bandwidth and latency between nodes from allreduce_across_nodes.json,
// where it has enough node counts.
void fit_across_node_links(Profile& profile, const std::filesystem::path& across) {
  if (!std::filesystem::exists(across)) {
    profile.notes.emplace_back(
        "inter_node_bytes_per_s = 1.25e10, latency_ms = 0.01 (defaults: no allreduce_across_nodes.json)");
    return;
  }
  std::vector<AllreducePoint> measured;
  const auto fit = fit_oobleck_allreduce(across, profile.layers, nullptr, &measured);
  // The points themselves price the gradient all-reduce (allreduces.cpp).
  profile.hardware.allreduce_table = table_of(measured);
  if (!measured.empty()) {
    profile.notes.push_back("allreduce_table: " + std::to_string(profile.hardware.allreduce_table.size()) +
                            " points (each layer's gradient among each node count) from " +
                            across.filename().string() + ", never falling as sizes grow");
  }
  if (fit) {
    profile.hardware.inter_node_bytes_per_s = fit->bytes_per_s;
    profile.hardware.latency_ms = fit->latency_ms;
    char buffer[160];
    std::snprintf(buffer, sizeof buffer,
                  "inter_node_bytes_per_s = %.4g and latency_ms = %.4g fitted to %zu ring all-reduce times in %s",
                  fit->bytes_per_s, fit->latency_ms, fit->points, across.filename().c_str());
    profile.notes.emplace_back(buffer);
  } else {
    profile.notes.push_back("inter_node_bytes_per_s = 1.25e10, latency_ms = 0.01 (defaults: " +
                            across.filename().string() + " has too few node counts to fit)");
  }
}

}  // namespace

Profile import_oobleck_profile(const std::filesystem::path& folder, const OobleckImportOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    throw InputError(folder.string() + ": expected an Oobleck profile folder (mb{B}.json, allreduce_*.json)");
  }
  const auto [microbatch_size, mb_path] = choose_layer_file(folder, options.microbatch_size);
  Profile profile;
  profile.origin = folder.string();
  profile.source = "imported-oobleck";
  const std::string folder_name = std::filesystem::absolute(folder).lexically_normal().filename().string();
  profile.model_name = folder_name.empty() ? "oobleck-model" : folder_name;
  profile.microbatch_size = microbatch_size;
  profile.layers = read_oobleck_layers(mb_path, options.optimizer_bytes_per_param_byte);
  note_layer_assumptions(profile, mb_path, options.optimizer_bytes_per_param_byte);

  Hardware& hw = profile.hardware;
  hw.name = "imported from Oobleck profile " + profile.model_name;
  hw.gpu_memory_bytes = options.gpu_memory_bytes;
  profile.notes.push_back("gpu_memory_bytes = " + std::to_string(options.gpu_memory_bytes) +
                          " (not recorded by Oobleck; set with --gpu-memory-bytes)");
  // Defaults when the all-reduce files are missing or say nothing usable.
  hw.intra_node_bytes_per_s = 150e9;
  hw.inter_node_bytes_per_s = 12.5e9;
  hw.latency_ms = 0.01;
  const auto in_node = folder / "allreduce_in_node.json";
  const int largest_in_node = fit_in_node_links(profile, in_node);
  fit_across_node_links(profile, folder / "allreduce_across_nodes.json");
  if (options.gpus_per_node > 0) {
    hw.gpus_per_node = options.gpus_per_node;
  } else if (largest_in_node > 1024) {
    throw InputError(in_node.string() + ": groups of up to " + std::to_string(largest_in_node) +
                     " GPUs; expected at most 1024 per node");
  } else {
    hw.gpus_per_node = largest_in_node;
    profile.notes.push_back("gpus_per_node = " + std::to_string(largest_in_node) +
                            " (largest group in allreduce_in_node.json; set with --gpus-per-node)");
  }
  profile.model_json = json{{"name", profile.model_name}, {"layers", profile.layers.size()}}.dump();
  detail::check_costs(profile);
  return profile;
}

}  // namespace oobleck
