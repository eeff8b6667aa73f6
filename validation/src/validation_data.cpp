// The validation suite and its datasets: vTrain's CSV of single-node
// Megatron-DeepSpeed runs, and oobleck.validation.v1 documents (Megatron on
// Selene, Korthikanti et al. 2022, Table 5).
#include <charconv>
#include <cstdio>
#include <sstream>

#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/validation.h"

namespace oobleck::validation {
namespace {

using namespace json_input;

constexpr int kMostGpus = 1 << 20;
constexpr int kMostWidth = 1 << 20;  // hidden, feed-forward, sequence
constexpr int kMostLayers = 100000;
constexpr int kMostRows = 100000;
constexpr long long kMostPasses = 10'000'000;
constexpr int kGpt2Vocab = 50257;  // Megatron's GPT default, before padding

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

// The degrees, the batch and the blocks must describe a run Megatron could make.
void check_run(const MeasuredRun& r, const std::string& where) {
  const auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  if (static_cast<long long>(r.tensor) * r.pipeline * r.data != r.gpus) {
    fail("tensor x pipeline x data parallel degrees (" + std::to_string(r.tensor) + " x " +
         std::to_string(r.pipeline) + " x " + std::to_string(r.data) + ") must equal the GPUs (" +
         std::to_string(r.gpus) + ")");
  }
  if (r.global_batch % (r.microbatch * r.data) != 0) {
    fail("global batch " + std::to_string(r.global_batch) + " is not a multiple of microbatch x data degree (" +
         std::to_string(r.microbatch * r.data) + ")");
  }
  if (r.model.layers % (r.pipeline * r.interleave) != 0) {
    fail(std::to_string(r.model.layers) + " blocks do not divide among " + std::to_string(r.pipeline) +
         " stages x " + std::to_string(r.interleave) + " virtual stages");
  }
  // What playing it costs: every pass of every (virtual) stage.
  const long long passes = static_cast<long long>(r.global_batch / (r.microbatch * r.data)) * r.pipeline * r.interleave;
  if (passes > kMostPasses) {
    fail(std::to_string(passes) + " microbatch passes a pipeline (microbatches x stages x virtual stages); at most " +
         std::to_string(kMostPasses) + " are played");
  }
  if (r.model.hidden % r.model.heads != 0) fail("hidden size not a multiple of the attention heads");
  if (r.model.heads % r.tensor != 0) fail("attention heads not a multiple of the tensor degree");
}

std::vector<MeasuredRun> parse_vtrain_csv(std::string_view text, const std::string& origin, const std::string& name) {
  std::istringstream in{std::string(text)};
  std::vector<MeasuredRun> runs;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string where = origin + ":" + std::to_string(line_number);
    const std::string content = trim(line);
    if (content.empty() || content.front() == '#') continue;
    std::vector<std::string> fields;
    std::stringstream cells(content);
    for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(trim(cell));
    if (fields.size() != 11) {
      throw InputError(where + ": expected 11 comma-separated fields (GPUs, global batch, micro batch, hidden, heads, "
                               "layers, sequence, tensor, data, pipeline degrees, iteration ms), got " +
                       std::to_string(fields.size()));
    }
    std::vector<long long> v(10);
    static const char* names[] = {"GPUs",   "global batch",  "micro batch",    "hidden size",       "attention heads",
                                  "layers", "sequence length", "tensor degree", "data degree", "pipeline degree"};
    static const long long most[] = {kMostGpus, 1 << 24, 1 << 20, kMostWidth, kMostWidth,
                                     kMostLayers, kMostWidth, kMostGpus, kMostGpus, kMostGpus};
    for (int i = 0; i < 10; ++i) {
      const std::string& f = fields[static_cast<std::size_t>(i)];
      const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v[static_cast<std::size_t>(i)]);
      if (ec != std::errc() || end != f.data() + f.size() || v[static_cast<std::size_t>(i)] < 1 ||
          v[static_cast<std::size_t>(i)] > most[i]) {
        throw InputError(where + ": " + names[i] + ": expected an integer in [1, " + std::to_string(most[i]) +
                         "], got \"" + f.substr(0, 40) + "\"");
      }
    }
    double ms = 0;
    {
      const std::string& f = fields[10];
      const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), ms);
      if (ec != std::errc() || end != f.data() + f.size() || !(ms > 0) || ms > 1e9) {
        throw InputError(where + ": iteration time (ms): expected a number in (0, 1e9], got \"" + f.substr(0, 40) +
                         "\"");
      }
    }
    if (runs.size() >= kMostRows) throw InputError(where + ": more than " + std::to_string(kMostRows) + " runs");
    MeasuredRun r;
    r.dataset = name;
    r.row = static_cast<int>(runs.size()) + 1;
    r.gpus = static_cast<int>(v[0]);
    r.global_batch = static_cast<int>(v[1]);
    r.microbatch = static_cast<int>(v[2]);
    r.model.hidden = static_cast<int>(v[3]);
    r.model.heads = static_cast<int>(v[4]);
    r.model.layers = static_cast<int>(v[5]);
    r.model.seq_len = static_cast<int>(v[6]);
    r.tensor = static_cast<int>(v[7]);
    r.data = static_cast<int>(v[8]);
    r.pipeline = static_cast<int>(v[9]);
    r.feedforward = 4 * r.model.hidden;
    r.model.vocab = padded_vocab(kGpt2Vocab, r.tensor);
    char label[160];
    std::snprintf(label, sizeof label, "gpt-h%d-L%d", r.model.hidden, r.model.layers);
    r.model.name = label;
    r.measured_ms = ms;
    std::snprintf(label, sizeof label, "t%d d%d p%d, h%d L%d s%d, mb %d B %d", r.tensor, r.data, r.pipeline,
                  r.model.hidden, r.model.layers, r.model.seq_len, r.microbatch, r.global_batch);
    r.label = label;
    check_run(r, where);
    runs.push_back(std::move(r));
  }
  if (runs.empty()) throw InputError(origin + ": no runs");
  return runs;
}

