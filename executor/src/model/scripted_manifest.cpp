// The manifest of a model of one's own (TorchScript layers): read, checked
// field by field and between layers, and turned into the ModelConfig the
// planner, the profiler and the executor share. Plain C++: the layer files
// are only looked for here; executor/src/model/scripted.cpp loads them.
#include <filesystem>
#include <set>

#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/executor/model_config.h"

namespace oobleck::executor {
namespace {

using json_input::FieldPath;
using json_input::json;

constexpr std::int64_t kMostSize = std::int64_t{1} << 31;

std::vector<std::int64_t> read_shape(const json& value, const FieldPath& where) {
  if (!value.is_array() || value.empty() || value.size() > 8) {
    throw where.error("expected a list of 1 to 8 sizes (\"batch\", \"seq\" or a positive integer), got " +
                      json_input::value_excerpt(value));
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& size = value[i];
    if (size.is_string() && (size == "batch" || size == "seq")) {
      out.push_back(size == "batch" ? kBatchDim : kSeqDim);
    } else if (size.is_string()) {
      throw where[i].error("expected \"batch\", \"seq\" or a positive integer, got " + json_input::value_excerpt(size));
    } else {
      out.push_back(json_input::as_integer(size, where[i], 1, kMostSize));
    }
  }
  return out;
}

std::string read_dtype(const json& tensor, const FieldPath& where) {
  const std::string dtype = json_input::require_string(tensor, "dtype", where);
  if (dtype != "int64" && dtype != "float32") {
    throw(where / "dtype").error("expected \"int64\" or \"float32\", got " + quoted_excerpt(dtype));
  }
  return dtype;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += shape[i] == kBatchDim ? "batch" : shape[i] == kSeqDim ? "seq" : std::to_string(shape[i]);
  }
  return out + "]";
}

std::string scripted_parameter_name(std::string name) {
  for (auto& c : name) {
    if (c == '.') c = '/';
  }
  return name;
}

std::optional<std::pair<std::string, std::string>> tied_parameter_names(const ModelConfig& c) {
  if (c.architecture == Architecture::gpt2) return std::pair<std::string, std::string>{"token", "tied_token"};
  if (!c.scripted || !c.scripted->tied) return std::nullopt;
  return std::pair{scripted_parameter_name(c.scripted->tied->first), scripted_parameter_name(c.scripted->tied->second)};
}

ModelConfig load_scripted_manifest(const std::string& given) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(given, error)) {
    throw InputError(given + ": " + (std::filesystem::exists(given, error) ? "not a regular file" : "no such file") +
                     "; expected a TorchScript model's manifest.json");
  }
  ModelConfig c = parse_scripted_manifest(read_text_file(given), given);
  for (std::size_t i = 0; i < c.scripted->layers.size(); ++i) {
    const auto& file = c.scripted->layers[i].file;
    if (!std::filesystem::is_regular_file(file, error)) {
      throw((FieldPath(given) / "layers")[i] / "file")
          .error(quoted_excerpt(std::filesystem::path(file).filename().string()) + ": no such file (" + file + ")");
    }
  }
  return c;
}

