// Analytic profiles from FLOP and byte counts, hardware descriptions, and
// their JSON documents (fitted to measured profiles and compared with them:
// analytic_fit.cpp).
#include "oobleck/common/event_lines.h"
#include "oobleck/common/files.h"
#include "oobleck/common/json_input.h"
#include "oobleck/executor/analytic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace oobleck::executor {
namespace {

// Limits of a hardware description: beyond any machine, and within the
// ranges of a profile (oobleck.profile.v1), so that the planner takes the
// profile written from it.
constexpr double kMostPerSecond = 1e18;  // FLOP/s, memory bytes/s
constexpr double kMostLinkBytesPerSecond = 1e15;
constexpr double kMostMs = 1e9;
constexpr double kMostEfficiency = 1e6;  // a fit may exceed 1 where the peak given is low

}  // namespace

const std::vector<HardwareDescription>& hardware_presets() {
  static const std::vector<HardwareDescription> presets = {
      {"a100-80gb", "8x NVIDIA A100-SXM4-80GB, NVSwitch, 8x200 Gb/s InfiniBand",
       "NVIDIA A100 datasheet (19.5 TFLOP/s fp32, 312 TFLOP/s dense bf16, 2,039 GB/s HBM2e, NVLink 600 GB/s "
       "both ways); HDR InfiniBand 200 Gb/s per GPU",
       8, Bytes{80} << 30, 19.5e12, 312e12, 2.039e12, 0.5, 0.8, 240e9, 25e9, 0.01},
      {"h100-80gb", "8x NVIDIA H100-SXM5-80GB, NVSwitch, 8x400 Gb/s InfiniBand",
       "NVIDIA H100 datasheet (67 TFLOP/s fp32, 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink 900 GB/s both "
       "ways); NDR InfiniBand 400 Gb/s per GPU",
       8, Bytes{80} << 30, 67e12, 989e12, 3.35e12, 0.5, 0.8, 360e9, 50e9, 0.01},
      {"h200", "8x NVIDIA H200-SXM-141GB, NVSwitch, 8x400 Gb/s InfiniBand",
       "NVIDIA H200 datasheet (67 TFLOP/s fp32, 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e, 141 GB, NVLink 900 GB/s "
       "both ways); NDR InfiniBand 400 Gb/s per GPU",
       8, Bytes{141} * 1000 * 1000 * 1000, 67e12, 989e12, 4.8e12, 0.5, 0.8, 360e9, 50e9, 0.01},
      // The H200 as oobleck's own executor drives it (libtorch 2.11 eager,
      // fused attention and AdamW, the head's product padded): compute
      // efficiency and per-layer overhead fitted by `oobleck-profile analytic
      // --fit --fit-terms compute overhead` to
      // profiles/gpt3-1.3b-h200-mb4-bf16.measured.json and
      // profiles/gpt2-xl-h200-mb8-bf16.measured.json together.
      {"h200-libtorch", "8x NVIDIA H200-SXM-141GB running libtorch 2.11 eager, bf16 autocast, fused attention",
       "NVIDIA H200 datasheet peaks; efficiency and per-layer overhead fitted to GPT-3 1.3B (microbatch 4 x 2048) "
       "and GPT-2 XL (microbatch 8 x 1024), bf16, measured on an H200 with oobleck-profile",
       8, Bytes{141} * 1000 * 1000 * 1000, 67e12, 989e12, 4.8e12, 0.423, 0, 360e9, 50e9, 0.01, 0.212},
  };
  return presets;
}