std::vector<MeasuredRun> parse_validation_json(std::string_view text, const std::string& origin,
                                               const std::string& name) {
  const json root = parse(text, origin);
  const FieldPath top(origin);
  require_format(root, "oobleck.validation.v1", top);
  const json& rows = require_array(root, "rows", top);
  if (rows.empty() || rows.size() > kMostRows) throw (top / "rows").error("expected 1 to 100000 runs");
  std::vector<MeasuredRun> runs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const FieldPath at = (top / "rows")[i];
    const json& row = rows[i];
    const json& model = require_object(row, "model", at);
    const json& execution = require_object(row, "execution", at);
    const FieldPath m = at / "model", e = at / "execution";
    MeasuredRun r;
    r.dataset = name;
    r.row = static_cast<int>(i) + 1;
    r.model.name = require_string(row, "model_name", at);
    r.model.hidden = static_cast<int>(require_integer(model, "hidden", m, 1, kMostWidth));
    r.feedforward = static_cast<int>(require_integer(model, "feedforward", m, 1, kMostWidth));
    r.model.seq_len = static_cast<int>(require_integer(model, "seq_size", m, 1, kMostWidth));
    r.model.heads = static_cast<int>(require_integer(model, "attn_heads", m, 1, kMostWidth));
    r.model.layers = static_cast<int>(require_integer(model, "num_blocks", m, 1, kMostLayers));
    const auto attention_width = require_integer(model, "attn_size", m, 1, kMostWidth);
    if (attention_width * r.model.heads != r.model.hidden) {
      throw (m / "attn_size").error("expected hidden / attn_heads = " +
                                    std::to_string(r.model.hidden / r.model.heads));
    }
    r.gpus = static_cast<int>(require_integer(execution, "num_procs", e, 1, kMostGpus));
    r.tensor = static_cast<int>(require_integer(execution, "tensor_par", e, 1, kMostGpus));
    r.pipeline = static_cast<int>(require_integer(execution, "pipeline_par", e, 1, kMostGpus));
    r.data = static_cast<int>(require_integer(execution, "data_par", e, 1, kMostGpus));
    r.global_batch = static_cast<int>(require_integer(execution, "batch_size", e, 1, 1 << 24));
    r.microbatch = static_cast<int>(require_integer(execution, "microbatch_size", e, 1, 1 << 20));
    r.interleave = static_cast<int>(require_integer(execution, "pipeline_interleaving", e, 1, kMostLayers));
    const std::string recompute = require_string(execution, "activation_recompute", e);
    if (recompute == "full") {
      r.recompute = "full";
    } else if (recompute == "attn_only") {
      r.recompute = "selective";
    } else {
      throw (e / "activation_recompute").error("expected full or attn_only, got \"" + recompute.substr(0, 40) + "\"");
    }
    r.sequence_parallel = require_string(execution, "tensor_par_comm_type", e) == "rs_ag";
    r.measured_ms = require_number(row, "measured_iteration_s", at, 1e-6, 1e6) * 1000.0;
    r.model.vocab = padded_vocab(kGpt2Vocab, r.tensor);
    r.label = r.model.name + " " + (r.recompute == "full" ? "full" : "seq+sel") + ", t" + std::to_string(r.tensor) +
              " p" + std::to_string(r.pipeline) + " d" + std::to_string(r.data) +
              (r.interleave > 1 ? " v" + std::to_string(r.interleave) : "") + ", B " + std::to_string(r.global_batch);
    check_run(r, at.str());
    runs.push_back(std::move(r));
  }
  return runs;
}

}  // namespace