ModelConfig parse_scripted_manifest(std::string_view text, const std::string& given) {
  const std::string path = std::filesystem::absolute(given).lexically_normal().string();
  const json root = json_input::parse(text, given);
  const FieldPath where(given);
  json_input::require_format(root, "oobleck.torchscript-model.v1", where);
  for (const auto& [key, value] : root.items()) {
    static const std::set<std::string> known = {"format", "name", "vocab", "seq_len", "layers", "tied", "description"};
    if (!known.count(key)) {
      throw(where / key).error("unknown field; expected format, name, vocab, seq_len, layers, tied, description");
    }
  }
  auto manifest = std::make_shared<ScriptedManifest>();
  manifest->path = path;
  ModelConfig c;
  c.architecture = Architecture::torchscript;
  c.name = json_input::optional_string(root, "name", where, std::filesystem::path(path).parent_path().filename());
  c.vocab = static_cast<int>(json_input::require_integer(root, "vocab", where, 2, 1 << 24));
  c.seq_len = static_cast<int>(json_input::require_integer(root, "seq_len", where, 1, 1 << 20));
  const json& layers = json_input::require_array(root, "layers", where);
  if (layers.size() < 3 || layers.size() > 10002) {
    throw(where / "layers")
        .error(
            "expected 3 to 10002 layers (an input layer, at least one more, an output "
            "layer), got " +
            std::to_string(layers.size()));
  }
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const FieldPath at = (where / "layers")[i];
    const json& layer = layers[i];
    if (!layer.is_object()) throw at.error("expected an object {file, parameters, input, output}");
    ScriptedLayerSpec spec;
    const std::string file = json_input::require_string(layer, "file", at);
    if (file.empty() || file.find('\0') != std::string::npos) throw(at / "file").error("expected a file name");
    spec.file = (folder / file).lexically_normal().string();
    spec.name = json_input::optional_string(layer, "name", at, std::filesystem::path(file).stem().string());
    spec.parameters = json_input::require_integer(layer, "parameters", at, 0, std::int64_t{1} << 50);
    const json& input = json_input::require_object(layer, "input", at);
    const json& output = json_input::require_object(layer, "output", at);
    spec.input_shape = read_shape(json_input::require(input, "shape", at / "input"), at / "input" / "shape");
    spec.output_shape = read_shape(json_input::require(output, "shape", at / "output"), at / "output" / "shape");
    spec.input_dtype = read_dtype(input, at / "input");
    spec.output_dtype = read_dtype(output, at / "output");
    manifest->layers.push_back(std::move(spec));
  }
  const auto& first = manifest->layers.front();
  const auto& last = manifest->layers.back();
  const std::vector<std::int64_t> tokens = {kBatchDim, kSeqDim}, logits = {kBatchDim, kSeqDim, c.vocab};
  if (first.input_shape != tokens || first.input_dtype != "int64") {
    throw(where / "layers")[0].error("input: the first layer takes int64 token ids [batch, seq], not " +
                                     first.input_dtype + " " + shape_text(first.input_shape));
  }
  if (last.output_shape != logits || last.output_dtype != "float32") {
    throw(where / "layers")[layers.size() - 1].error("output: the last layer gives float32 logits " +
                                                     shape_text(logits) + ", not " + last.output_dtype + " " +
                                                     shape_text(last.output_shape));
  }
  for (std::size_t i = 1; i < manifest->layers.size(); ++i) {
    const auto& before = manifest->layers[i - 1];
    const auto& spec = manifest->layers[i];
    if (spec.input_shape != before.output_shape || spec.input_dtype != before.output_dtype) {
      throw(where / "layers")[i].error("input: " + spec.input_dtype + " " + shape_text(spec.input_shape) +
                                       " does not match layers[" + std::to_string(i - 1) + "].output, " +
                                       before.output_dtype + " " + shape_text(before.output_shape));
    }
  }
  const auto& width = first.output_shape;
  c.hidden = static_cast<int>(std::min<std::int64_t>(width.back() > 0 ? width.back() : 1, 1 << 20));
  c.heads = 1;
  c.layers = static_cast<int>(manifest->layers.size()) - 2;
  if (root.contains("tied")) {
    const FieldPath at = where / "tied";
    const json& tied = root["tied"];
    const auto last_index = static_cast<std::int64_t>(manifest->layers.size()) - 1;
    if (!tied.is_array() || tied.size() != 2) {
      throw at.error("expected two {layer, parameter}: the first layer's weight and the last layer's copy of it");
    }
    std::string names[2];
    for (std::size_t k = 0; k < 2; ++k) {
      if (!tied[k].is_object()) throw at[k].error("expected an object {layer, parameter}");
      const std::int64_t layer = json_input::require_integer(tied[k], "layer", at[k], 0, last_index);
      if (layer != (k == 0 ? 0 : last_index)) {
        throw(at[k] / "layer")
            .error("only the first and the last layer may tie a weight (layers 0 and " + std::to_string(last_index) +
                   ", in that order), got " + std::to_string(layer));
      }
      names[k] = json_input::require_string(tied[k], "parameter", at[k]);
    }
    manifest->tied = std::pair{names[0], names[1]};
  }
  c.scripted = std::move(manifest);
  return c;
}

}  // namespace oobleck::executor