HardwareDescription load_hardware(const std::string& name_or_path) {
  for (const auto& h : hardware_presets()) {
    if (h.key == name_or_path) return h;
  }
  if (name_or_path.find(".json") == std::string::npos) {
    throw InputError("--hardware: unknown hardware \"" + name_or_path +
                     "\"; expected a100-80gb, h100-80gb, h200 or a description JSON file");
  }
  const std::string origin = name_or_path;
  const nlohmann::json doc = json_input::parse(read_text_file(name_or_path), origin);
  const json_input::FieldPath where(origin);
  if (!doc.is_object()) throw where.error("expected a JSON object {gpus_per_node, gpu_memory_bytes, ...}");
  HardwareDescription h;
  h.key = name_or_path;
  // Positive, and small enough that oobleck-plan takes the profile written.
  auto number = [&](const char* key, double& target, bool required, double most) {
    if (!doc.contains(key)) {
      if (required) throw (where / key).error("missing");
      return;
    }
    const nlohmann::json& value = doc.at(key);
    if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > most) {
      char most_text[32];
      std::snprintf(most_text, sizeof most_text, "%g", most);
      throw (where / key).error("expected a positive number of at most " + std::string(most_text) + ", got " +
                                json_input::value_excerpt(value));
    }
    target = value.get<double>();
  };
  h.name = json_input::optional_string(doc, "name", where, name_or_path);
  h.source = json_input::optional_string(doc, "source", where, "given");
  // The ranges of a profile's hardware (oobleck.profile.v1).
  h.gpus_per_node = static_cast<int>(json_input::require_integer(doc, "gpus_per_node", where, 1, 1024));
  h.gpu_memory_bytes = json_input::require_integer(doc, "gpu_memory_bytes", where, 1, Bytes{1} << 46);
  number("peak_fp32_flops_per_s", h.peak_fp32_flops_per_s, true, kMostPerSecond);
  number("peak_bf16_flops_per_s", h.peak_bf16_flops_per_s, false, kMostPerSecond);
  number("memory_bytes_per_s", h.memory_bytes_per_s, true, kMostPerSecond);
  number("compute_efficiency", h.compute_efficiency, false, kMostEfficiency);
  number("memory_efficiency", h.memory_efficiency, false, kMostEfficiency);
  number("intra_node_bytes_per_s", h.intra_node_bytes_per_s, true, kMostLinkBytesPerSecond);
  number("inter_node_bytes_per_s", h.inter_node_bytes_per_s, true, kMostLinkBytesPerSecond);
  number("latency_ms", h.latency_ms, false, kMostMs);
  number("layer_overhead_ms", h.layer_overhead_ms, false, kMostMs);
  number("layer_launch_ms", h.layer_launch_ms, false, kMostMs);
  return h;
}

LayerWork layer_work(const ModelConfig& c, int index, int microbatch_size, int e) {
  const double b = microbatch_size, s = c.seq_len, h = c.hidden, a = c.heads, V = c.vocab;
  if (is_llama(c) && index == 0) return {0, (2 * b * s * h + b * s) * e};  // gather a row, write
  if (index == 0) return {b * s * h, (2 * b * s * h + b * s) * e};  // gather two rows, add, write
  if (index == c.layers + 1) {
    // Final norm, logits against the (tied or own) weight, softmax cross-entropy.
    // The logits are written in the dtype, and the cross-entropy reads them
    // in fp32 about four times (conversion, maximum, exponentials, sum).
    return {2 * b * s * h * V + 5 * b * s * V + 5 * b * s * h, (V * h + 2 * b * s * h) * e + b * s * V * (e + 16)};
  }
  if (is_llama(c)) {
    // Matrix products: 2 b s h (h + 2 kv d) for Q, K and V, 2 b s h^2 for
    // the output, 6 b s h f for the three SwiGLU matrices, and the same 4 b
    // s^2 h of the attention core. Traffic, in activation-sized passes per
    // token: the norm outputs read by their matrices (2h), Q, K and V
    // written (h + 2 kv d), the rotations of Q and K (2h + 2 kv d), the
    // key/value heads repeated for their query heads (2 kv d read, 2h
    // written), the attention's reads and write (4h), the output
    // projection's (2h), SwiGLU's two products written, gated and read (8f),
    // W2's output (h); and whole on every GPU of a tensor-parallel stage,
    // the two RMSNorms (read, write) and residual adds (two reads, a write):
    // 10h.
    const double kv = static_cast<double>(key_value_heads(c)) * (h / a), f = mlp_hidden(c);
    const double passes = 24 * h + 6 * kv + 8 * f;
    return {2 * b * s * h * (2 * h + 2 * kv) + 6 * b * s * h * f + 4 * b * s * s * h,
            static_cast<double>(llama_block_parameters(c)) * e + passes * b * s * e + 4 * a * b * s * s * e,
            10 * b * s * h * e, 4 * b * s * s * h, 4 * a * b * s * s * e};
  }
  // Matrix products: 24 b s h^2 (QKV, projection, MLP) + 4 b s^2 h (scores
  // and their product with V). Traffic: the weights, ~30 activation-sized
  // passes, and the attention scores written and read a few times. Of the
  // passes, ~16 are the two LayerNorms (read, write), the two dropouts
  // (read, write, mask) and the two residual adds (two reads, a write).
  return {24 * b * s * h * h + 4 * b * s * s * h, (12 * h * h + 30 * b * s * h + 4 * a * b * s * s) * e,
          16 * b * s * h * e, 4 * b * s * s * h, 4 * a * b * s * s * e};
}

