// Model configurations: named presets and JSON files, the parameter counts
// they imply and the model a profile describes. Two architectures: GPT-2
// style (LayerNorm, GELU MLP, learned positions, biases, the head tied to
// the token embedding) and Llama style (RMSNorm, SwiGLU MLP, rotary
// positions, grouped-query attention, no biases, an untied head). Plain
// C++: no libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"  // InputError

namespace oobleck::executor {

enum class Architecture : std::uint8_t { gpt2, llama };

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
};

[[nodiscard]] inline bool is_llama(const ModelConfig& c) { return c.architecture == Architecture::llama; }
// Whether the LM head reads the token embedding's weight (gpt2) or has its own (llama).
[[nodiscard]] inline bool ties_embedding(const ModelConfig& c) { return !is_llama(c); }
[[nodiscard]] inline int key_value_heads(const ModelConfig& c) { return is_llama(c) ? c.kv_heads : c.heads; }
// The MLP's hidden units: 4h for gpt2.
[[nodiscard]] inline int mlp_hidden(const ModelConfig& c) { return is_llama(c) ? c.ffn_hidden : 4 * c.hidden; }
// Whether a block splits over `degree` GPUs: the query heads, the key/value
// heads and the MLP's hidden units all divide.
[[nodiscard]] inline bool tensor_parallel_fits(const ModelConfig& c, int degree) {
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
