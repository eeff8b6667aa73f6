// Training data: a token file of little-endian uint16 tokens (nanoGPT's
// train.bin), a byte-level tokenizer, and the global order of samples, which
// depends only on the seed and the step, never on the plan.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

// Byte-level: each byte is a token (vocabulary 256).
[[nodiscard]] std::vector<std::uint16_t> tokenize_bytes(std::string_view text);
[[nodiscard]] std::string tokens_to_bytes(const std::vector<std::uint16_t>& tokens);  // little-endian
[[nodiscard]] std::vector<std::uint16_t> read_tokens(const std::string& path);

// The sequences of one step: `count` windows of seq_len + 1 tokens (input and
// next-token target), starting at offsets drawn from (seed, step, index).
struct Sequences {
  int count = 0;
  int seq_len = 0;
  std::vector<std::int64_t> inputs;   // count x seq_len
  std::vector<std::int64_t> targets;  // count x seq_len
};
// InputError naming `origin` unless every token is inside the model's
// vocabulary and the file holds at least one sequence of seq_len + 1.
void check_tokens(const std::vector<std::uint16_t>& tokens, const ModelConfig& model, std::uint64_t seed,
                  const std::string& origin);

[[nodiscard]] Sequences step_sequences(const std::vector<std::uint16_t>& tokens, std::uint64_t seed, int step,
                                       int first, int count, int seq_len);

}  // namespace oobleck::executor
