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
      // Llama 2 (Touvron et al. 2023) and Llama 3 (Grattafiori et al. 2024),
      // as their released configurations give them: blocks, hidden, heads,
      // vocabulary, context, key/value heads, SwiGLU width, rotary base.
      {"llama2-7b", 32, 4096, 32, 32000, 4096, Architecture::llama, 32, 11008, 10000},
      {"llama2-13b", 40, 5120, 40, 32000, 4096, Architecture::llama, 40, 13824, 10000},
      {"llama2-70b", 80, 8192, 64, 32000, 4096, Architecture::llama, 8, 28672, 10000},
      {"llama3-8b", 32, 4096, 32, 128256, 8192, Architecture::llama, 8, 14336, 500000},
      {"llama3-70b", 80, 8192, 64, 128256, 8192, Architecture::llama, 8, 28672, 500000},
      // SwiGLU width about 8h/3, rounded up to a multiple of 16, as Llama's is.
      {"llama-tiny", 4, 64, 4, 256, 32, Architecture::llama, 2, 176, 10000},
      {"llama-mini", 6, 256, 8, 4096, 128, Architecture::llama, 4, 688, 10000},
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
  if (is_scripted(c) && !c.scripted) fail("manifest", "missing: a TorchScript model needs its manifest");
  if (!is_llama(c)) {
    if (c.kv_heads != 0 || c.ffn_hidden != 0 || c.rope_theta != 0) {
      fail("kv_heads, ffn_hidden, rope_theta", "only a llama architecture takes them");
    }
    return;
  }
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0) {
    fail("kv_heads", "expected a divisor of the " + std::to_string(c.heads) + " heads, got " +
                         std::to_string(c.kv_heads));
  }
  if ((c.hidden / c.heads) % 2 != 0) {
    fail("heads", "rotary embeddings need an even head size; hidden / heads = " + std::to_string(c.hidden / c.heads));
  }
  if (c.ffn_hidden < 1 || c.ffn_hidden > 1 << 22) {
    fail("ffn_hidden", "expected 1 to 2^22, got " + std::to_string(c.ffn_hidden));
  }
  if (!(c.rope_theta > 1) || !(c.rope_theta <= 1e9)) {
    fail("rope_theta", "expected a number above 1 and at most 1e9, got " + std::to_string(c.rope_theta));
  }
}

std::string tensor_parallel_limit(const ModelConfig& c) {
  if (is_scripted(c)) return "layers (a TorchScript model's layers are not split)";
  std::string out = std::to_string(c.heads) + " attention heads";
  if (key_value_heads(c) != c.heads) out += " and " + std::to_string(key_value_heads(c)) + " key/value heads";
  if (mlp_hidden(c) % c.heads != 0) out += " and " + std::to_string(mlp_hidden(c)) + " MLP units";
  return out;
}