double peak_for(const HardwareDescription& hw, const std::string& dtype) {
  return dtype == "bf16" && hw.peak_bf16_flops_per_s > 0 ? hw.peak_bf16_flops_per_s : hw.peak_fp32_flops_per_s;
}

namespace {

// A ring all-reduce of `bytes` among `ranks` GPUs of a node, as
// CostModel::allreduce_ms prices it.
Milliseconds node_allreduce_ms(double bytes, int ranks, const HardwareDescription& hw) {
  if (!(hw.intra_node_bytes_per_s > 0)) return 0;  // a one-GPU node: nothing to sum across
  return ring_allreduce_ms(bytes, ranks, hw.intra_node_bytes_per_s, hw.latency_ms);
}

// The optimizer step streams weights and state at the memory bandwidth's
// efficiency; where a fit dropped the memory term (efficiency 0: the
// layers' times explained by compute alone), at the presets' 0.8.
double optimizer_bytes_per_s(const HardwareDescription& hw) {
  return hw.memory_bytes_per_s * (hw.memory_efficiency > 0 ? hw.memory_efficiency : 0.8);
}

}  // namespace

Profile analytic_profile(const ModelConfig& c, const HardwareDescription& hw, int microbatch_size,
                         const std::string& dtype, const AnalyticOptions& options) {
  validate(c, "--model");
  if (is_scripted(c)) {
    throw InputError("--model: a TorchScript model has no analytic counts (its layers are opaque to oobleck); "
                     "measure it with oobleck-profile measure");
  }
  if (microbatch_size < 1) throw InputError("--microbatch-size: expected a positive integer");
  if (dtype != "fp32" && dtype != "bf16") throw InputError("--dtype: expected fp32 or bf16, got " + dtype);
  const int e = dtype == "bf16" ? 2 : 4;
  const double peak = peak_for(hw, dtype) * hw.compute_efficiency;
  const double bandwidth = hw.memory_bytes_per_s * hw.memory_efficiency;
  Profile p;
  p.source = "analytic";
  p.model_name = c.name;
  p.model_json = model_json(c, dtype);
  p.microbatch_size = microbatch_size;
  p.sequence_parallel = options.sequence_parallel;
  p.hardware = {hw.name, hw.gpus_per_node, hw.gpu_memory_bytes, hw.intra_node_bytes_per_s,
                hw.inter_node_bytes_per_s, hw.latency_ms, 0, {}, {}, optimizer_bytes_per_s(hw)};
  const double b = microbatch_size, s = c.seq_len, h = c.hidden, a = c.heads;
  for (int i = 0; i < pipeline_layers(c); ++i) {
    const LayerWork w = layer_work(c, i, microbatch_size, e);
    const bool block = i > 0 && i <= c.layers;
    // An efficiency of 0 (a fit that found the term explains nothing) drops the term.
    const auto roofline_ms = [&](double flops, double bytes) {
      return ((peak > 0 ? flops / peak : 0) + (bandwidth > 0 ? bytes / bandwidth : 0)) * 1000.0;
    };
    // The work of one GPU of `t`.
    const auto work_ms = [&](int t) {
      const double unsplit = options.sequence_parallel && block ? w.unsplit_bytes / t : w.unsplit_bytes;
      return roofline_ms(w.flops / t, (w.bytes - w.unsplit_bytes) / t + unsplit) + hw.layer_overhead_ms;
    };
    // What recomputation adds to a block's backward at degree `t`, whose
    // forward takes `forward_t`.
    const auto recompute_ms = [&](int t, Milliseconds forward_t) -> Milliseconds {
      if (!block || options.recompute == AnalyticRecompute::none) return 0;
      if (options.recompute == AnalyticRecompute::blocks) return forward_t;
      return roofline_ms(w.attention_flops / t, w.attention_bytes / t);
    };
    // A pass of `passes` forward passes' kernels whose device work takes
    // `device_ms`: the host issues them while the device runs them.
    const auto pass_ms = [&](Milliseconds device_ms, double passes) {
      return std::max(device_ms, passes * hw.layer_launch_ms);
    };
    const Milliseconds forward = pass_ms(work_ms(1), 1);
    LayerProfile l;
    l.name = layer_name(c, i);
    l.forward_ms = forward;
    l.backward_ms = pass_ms(2 * work_ms(1), 2) + recompute_ms(1, forward);
    l.param_bytes = layer_parameters(c, i) * e;
    // AdamW: gradients in the parameters' dtype and two fp32 moments; bf16
    // training also keeps fp32 master weights.
    l.optimizer_bytes = layer_parameters(c, i) * (dtype == "bf16" ? 2 + 4 + 4 + 4 : 3 * 4);
    if (i == 0) {
      l.activation_bytes = static_cast<Bytes>(b * s * 8);  // the token ids
      l.output_bytes = static_cast<Bytes>(b * s * h * e);
    } else if (i == c.layers + 1) {
      // The norm's input and output, the logits and their softmax.
      l.activation_bytes = static_cast<Bytes>((2 * b * s * h + 2 * b * s * c.vocab) * e);
      l.output_bytes = 4;  // the loss
    } else {
      // Korthikanti et al. (2022), no recomputation, no dropout masks:
      // s b h (34 + 5 a s / h) bytes at 16 bits, scaled to the dtype; the
      // attention core's 5 a s / h part goes with selective recomputation,
      // all but the input with a block's.
      // A Llama block, counted the same way: each norm's input and output
      // (4h each), Q and K (4h, after the rotation and the repeat), V (2h),
      // the softmax output (2as), the output projection's input (2h), and
      // SwiGLU's two products, the gate and their product (8f): s b (16h +
      // 8f + 2as).
      const double core = is_llama(c) ? 16 + 8.0 * mlp_hidden(c) / h : 34;
      const double attention =
          options.recompute != AnalyticRecompute::none ? 0 : (is_llama(c) ? 2 : 5) * a * s / h;
      l.activation_bytes = options.recompute == AnalyticRecompute::blocks
                               ? static_cast<Bytes>(b * s * h * e)
                               : static_cast<Bytes>(s * b * h * (core + attention) * e / 2);
      l.output_bytes = static_cast<Bytes>(b * s * h * e);
      if (options.recompute == AnalyticRecompute::none) {
        // What the planner's selective recomputation runs again and drops
        // (Recompute::selective): the recompute_ms of `selective` above,
        // and the activations of the attention term.
        l.attention_forward_ms = roofline_ms(w.attention_flops, w.attention_bytes);
        l.attention_activation_bytes =
            static_cast<Bytes>(s * b * h * ((is_llama(c) ? 2 : 5) * a * s / h) * e / 2);
      }
    }
    const bool embedding_or_head = i == 0 || i == c.layers + 1;
    // What one GPU of `t` keeps for the backward. Tensor parallelism leaves
    // a block's LayerNorm inputs and outputs, dropout masks and residuals
    // whole on every GPU: 10 s b h of Korthikanti's 34 s b h (a Llama
    // block's two norms, 8 s b h of its 16 s b h); with full recomputation
    // the block keeps its input alone, whole too. Sequence parallelism
    // divides all of it. The head split by vocabulary divides its logits
    // and keeps its norm's input and output whole.
    const auto activation_at = [&](int t) -> Bytes {
      const double whole = static_cast<double>(l.activation_bytes);
      double unsplit = whole;  // the embedding's token ids
      if (block) {
        unsplit = options.recompute == AnalyticRecompute::blocks ? whole
                                                                 : s * b * h * (is_llama(c) ? 8 : 10) * e / 2.0;
      } else if (i == c.layers + 1) {
        unsplit = 2 * b * s * h * e;
      }
      unsplit = std::min(whole, unsplit);
      const double unsplit_share = options.sequence_parallel && i != 0 ? unsplit / t : unsplit;
      return static_cast<Bytes>(std::ceil((whole - unsplit) / t + unsplit_share));
    };
    for (int t = 2; t <= hw.gpus_per_node; ++t) {
      if (hw.gpus_per_node % t != 0 || !tensor_parallel_fits(c, t)) continue;
      if (embedding_or_head && !options.vocabulary_parallel) {
        // oobleck-run replicates the embedding and the head in a
        // tensor-parallel stage (gpt.h): at any degree they take their whole time.
        l.tensor_parallel.push_back({t, l.forward_ms, l.backward_ms, l.activation_bytes});
        continue;
      }
      const Milliseconds activation_allreduce_ms = node_allreduce_ms(b * s * h * e, t, hw);
      Milliseconds forward_allreduces = 2 * activation_allreduce_ms, backward_allreduces = forward_allreduces;
      if (i == 0) {
        // The looked-up rows summed across the vocabulary's shards.
        forward_allreduces = activation_allreduce_ms;
        backward_allreduces = 0;
      } else if (embedding_or_head) {
        // The cross-entropy's maxima and sums (b s numbers, twice), then the
        // input's gradient summed in the backward.
        forward_allreduces = 2 * node_allreduce_ms(b * s * 4, t, hw);
        backward_allreduces = activation_allreduce_ms;
      }
      // Sequence parallelism gathers a block's inputs again in the backward.
      if (options.sequence_parallel && block) backward_allreduces += activation_allreduce_ms;
      const Milliseconds forward_t = pass_ms(work_ms(t) + forward_allreduces, 1);
      l.tensor_parallel.push_back({t, forward_t,
                                   pass_ms(2 * work_ms(t) + backward_allreduces, 2) + recompute_ms(t, forward_t),
                                   activation_at(t)});
    }
    p.layers.push_back(l);
  }
  p.notes.push_back("times: " + std::to_string(hw.compute_efficiency) + " of peak " +
                    std::to_string(peak_for(hw, dtype) / 1e12) + " TFLOP/s and " +
                    std::to_string(hw.memory_efficiency) + " of " + std::to_string(hw.memory_bytes_per_s / 1e9) +
                    " GB/s; backward twice the forward");
  if (ties_embedding(c)) {
    p.notes.push_back("the LM head reads the embedding's tied weight: a stage holding the head without the "
                      "embedding keeps a copy of " +
                      std::to_string(static_cast<long long>(c.vocab) * c.hidden * e) + " bytes not counted here");
  }
  p.notes.push_back("optimizer step: weights and optimizer state read and written once at " +
                    std::to_string(p.hardware.memory_bytes_per_s / 1e9) + " GB/s (hardware.memory_bytes_per_s)");
  p.notes.push_back("hardware: " + hw.source);
  return p;
}

