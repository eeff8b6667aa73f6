#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/executor/model_config.h"

namespace oobleck::executor {

const std::vector<ModelConfig>& model_presets() {
  static const std::vector<ModelConfig> presets = {
      {"gpt2-small", 12, 768, 12, 50257, 1024},
      {"gpt2-medium", 24, 1024, 16, 50257, 1024},
      {"gpt2-large", 36, 1280, 20, 50257, 1024},
      {"gpt2-xl", 48, 1600, 25, 50257, 1024},
      // GPT-3 (Brown et al. 2020, Table 2.1): n_layers, d_model, n_heads; n_ctx
      // 2048. Two rows of the table do not multiply out (1.3B: 24 heads of 128
      // for d_model 2048; 13B: d_model 5140 with 40 heads of 128): here 16
      // heads and d_model 5120, as common reproductions use.
      {"gpt3-125m", 12, 768, 12, 50257, 2048},
      {"gpt3-350m", 24, 1024, 16, 50257, 2048},
      {"gpt3-760m", 24, 1536, 16, 50257, 2048},
      {"gpt3-1.3b", 24, 2048, 16, 50257, 2048},
      {"gpt3-2.7b", 32, 2560, 32, 50257, 2048},
      {"gpt3-6.7b", 32, 4096, 32, 50257, 2048},
      {"gpt3-13b", 40, 5120, 40, 50257, 2048},
      {"gpt3-175b", 96, 12288, 96, 50257, 2048},
      // Small enough to measure and train on one CPU in seconds.
      {"gpt-tiny", 4, 64, 4, 256, 32},
      {"gpt-mini", 6, 256, 8, 4096, 128},
  };
  return presets;
}

void validate(const ModelConfig& c, const std::string& origin) {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw InputError(origin + ": " + field + ": " + what);
  };
  if (c.layers < 1 || c.layers > 10000) fail("layers", "expected 1 to 10000 blocks, got " + std::to_string(c.layers));
  if (c.hidden < 1 || c.hidden > 1 << 20) fail("hidden", "expected 1 to 2^20, got " + std::to_string(c.hidden));
  if (c.heads < 1) fail("heads", "expected at least 1, got " + std::to_string(c.heads));
  if (c.hidden % c.heads != 0) {
    fail("heads", std::to_string(c.heads) + " heads do not divide hidden = " + std::to_string(c.hidden));
  }
  if (c.vocab < 2 || c.vocab > 1 << 24) fail("vocab", "expected 2 to 2^24, got " + std::to_string(c.vocab));
  if (c.seq_len < 1 || c.seq_len > 1 << 20) fail("seq_len", "expected 1 to 2^20, got " + std::to_string(c.seq_len));
}

ModelConfig parse_model_config(std::string_view text, const std::string& origin) {
  const nlohmann::json doc = json_input::parse(text, origin);
  if (!doc.is_object()) throw InputError(origin + ": expected a JSON object {layers, hidden, heads, vocab, seq_len}");
  ModelConfig c;
  c.name = json_input::optional_string(doc, "name", json_input::FieldPath(origin), "custom");
  for (const auto& [key, value] : doc.items()) {
    // A profile's model section carries these too; `parameters` is checked below.
    if (key == "name" || key == "description" || key == "dtype" || key == "parameters") continue;
    int* field = key == "layers" ? &c.layers
                 : key == "hidden" ? &c.hidden
                 : key == "heads" ? &c.heads
                 : key == "vocab" ? &c.vocab
                 : key == "seq_len" ? &c.seq_len
                                    : nullptr;
    if (!field) {
      throw InputError(origin + ": " + excerpt(key) +
                       ": unknown field; expected layers, hidden, heads, vocab, seq_len, name");
    }
    // validate() narrows each field further.
    constexpr std::int64_t kMost = 1 << 24;
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > kMost ||
        (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(kMost))) {
      throw InputError(origin + ": " + key + ": expected a positive integer of at most " + std::to_string(kMost) +
                       ", got " + json_input::value_excerpt(value));
    }
    *field = value.get<int>();
  }
  for (const char* key : {"layers", "hidden", "heads", "vocab", "seq_len"}) {
    if (!doc.contains(key)) throw InputError(origin + ": " + key + ": missing");
  }
  validate(c, origin);
  if (doc.contains("parameters") &&
      (!doc["parameters"].is_number_integer() || doc["parameters"].get<std::int64_t>() != model_parameters(c))) {
    throw InputError(origin + ": parameters: " + json_input::value_excerpt(doc["parameters"]) + " does not match the " +
                     std::to_string(model_parameters(c)) + " that layers, hidden, vocab and seq_len give");
  }
  return c;
}

ModelConfig load_model_config(const std::string& name_or_path) {
  for (const auto& preset : model_presets()) {
    if (preset.name == name_or_path) return preset;
  }
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    std::string names;
    for (const auto& preset : model_presets()) names += (names.empty() ? "" : ", ") + preset.name;
    throw InputError("--model: unknown model \"" + name_or_path + "\"; expected a config JSON file or one of: " + names);
  }
  return parse_model_config(read_text_file(name_or_path), name_or_path);
}

std::string layer_name(const ModelConfig& c, int index) {
  if (index == 0) return "embedding";
  if (index == c.layers + 1) return "final_norm_and_lm_head";
  return "block" + std::to_string(index - 1);
}

std::int64_t block_parameters(std::int64_t h) { return 12 * h * h + 13 * h; }

std::int64_t layer_parameters(const ModelConfig& c, int index) {
  const std::int64_t h = c.hidden;
  if (index == 0) return static_cast<std::int64_t>(c.vocab) * h + static_cast<std::int64_t>(c.seq_len) * h;
  if (index == c.layers + 1) return 2 * h;  // final LayerNorm; the head's weight is the embedding's
  return block_parameters(h);
}

std::int64_t model_parameters(const ModelConfig& c) {
  std::int64_t total = 0;
  for (int i = 0; i < pipeline_layers(c); ++i) total += layer_parameters(c, i);
  return total;
}

std::string model_json(const ModelConfig& c, std::string_view dtype) {
  return nlohmann::ordered_json{{"name", c.name},       {"layers", c.layers},   {"hidden", c.hidden},
                                {"heads", c.heads},     {"vocab", c.vocab},     {"seq_len", c.seq_len},
                                {"parameters", model_parameters(c)}, {"dtype", dtype}}
      .dump();
}

ModelConfig model_of_profile(const Profile& profile) {
  ModelConfig c = parse_model_config(profile.model_json, profile.origin + ": model");
  if (static_cast<int>(profile.layers.size()) != pipeline_layers(c)) {
    throw InputError(profile.origin + ": " + std::to_string(profile.layers.size()) + " layers, but its model has " +
                     std::to_string(pipeline_layers(c)) + " (embedding, blocks, head)");
  }
  return c;
}

}  // namespace oobleck::executor