std::vector<MeasuredRun> parse_dataset(std::string_view text, const std::string& origin, bool csv,
                                       const std::string& name) {
  return csv ? parse_vtrain_csv(text, origin, name) : parse_validation_json(text, origin, name);
}

int padded_vocab(int vocab, int tensor) {
  const int multiple = 128 * tensor;
  return (vocab + multiple - 1) / multiple * multiple;
}

Suite load_suite(const std::filesystem::path& path) {
  const json root = parse(read_text_file(path), path.string());
  const FieldPath top(path.string());
  require_format(root, "oobleck.validation-suite.v1", top);
  Suite suite;
  suite.path = path;
  suite.hardware = optional_string(root, "hardware", top, "a100-80gb");
  if (root.contains("max_compute_efficiency")) {
    suite.max_compute_efficiency = require_number(root, "max_compute_efficiency", top, 0.01, 1);
  }
  const json& datasets = require_array(root, "datasets", top);
  if (datasets.empty() || datasets.size() > 64) throw (top / "datasets").error("expected 1 to 64 datasets");
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    const FieldPath at = (top / "datasets")[i];
    const json& d = datasets[i];
    Dataset dataset;
    dataset.name = require_string(d, "name", at);
    dataset.file = require_string(d, "file", at);
    if (dataset.file.empty() || dataset.file.find('/') != std::string::npos || dataset.file.front() == '.') {
      throw (at / "file").error("expected a file name beside the suite (no folders)");
    }
    dataset.source = optional_string(d, "source", at, "");
    if (d.contains("intra_node_bytes_per_s")) {
      dataset.cluster.intra_node_bytes_per_s = require_number(d, "intra_node_bytes_per_s", at, 1e6, 1e15);
    }
    if (d.contains("inter_node_bytes_per_s")) {
      dataset.cluster.inter_node_bytes_per_s = require_number(d, "inter_node_bytes_per_s", at, 1e6, 1e15);
    }
    if (d.contains("calibrate_every")) {
      dataset.calibrate_every = static_cast<int>(require_integer(d, "calibrate_every", at, 0, kMostRows));
    }
    const json& bounds = require_object(d, "bounds", at);
    dataset.max_mean_error = require_number(bounds, "mean_error", at / "bounds", 0, 100);
    dataset.max_worst_error = require_number(bounds, "worst_error", at / "bounds", 0, 100);
    const std::filesystem::path file = path.parent_path() / dataset.file;
    dataset.runs = parse_dataset(read_text_file(file), file.string(), file.extension() == ".csv", dataset.name);
    suite.datasets.push_back(std::move(dataset));
  }
  return suite;
}

}  // namespace oobleck::validation