HardwareDescription hardware_of_measurement(std::string_view measured_json, const Profile& measured) {
  const nlohmann::json doc = json_input::parse(measured_json, measured.origin);
  const json_input::FieldPath where(measured.origin);
  HardwareDescription h;
  h.key = "cpu";
  h.name = measured.hardware.name;
  h.source = "measured by oobleck-profile (" + json_input::optional_string(doc, "date", where, "?") +
             "): a 1024x1024 fp32 matrix product and a 256 MiB copy";
  h.gpus_per_node = measured.hardware.gpus_per_node;
  h.gpu_memory_bytes = measured.hardware.gpu_memory_bytes;
  const auto section = doc.find("measured");
  if (section == doc.end() || !section->is_object() || !section->contains("gemm_flops_per_s")) {
    throw InputError(measured.origin +
                     ": measured.gemm_flops_per_s: missing; expected a profile from "
                     "oobleck-profile measure");
  }
  h.peak_fp32_flops_per_s =
      json_input::require_number(*section, "gemm_flops_per_s", where / "measured", 1, kMostPerSecond);
  h.memory_bytes_per_s =
      json_input::require_number(*section, "copy_bytes_per_s", where / "measured", 1, kMostPerSecond);
  h.intra_node_bytes_per_s = measured.hardware.intra_node_bytes_per_s;
  h.inter_node_bytes_per_s = measured.hardware.inter_node_bytes_per_s;
  h.latency_ms = measured.hardware.latency_ms;
  return h;
}