ModelConfig parse_model_config(std::string_view text, const std::string& origin) {
  const nlohmann::json doc = json_input::parse(text, origin);
  if (!doc.is_object()) throw InputError(origin + ": expected a JSON object {layers, hidden, heads, vocab, seq_len}");
  ModelConfig c;
  c.name = json_input::optional_string(doc, "name", json_input::FieldPath(origin), "custom");
  const std::string architecture =
      json_input::optional_string(doc, "architecture", json_input::FieldPath(origin), "gpt2");
  if (architecture != "gpt2" && architecture != "llama" && architecture != "torchscript") {
    throw InputError(origin + ": architecture: expected \"gpt2\", \"llama\" or \"torchscript\", got " +
                     quoted_excerpt(architecture));
  }
  if (architecture == "torchscript") {
    // The model is its manifest; the other fields must still describe it.
    ModelConfig scripted =
        load_scripted_manifest(json_input::require_string(doc, "manifest", json_input::FieldPath(origin)));
    scripted.name = c.name;
    const std::pair<const char*, int> fields[] = {{"layers", scripted.layers}, {"hidden", scripted.hidden},
                                                  {"heads", scripted.heads},   {"vocab", scripted.vocab},
                                                  {"seq_len", scripted.seq_len}};
    for (const auto& [key, value] : fields) {
      if (!doc.contains(key) || doc[key] != value) {
        throw InputError(origin + ": " + key + ": " + (doc.contains(key) ? json_input::value_excerpt(doc[key]) : "missing") +
                         ", but the manifest " + doc["manifest"].get<std::string>() + " gives " + std::to_string(value));
      }
    }
    return scripted;
  }
  if (architecture == "llama") {
    c.architecture = Architecture::llama;
    c.rope_theta = 10000;
  }
  for (const auto& [key, value] : doc.items()) {
    // A profile's model section carries these too; `parameters` is checked below.
    if (key == "name" || key == "description" || key == "dtype" || key == "parameters" || key == "architecture" ||
        key == "manifest") {
      continue;
    }
    if (key == "rope_theta") {
      if (!value.is_number() || !(value.get<double>() > 1) || !(value.get<double>() <= 1e9)) {
        throw InputError(origin + ": rope_theta: expected a number above 1 and at most 1e9, got " +
                         json_input::value_excerpt(value));
      }
      c.rope_theta = value.get<double>();
      if (!is_llama(c)) throw InputError(origin + ": rope_theta: only \"architecture\": \"llama\" takes it");
      continue;
    }
    int* field = key == "layers" ? &c.layers
                 : key == "hidden" ? &c.hidden
                 : key == "heads" ? &c.heads
                 : key == "vocab" ? &c.vocab
                 : key == "seq_len" ? &c.seq_len
                 : key == "kv_heads" ? &c.kv_heads
                 : key == "ffn_hidden" ? &c.ffn_hidden
                                       : nullptr;
    if (!field) {
      throw InputError(origin + ": " + excerpt(key) +
                       ": unknown field; expected layers, hidden, heads, vocab, seq_len, name, architecture "
                       "(and kv_heads, ffn_hidden, rope_theta for llama)");
    }
    if ((key == "kv_heads" || key == "ffn_hidden") && !is_llama(c)) {
      throw InputError(origin + ": " + key + ": only \"architecture\": \"llama\" takes it");
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
  if (is_llama(c)) {
    if (!doc.contains("ffn_hidden")) throw InputError(origin + ": ffn_hidden: missing (a llama model needs its MLP width)");
    if (!doc.contains("kv_heads")) c.kv_heads = c.heads;
  }
  validate(c, origin);
  if (doc.contains("parameters") &&
      (!doc["parameters"].is_number_integer() || doc["parameters"].get<std::int64_t>() != model_parameters(c))) {
    throw InputError(origin + ": parameters: " + json_input::value_excerpt(doc["parameters"]) + " does not match the " +
                     std::to_string(model_parameters(c)) + " that the other fields give");
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
    throw InputError("--model: unknown model \"" + name_or_path +
                     "\"; expected a config JSON file, a TorchScript model's manifest, or one of: " + names);
  }
  const std::string text = read_text_file(name_or_path);
  const nlohmann::json doc = json_input::parse(text, name_or_path);
  if (doc.is_object() && doc.contains("format")) return load_scripted_manifest(name_or_path);
  return parse_model_config(text, name_or_path);
}

std::string layer_name(const ModelConfig& c, int index) {
  if (is_scripted(c)) return c.scripted->layers.at(static_cast<std::size_t>(index)).name;
  if (index == 0) return "embedding";
  if (index == c.layers + 1) return "final_norm_and_lm_head";
  return "block" + std::to_string(index - 1);
}

std::int64_t block_parameters(std::int64_t h) { return 12 * h * h + 13 * h; }

std::int64_t llama_block_parameters(const ModelConfig& c) {
  const std::int64_t h = c.hidden, kv = static_cast<std::int64_t>(key_value_heads(c)) * (h / c.heads);
  return 2 * h * h + 2 * h * kv + 3 * h * mlp_hidden(c) + 2 * h;
}

std::int64_t layer_parameters(const ModelConfig& c, int index) {
  const std::int64_t h = c.hidden, vocab_rows = static_cast<std::int64_t>(c.vocab) * h;
  if (is_scripted(c)) return c.scripted->layers.at(static_cast<std::size_t>(index)).parameters;
  if (is_llama(c)) {
    if (index == 0) return vocab_rows;                  // no position table: rotary positions
    if (index == c.layers + 1) return vocab_rows + h;   // final RMSNorm and the head's own weight
    return llama_block_parameters(c);
  }
  if (index == 0) return vocab_rows + static_cast<std::int64_t>(c.seq_len) * h;
  if (index == c.layers + 1) return 2 * h;  // final LayerNorm; the head's weight is the embedding's
  return block_parameters(h);
}

std::int64_t model_parameters(const ModelConfig& c) {
  std::int64_t total = 0;
  for (int i = 0; i < pipeline_layers(c); ++i) total += layer_parameters(c, i);
  return total;
}

std::string model_json(const ModelConfig& c, std::string_view dtype) {
  nlohmann::ordered_json doc{{"name", c.name},   {"layers", c.layers}, {"hidden", c.hidden},
                             {"heads", c.heads}, {"vocab", c.vocab},   {"seq_len", c.seq_len}};
  if (is_scripted(c)) {
    doc["architecture"] = "torchscript";
    doc["manifest"] = c.scripted->path;
  }
  if (is_llama(c)) {
    doc["architecture"] = "llama";
    doc["kv_heads"] = c.kv_heads;
    doc["ffn_hidden"] = c.ffn_hidden;
    doc["rope_theta"] = c.rope_theta;
  }
  doc["parameters"] = model_parameters(c);
  doc["dtype"] = dtype;
  return doc.dump();
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
