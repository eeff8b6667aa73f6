// GPT model configurations: named presets and JSON files, the parameter
// counts they imply and the model a profile describes. Plain C++: no
// libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"  // InputError

namespace oobleck::executor {

struct ModelConfig {
  std::string name;
  int layers = 0;   // transformer blocks
  int hidden = 0;   // h
  int heads = 0;
  int vocab = 0;
  int seq_len = 0;  // context length (learned positions)
};

// gpt2-small/medium/large/xl, gpt3-125m/350m/760m/1.3b/2.7b/6.7b/13b/175b
// (GPT-3 paper, Table 2.1), and tiny ones for tests.
[[nodiscard]] const std::vector<ModelConfig>& model_presets();
// A preset name, or a JSON file {name?, layers, hidden, heads, vocab, seq_len}.
[[nodiscard]] ModelConfig load_model_config(const std::string& name_or_path);
[[nodiscard]] ModelConfig parse_model_config(std::string_view json_text, const std::string& origin);
// Throws InputError naming the field when the config cannot be built.
void validate(const ModelConfig& config, const std::string& origin);

// Pipeline layers: 0 is the embedding, 1..layers the blocks, layers + 1 the
// final LayerNorm with the LM head (its weight is the embedding's, tied).
[[nodiscard]] inline int pipeline_layers(const ModelConfig& c) { return c.layers + 2; }
[[nodiscard]] std::string layer_name(const ModelConfig& c, int index);

// Parameters each pipeline layer owns. The head owns only its LayerNorm: the
// tied weight is counted once, at the embedding.
[[nodiscard]] std::int64_t layer_parameters(const ModelConfig& c, int index);
[[nodiscard]] std::int64_t block_parameters(std::int64_t hidden);  // 12h^2 + 13h
[[nodiscard]] std::int64_t model_parameters(const ModelConfig& c);

// {"name", "layers", "hidden", "heads", "vocab", "seq_len", "parameters", "dtype"}.
[[nodiscard]] std::string model_json(const ModelConfig& c, std::string_view dtype);

// The model of a profile's `model` section; throws InputError when its
// layers are not the profile's.
[[nodiscard]] ModelConfig model_of_profile(const Profile& profile);

}  // namespace oobleck::executor
