// Model configurations: named presets and JSON files, the parameter counts
// they imply and the model a profile describes. Two architectures: GPT-2
// style (LayerNorm, GELU MLP, learned positions, biases, the head tied to
// the token embedding) and Llama style (RMSNorm, SwiGLU MLP, rotary
// positions, grouped-query attention, no biases, an untied head). Plain
// C++: no libtorch here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"  // InputError

namespace oobleck::executor {

enum class Architecture : std::uint8_t { gpt2, llama, torchscript };

// A model of one's own: TorchScript layers, one file each, described by a
// manifest (`oobleck.torchscript-model.v1`, written by tools/export_model.py):
//   {"format": "oobleck.torchscript-model.v1", "name"?, "vocab", "seq_len",
//    "layers": [{"file", "name"?, "parameters",
//                "input": {"shape", "dtype"}, "output": {"shape", "dtype"}}, ...],
//    "tied"?: [{"layer": 0, "parameter": P}, {"layer": last, "parameter": Q}]}
// Shapes are lists of sizes, with "batch" and "seq" for the microbatch's
// dimensions. The first layer takes int64 token ids [batch, seq], the last
// gives float32 logits [batch, seq, vocab], and each layer's output is the
// next one's input. `parameters` is what the layer owns: the last layer's
// copy of a tied weight is not counted again. Only the first and the last
// layer may tie a weight (an embedding and its LM head).
struct ScriptedLayerSpec {
  std::string file;  // absolute
  std::string name;
  std::int64_t parameters = 0;
  // Sizes; kBatchDim and kSeqDim for the symbolic ones.
  std::vector<std::int64_t> input_shape, output_shape;
  std::string input_dtype, output_dtype;  // "int64", "float32"
};
struct ScriptedManifest {
  std::string path;  // absolute
  std::vector<ScriptedLayerSpec> layers;
  // The tied weight's name in the first and in the last layer, as the
  // TorchScript module names its parameters.
  std::optional<std::pair<std::string, std::string>> tied;
};
inline constexpr std::int64_t kBatchDim = -1, kSeqDim = -2;
// "[batch, seq, 64]".
[[nodiscard]] std::string shape_text(const std::vector<std::int64_t>& shape);

struct ModelConfig {
  std::string name;
  int layers = 0;   // transformer blocks
  int hidden = 0;   // h
  int heads = 0;
  int vocab = 0;
  int seq_len = 0;  // context length (learned positions for gpt2)
  Architecture architecture = Architecture::gpt2;
  // Llama only (0 for gpt2): key/value heads (grouped-query attention; equal
  // to `heads` without it), the SwiGLU MLP's hidden units, and the rotary
  // embedding's base.
  int kv_heads = 0;
  int ffn_hidden = 0;
  double rope_theta = 0;
  // TorchScript only: its manifest (layers = the files less the first and
  // the last; hidden = the first layer's output width; heads 1).
  std::shared_ptr<const ScriptedManifest> scripted = nullptr;
};

[[nodiscard]] inline bool is_scripted(const ModelConfig& c) { return c.architecture == Architecture::torchscript; }
// The manifest at `path`; InputError naming the file and the field when it
// is not one, or a layer file is missing.
[[nodiscard]] ModelConfig load_scripted_manifest(const std::string& path);
// The same from the manifest's text, its layer files not looked for (the
// path places them and names the manifest in messages).
[[nodiscard]] ModelConfig parse_scripted_manifest(std::string_view text, const std::string& path);
// Parameter names the tied weight has in the first and in the last layer
// (as a layer's named_parameters() names them), if the model ties one.
[[nodiscard]] std::optional<std::pair<std::string, std::string>> tied_parameter_names(const ModelConfig& c);
// A TorchScript parameter name as a layer registers it (libtorch's modules
// refuse dots in names): "0.weight" -> "0/weight".
[[nodiscard]] std::string scripted_parameter_name(std::string name);

[[nodiscard]] inline bool is_llama(const ModelConfig& c) { return c.architecture == Architecture::llama; }
// Whether the LM head reads the token embedding's weight (gpt2) or has its own (llama).
[[nodiscard]] inline bool ties_embedding(const ModelConfig& c) {
  return c.architecture == Architecture::gpt2 || (c.scripted && c.scripted->tied);
}
[[nodiscard]] inline int key_value_heads(const ModelConfig& c) { return is_llama(c) ? c.kv_heads : c.heads; }
// The MLP's hidden units: 4h for gpt2.
[[nodiscard]] inline int mlp_hidden(const ModelConfig& c) { return is_llama(c) ? c.ffn_hidden : 4 * c.hidden; }
// Whether a block splits over `degree` GPUs: the query heads, the key/value
// heads and the MLP's hidden units all divide.
[[nodiscard]] inline bool tensor_parallel_fits(const ModelConfig& c, int degree) {
  if (c.architecture == Architecture::torchscript) return degree == 1;  // its layers are opaque: none splits
  return degree >= 1 && c.heads % degree == 0 && key_value_heads(c) % degree == 0 && mlp_hidden(c) % degree == 0;
}
// "heads", or "heads and key/value heads" where they differ: for messages.
[[nodiscard]] std::string tensor_parallel_limit(const ModelConfig& c);

// gpt2-small/medium/large/xl, gpt3-125m/350m/760m/1.3b/2.7b/6.7b/13b/175b
// (GPT-3 paper, Table 2.1), llama2-7b/13b/70b and llama3-8b/70b (the
// published configurations), and tiny ones of each architecture for tests.
[[nodiscard]] const std::vector<ModelConfig>& model_presets();
// A preset name, or a JSON file {name?, layers, hidden, heads, vocab, seq_len,
// architecture?, kv_heads?, ffn_hidden?, rope_theta?}; the last three only
// with "architecture": "llama" (defaults: heads, ffn_hidden required, 10000).
[[nodiscard]] ModelConfig load_model_config(const std::string& name_or_path);
[[nodiscard]] ModelConfig parse_model_config(std::string_view json_text, const std::string& origin);
// Throws InputError naming the field when the config cannot be built.
void validate(const ModelConfig& config, const std::string& origin);

// Pipeline layers: 0 is the embedding, 1..layers the blocks, layers + 1 the
// final norm with the LM head (for gpt2 its weight is the embedding's, tied).
[[nodiscard]] inline int pipeline_layers(const ModelConfig& c) { return c.layers + 2; }
[[nodiscard]] std::string layer_name(const ModelConfig& c, int index);

// Parameters each pipeline layer owns. A gpt2 head owns only its LayerNorm:
// the tied weight is counted once, at the embedding.
[[nodiscard]] std::int64_t layer_parameters(const ModelConfig& c, int index);
[[nodiscard]] std::int64_t block_parameters(std::int64_t hidden);  // gpt2: 12h^2 + 13h
// Llama: 2h^2 (query, output) + 2h kv d (key, value) + 3 h f (SwiGLU) + 2h (norms).
[[nodiscard]] std::int64_t llama_block_parameters(const ModelConfig& c);
[[nodiscard]] std::int64_t model_parameters(const ModelConfig& c);

// {"name", "layers", "hidden", "heads", "vocab", "seq_len", ["architecture",
// "kv_heads", "ffn_hidden", "rope_theta" for llama,] "parameters", "dtype"}.
[[nodiscard]] std::string model_json(const ModelConfig& c, std::string_view dtype);

// The model of a profile's `model` section; throws InputError when its
// layers are not the profile's.
[[nodiscard]] ModelConfig model_of_profile(const Profile& profile);

}  // namespace oobleck::executor