FittedHardware fit_to_measured(const std::optional<HardwareDescription>& hw,
                               const std::vector<std::string>& measured_paths, const ModelConfig& fallback,
                               unsigned terms) {
  FittedHardware out;
  if (hw) out.hardware = *hw;
  std::vector<Profile> measured;
  std::vector<FitInput> inputs;
  measured.reserve(measured_paths.size());
  for (const auto& path : measured_paths) {
    const std::string text = read_text_file(path);
    measured.push_back(parse_profile(text, path));
    if (!hw && inputs.empty()) out.hardware = hardware_of_measurement(text, measured.back());
    const auto model_doc = nlohmann::json::parse(measured.back().model_json, nullptr, false);
    const bool described = model_doc.is_object() && model_doc.contains("layers");
    const json_input::FieldPath model_where = json_input::FieldPath(path) / "model";
    const std::string dtype = described ? json_input::optional_string(model_doc, "dtype", model_where, "fp32") : "fp32";
    if (dtype != "fp32" && dtype != "bf16") {
      throw (model_where / "dtype").error("expected \"fp32\" or \"bf16\", got " + quoted_excerpt(dtype));
    }
    inputs.push_back({nullptr, described ? model_of_profile(measured.back()) : fallback, dtype});
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i].measured = &measured[i];
  out.fit = fit_efficiency(inputs, out.hardware, terms);
  out.hardware.compute_efficiency = out.fit.compute_efficiency;
  out.hardware.memory_efficiency = out.fit.memory_efficiency;
  out.hardware.layer_overhead_ms = out.fit.layer_overhead_ms;
  return out;
}

