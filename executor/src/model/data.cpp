#include "oobleck/common/files.h"
#include "oobleck/executor/data.h"

namespace oobleck::executor {

std::vector<std::uint16_t> tokenize_bytes(std::string_view text) {
  std::vector<std::uint16_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string tokens_to_bytes(const std::vector<std::uint16_t>& tokens) {
  std::string out;
  out.reserve(2 * tokens.size());
  for (std::uint16_t t : tokens) {
    out.push_back(static_cast<char>(t & 0xff));
    out.push_back(static_cast<char>(t >> 8));
  }
  return out;
}

std::vector<std::uint16_t> read_tokens(const std::string& path) {
  const std::string bytes = read_text_file(path);
  if (bytes.size() % 2 != 0) {
    throw InputError(path + ": " + std::to_string(bytes.size()) +
                     " bytes; expected little-endian uint16 tokens (an even size)");
  }
  std::vector<std::uint16_t> tokens(bytes.size() / 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                           (static_cast<unsigned char>(bytes[2 * i + 1]) << 8));
  }
  return tokens;
}

void check_tokens(const std::vector<std::uint16_t>& tokens, const ModelConfig& model, std::uint64_t seed,
                  const std::string& origin) {
  for (std::uint16_t t : tokens) {
    if (t >= model.vocab) {
      throw InputError(origin + ": token " + std::to_string(t) + " is outside the model's vocabulary of " +
                       std::to_string(model.vocab));
    }
  }
  try {
    (void)step_sequences(tokens, seed, 0, 0, 1, model.seq_len);  // long enough for one sequence
  } catch (const InputError& e) {
    throw InputError(origin + ": " + e.what());
  }
}

namespace {
std::uint64_t mix(std::uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

Sequences step_sequences(const std::vector<std::uint16_t>& tokens, std::uint64_t seed, int step, int first, int count,
                         int seq_len) {
  if (tokens.size() < static_cast<std::size_t>(seq_len) + 2) {
    throw InputError("data: " + std::to_string(tokens.size()) + " tokens; expected at least seq_len + 2 = " +
                     std::to_string(seq_len + 2));
  }
  const std::uint64_t windows = tokens.size() - static_cast<std::size_t>(seq_len);
  Sequences out{count, seq_len, {}, {}};
  out.inputs.reserve(static_cast<std::size_t>(count) * seq_len);
  out.targets.reserve(static_cast<std::size_t>(count) * seq_len);
  for (int j = first; j < first + count; ++j) {
    const std::uint64_t key = mix(mix(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(step)) +
                                  static_cast<std::uint64_t>(j));
    const std::size_t start = static_cast<std::size_t>(key % windows);
    for (int t = 0; t < seq_len; ++t) {
      out.inputs.push_back(tokens[start + t]);
      out.targets.push_back(tokens[start + t + 1]);
    }
  }
  return out;
}

}  // namespace oobleck::executor