std::string analytic_profile_to_json(const Profile& profile, const HardwareDescription& hw, const EfficiencyFit* fit,
                                     const std::vector<std::string>& fitted_to) {
  auto doc = nlohmann::ordered_json::parse(profile_to_json(profile));
  doc["description"] =
      "Analytic, by oobleck-profile: per-layer forward time = FLOPs / (peak x compute "
      "efficiency) + bytes moved / (memory bandwidth x memory efficiency) + a fixed per-layer "
      "overhead, backward twice that; "
      "standard transformer counts (24bsh^2 + 4bs^2h FLOPs per GPT-2 block; 4bsh(h + kv d) + 6bshf + "
      "4bs^2h per Llama block).";
  doc["hardware_description"] = {{"key", hw.key},
                                 {"source", hw.source},
                                 {"peak_fp32_flops_per_s", hw.peak_fp32_flops_per_s},
                                 {"peak_bf16_flops_per_s", hw.peak_bf16_flops_per_s},
                                 {"memory_bytes_per_s", hw.memory_bytes_per_s},
                                 {"compute_efficiency", hw.compute_efficiency},
                                 {"memory_efficiency", hw.memory_efficiency},
                                 {"layer_overhead_ms", hw.layer_overhead_ms},
                                 {"layer_launch_ms", hw.layer_launch_ms}};
  if (fit) {
    doc["fit"] = {{"measured_profiles", fitted_to},
                  {"layer_overhead_ms", fit->layer_overhead_ms},
                  {"points", fit->points},
                  {"compute_efficiency", fit->compute_efficiency},
                  {"memory_efficiency", fit->memory_efficiency},
                  {"rms_relative_error", fit->rms_relative_error},
                  {"max_relative_error", fit->max_relative_error}};
  }
  return doc.dump(2) + "\n";
}

ProfileTotals profile_totals(const Profile& profile) {
  ProfileTotals totals;
  for (const auto& l : profile.layers) {
    totals.forward_ms += l.forward_ms;
    totals.backward_ms += l.backward_ms;
  }
  return totals;
}

}  // namespace oobleck::executor
