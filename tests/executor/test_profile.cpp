#include <doctest/doctest.h>

#include <torch/cuda.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "oobleck/executor/analytic.h"
#include "oobleck/executor/profiler.h"
#include "scratch.h"

using namespace oobleck;
using namespace oobleck::executor;

namespace {

ModelConfig small() { return {"small", 2, 32, 4, 64, 16}; }

Bytes sum(const Profile& p, Bytes LayerProfile::*field) {
  Bytes total = 0;
  for (const auto& l : p.layers) total += l.*field;
  return total;
}

}  // namespace

TEST_CASE("profile: a measured CPU profile has every layer, sized from the model") {
  MeasureOptions options;
  options.model = small();
  options.microbatch_size = 2;
  options.threads = 1;
  options.warmup = 1;
  options.repeats = 3;
  const Measurement m = measure_profile(options);
  const Profile& p = m.profile;
  REQUIRE(p.layers.size() == 4);
  CHECK(p.source == "measured");
  CHECK(sum(p, &LayerProfile::param_bytes) == model_parameters(small()) * 4);
  CHECK(sum(p, &LayerProfile::optimizer_bytes) == model_parameters(small()) * 12);
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    CAPTURE(i);
    CHECK(p.layers[i].forward_ms > 0);
    CHECK(p.layers[i].backward_ms > 0);
  }
  for (std::size_t i = 0; i + 1 < p.layers.size(); ++i) CHECK(p.layers[i].output_bytes == 2 * 16 * 32 * 4);
  CHECK(p.layers.back().output_bytes == 4);
  // Blocks keep at least their input, the attention probabilities and the
  // MLP's hidden activations for backward.
  const Bytes floor = (2 * 16 * 32 + 2 * 4 * 16 * 16 + 2 * 16 * 128) * 4;
  CHECK(p.layers[1].activation_bytes >= floor);
  CHECK(p.layers[1].activation_bytes == p.layers[2].activation_bytes);
  // A block's attention core, for selective recomputation: timed, and its
  // activations at least the attention probabilities (2 x 4 heads x 16^2),
  // the rest of the block's kept; the embedding and the head have none.
  for (int i : {1, 2}) {
    CAPTURE(i);
    CHECK(p.layers[i].attention_forward_ms > 0);
    CHECK(p.layers[i].attention_activation_bytes >= 2 * 4 * 16 * 16 * 4);
    CHECK(p.layers[i].attention_activation_bytes < p.layers[i].activation_bytes);
  }
  CHECK(p.layers[1].attention_activation_bytes == p.layers[2].attention_activation_bytes);
  CHECK(p.layers[0].attention_activation_bytes == 0);
  CHECK(p.layers.back().attention_forward_ms == 0);
  CHECK(m.whole_forward_ms > 0);
  CHECK(m.whole_backward_ms > 0);
  // The whole model's optimizer step timed: its rate streams every layer's
  // weights and optimizer state in and out once in that time.
  REQUIRE(m.optimizer_step_ms > 0);
  const double state = static_cast<double>(sum(p, &LayerProfile::param_bytes) + sum(p, &LayerProfile::optimizer_bytes));
  CHECK(p.hardware.memory_bytes_per_s == doctest::Approx(2 * state / (m.optimizer_step_ms / 1000)));
  // The file reads back as a profile and carries the whole-model run.
  const std::string text = measurement_to_json(m);
  const Profile back = parse_profile(text, "measured.json");
  CHECK(back.layers.size() == 4);
  CHECK(back.hardware.memory_bytes_per_s == p.hardware.memory_bytes_per_s);
  const auto doc = nlohmann::json::parse(text);
  CHECK(doc["model"]["parameters"] == model_parameters(small()));
  CHECK(doc["model"]["dtype"] == "fp32");
  CHECK(doc["whole_model"]["forward_ms"].get<double>() > 0);
  CHECK(doc.contains("gap"));
  CHECK(doc["library_versions"].get<std::string>().find("libtorch") == 0);
}

TEST_CASE("profile: analytic GPT-3 profiles add up to the model and plan") {
  for (const char* name : {"gpt3-1.3b", "gpt3-175b"}) {
    CAPTURE(name);
    ModelConfig c = load_model_config(name);
    const Profile p = analytic_profile(c, load_hardware("a100-80gb"), 1, "bf16");
    REQUIRE(static_cast<int>(p.layers.size()) == c.layers + 2);
    CHECK(sum(p, &LayerProfile::param_bytes) == model_parameters(c) * 2);
    CHECK(sum(p, &LayerProfile::optimizer_bytes) == model_parameters(c) * 14);
    // Block forward FLOPs: 24 b s h^2 + 4 b s^2 h.
    const double h = c.hidden, s = c.seq_len;
    CHECK(layer_work(c, 1, 1, 2).flops == doctest::Approx(24 * s * h * h + 4 * s * s * h));
    for (const auto& l : p.layers) {
      CHECK(l.forward_ms > 0);
      CHECK(l.backward_ms == doctest::Approx(2 * l.forward_ms));
    }
    const Profile back = parse_profile(profile_to_json(p), "analytic.json");
    CHECK(back.layers.size() == p.layers.size());
  }
}

TEST_CASE("profile: analytic times at each tensor-parallel degree: the work divided, the overhead and the "
          "LayerNorms' traffic whole, plus the all-reduces") {
  const ModelConfig c = load_model_config("gpt3-1.3b");  // 32 heads: every degree of 8 GPUs
  HardwareDescription hw = load_hardware("a100-80gb");
  hw.layer_overhead_ms = 0.5;
  const Profile p = analytic_profile(c, hw, 2, "bf16");
  const LayerProfile& block = p.layers[1];
  REQUIRE(block.tensor_parallel.size() == 3);
  const LayerWork w = layer_work(c, 1, 2, 2);
  const double peak = hw.peak_bf16_flops_per_s * hw.compute_efficiency, bw = hw.memory_bytes_per_s * hw.memory_efficiency;
  const double activation = 2.0 * c.seq_len * c.hidden * 2;  // b s h at 2 bytes
  for (const auto& t : block.tensor_parallel) {
    CAPTURE(t.degree);
    const double k = t.degree;
    const double work = (w.flops / k / peak + ((w.bytes - w.unsplit_bytes) / k + w.unsplit_bytes) / bw) * 1000;
    const double allreduce = 2 * (k - 1) / k * activation / hw.intra_node_bytes_per_s * 1000 + 2 * (k - 1) * hw.latency_ms;
    CHECK(t.forward_ms == doctest::Approx(work + 0.5 + 2 * allreduce));
    CHECK(t.backward_ms == doctest::Approx(2 * (work + 0.5) + 2 * allreduce));
    CHECK(t.forward_ms < block.forward_ms);
  }
  // oobleck-run replicates the embedding and the head; Megatron splits them.
  CHECK(p.layers[0].tensor_parallel[0].forward_ms == p.layers[0].forward_ms);
  AnalyticOptions megatron;
  megatron.vocabulary_parallel = true;
  const Profile split = analytic_profile(c, hw, 2, "bf16", megatron);
  CHECK(split.layers.back().tensor_parallel[2].forward_ms < split.layers.back().forward_ms);
  CHECK(split.layers[1].tensor_parallel[0].forward_ms == block.tensor_parallel[0].forward_ms);
}

TEST_CASE("profile: the host's kernel launches overlap the device's work: a pass takes the longer of the two") {
  const ModelConfig c = load_model_config("gpt3-1.3b");
  HardwareDescription hw = load_hardware("a100-80gb");
  hw.layer_overhead_ms = 0.1;
  const Profile device_bound = analytic_profile(c, hw, 2, "bf16");
  const Milliseconds block_device_ms = device_bound.layers[1].forward_ms;
  // A launch shorter than every layer's device work changes nothing.
  Milliseconds shortest_ms = block_device_ms;
  for (const LayerProfile& l : device_bound.layers) shortest_ms = std::min(shortest_ms, l.forward_ms);
  hw.layer_launch_ms = shortest_ms / 2;
  const Profile hidden = analytic_profile(c, hw, 2, "bf16");
  for (std::size_t i = 0; i < hidden.layers.size(); ++i) {
    CAPTURE(i);
    CHECK(hidden.layers[i].forward_ms == device_bound.layers[i].forward_ms);
    CHECK(hidden.layers[i].backward_ms == device_bound.layers[i].backward_ms);
  }
  // A launch longer than every pass's work sets each pass: forward once,
  // backward twice, at every tensor-parallel degree, and never adds to the
  // device's time.
  hw.layer_launch_ms = 100 * block_device_ms;
  const Profile host_bound = analytic_profile(c, hw, 2, "bf16");
  for (const LayerProfile& l : host_bound.layers) {
    CAPTURE(l.name);
    CHECK(l.forward_ms == hw.layer_launch_ms);
    CHECK(l.backward_ms == 2 * hw.layer_launch_ms);
    for (const auto& t : l.tensor_parallel) {
      CHECK(t.forward_ms == hw.layer_launch_ms);
      CHECK(t.backward_ms == 2 * hw.layer_launch_ms);
    }
  }
  // In between, each pass is the longer of the two: the blocks' launches
  // show, the head's big product hides them.
  hw.layer_launch_ms = 1.5 * block_device_ms;
  const Profile between = analytic_profile(c, hw, 2, "bf16");
  int launch_bound = 0;
  for (std::size_t i = 0; i < between.layers.size(); ++i) {
    CAPTURE(i);
    const LayerProfile &l = between.layers[i], &device = device_bound.layers[i];
    CHECK(l.forward_ms == std::max(device.forward_ms, hw.layer_launch_ms));
    CHECK(l.backward_ms == std::max(device.backward_ms, 2 * hw.layer_launch_ms));
    launch_bound += l.forward_ms == hw.layer_launch_ms ? 1 : 0;
  }
  CHECK(launch_bound >= c.layers);
  CHECK(between.layers.back().forward_ms > hw.layer_launch_ms);
}

TEST_CASE("profile: Megatron's recomputation and sequence parallelism in analytic times") {
  const ModelConfig c = load_model_config("gpt3-1.3b");
  HardwareDescription hw = load_hardware("a100-80gb");
  hw.layer_overhead_ms = 0.2;
  const double peak = hw.peak_bf16_flops_per_s * hw.compute_efficiency, bw = hw.memory_bytes_per_s * hw.memory_efficiency;
  const LayerWork w = layer_work(c, 1, 2, 2);
  AnalyticOptions plain, selective, blocks, sequence;
  plain.vocabulary_parallel = selective.vocabulary_parallel = blocks.vocabulary_parallel = true;
  sequence.vocabulary_parallel = true;
  selective.recompute = AnalyticRecompute::selective;
  blocks.recompute = AnalyticRecompute::blocks;
  sequence.sequence_parallel = true;
  const Profile p = analytic_profile(c, hw, 2, "bf16", plain), sel = analytic_profile(c, hw, 2, "bf16", selective),
                all = analytic_profile(c, hw, 2, "bf16", blocks), seq = analytic_profile(c, hw, 2, "bf16", sequence);
  for (std::size_t d = 0; d < p.layers[1].tensor_parallel.size(); ++d) {
    const double t = p.layers[1].tensor_parallel[d].degree;
    CAPTURE(t);
    const auto& base = p.layers[1].tensor_parallel[d];
    // Selective: the attention core's share of the work again; blocks: the whole forward.
    CHECK(sel.layers[1].tensor_parallel[d].backward_ms ==
          doctest::Approx(base.backward_ms + (w.attention_flops / t / peak + w.attention_bytes / t / bw) * 1000));
    CHECK(all.layers[1].tensor_parallel[d].backward_ms == doctest::Approx(base.backward_ms + base.forward_ms));
    // Sequence parallelism divides the LayerNorms' and dropouts' traffic and
    // gathers the inputs again in the backward.
    const double saved = w.unsplit_bytes * (1 - 1 / t) / bw * 1000;
    const double gather = 2 * (t - 1) / t * (2.0 * c.seq_len * c.hidden * 2) / hw.intra_node_bytes_per_s * 1000 +
                          2 * (t - 1) * hw.latency_ms;
    CHECK(seq.layers[1].tensor_parallel[d].forward_ms == doctest::Approx(base.forward_ms - saved));
    CHECK(seq.layers[1].tensor_parallel[d].backward_ms == doctest::Approx(base.backward_ms - 2 * saved + gather));
  }
  // The embedding and the head are not recomputed; at degree 1 the block's backward is twice its forward plus that.
  CHECK(all.layers[0].backward_ms == p.layers[0].backward_ms);
  CHECK(all.layers.back().backward_ms == p.layers.back().backward_ms);
  CHECK(all.layers[1].backward_ms == doctest::Approx(3 * all.layers[1].forward_ms));
  // Memory: the attention core's activations go with selective recomputation.
  CHECK(sel.layers[1].activation_bytes < p.layers[1].activation_bytes);
  CHECK(all.layers[1].activation_bytes == 2LL * c.seq_len * c.hidden * 2);
  // One GPU's share of a block (Korthikanti's s b h (10 + 24 / t + 5 a s / (h t))
  // without sequence parallelism, s b h (34 + 5 a s / h) / t with it), of the
  // vocabulary-parallel head (its norm's input and output whole) and of the
  // embedding (the token ids, whole).
  const double sbh = 2.0 * c.seq_len * c.hidden;
  CHECK_FALSE(p.sequence_parallel);
  CHECK(seq.sequence_parallel);
  for (std::size_t d = 0; d < p.layers[1].tensor_parallel.size(); ++d) {
    const double t = p.layers[1].tensor_parallel[d].degree;
    CAPTURE(t);
    const double a = static_cast<double>(p.layers[1].activation_bytes);
    CHECK(a == doctest::Approx(sbh * (34 + 5.0 * c.heads * c.seq_len / c.hidden)).epsilon(1e-6));
    CHECK(p.layers[1].tensor_parallel[d].activation_bytes == doctest::Approx(sbh * 10 + (a - sbh * 10) / t).epsilon(1e-6));
    CHECK(seq.layers[1].tensor_parallel[d].activation_bytes == doctest::Approx(a / t).epsilon(1e-6));
    CHECK(all.layers[1].tensor_parallel[d].activation_bytes == all.layers[1].activation_bytes);
    const auto& head = p.layers.back();
    const double norm = 2.0 * 2 * c.seq_len * c.hidden * 2;  // 2 b s h at 2 bytes
    CHECK(head.tensor_parallel[d].activation_bytes ==
          doctest::Approx(norm + (static_cast<double>(head.activation_bytes) - norm) / t).epsilon(1e-6));
    CHECK(p.layers[0].tensor_parallel[d].activation_bytes == p.layers[0].activation_bytes);
  }
  // The planner keeps what the profile says one GPU keeps: a stage of every
  // block at degree 8, without sequence parallelism, holds 10 s b h a block
  // more per microbatch than with it, less an eighth.
  const CostModel cost_plain(p, 8), cost_sequence(seq, 8);
  const int blocks_end = c.layers + 1;
  const Bytes extra = cost_plain.stage_memory_bytes(1, blocks_end, 8, 1) - cost_sequence.stage_memory_bytes(1, blocks_end, 8, 1);
  CHECK(static_cast<double>(extra) == doctest::Approx(c.layers * sbh * 10 * 7 / 8).epsilon(1e-4));
}

TEST_CASE("profile: the planner's selective recomputation per stage prices what the analytic profiler bakes in") {
  // One profile, recording its attention cores, lets the planner choose
  // selective recomputation per stage; the profile made with every block
  // recomputing selectively must come out the same, stage for stage.
  const ModelConfig c = load_model_config("gpt3-1.3b");
  const HardwareDescription hw = load_hardware("a100-80gb");
  AnalyticOptions plain, selective;
  plain.vocabulary_parallel = selective.vocabulary_parallel = true;
  selective.recompute = AnalyticRecompute::selective;
  const Profile p = analytic_profile(c, hw, 2, "bf16", plain), sel = analytic_profile(c, hw, 2, "bf16", selective);
  CHECK(p.layers[0].attention_activation_bytes == 0);
  CHECK(p.layers.back().attention_forward_ms == 0);
  CHECK(sel.layers[1].attention_activation_bytes == 0);  // nothing left to drop
  const CostModel choosing(p, 4), baked(sel, 4);
  const int layers = choosing.layers();
  for (int t : choosing.degrees()) {
    CAPTURE(t);
    for (const auto& [begin, end] : {std::pair{0, 1}, {1, 5}, {0, layers}, {layers - 3, layers}}) {
      CAPTURE(begin);
      CHECK(choosing.stage_backward_ms(begin, end, t, Recompute::selective) ==
            doctest::Approx(baked.stage_backward_ms(begin, end, t)).epsilon(1e-12));
      CHECK(choosing.stage_memory_bytes(begin, end, t, 3, Recompute::selective) -
                choosing.stage_memory_bytes(begin, end, t, 3) <=
            0);
      // Kept per microbatch: what the baked profile keeps, to rounding per layer.
      const Bytes with_choice = choosing.stage_memory_bytes(begin, end, t, 5, Recompute::selective) -
                                choosing.stage_memory_bytes(begin, end, t, 4, Recompute::selective);
      const Bytes with_baked = baked.stage_memory_bytes(begin, end, t, 5) - baked.stage_memory_bytes(begin, end, t, 4);
      CHECK(std::abs(with_choice - with_baked) <= end - begin + 1);
    }
  }
}

TEST_CASE("profile: the efficiency fit recovers the efficiencies that made the times") {
  const ModelConfig c = small();
  HardwareDescription hw = load_hardware("h100-80gb");
  hw.compute_efficiency = 0.37;
  hw.memory_efficiency = 0.61;
  Profile measured = analytic_profile(c, hw, 2, "fp32");
  measured.origin = "synthetic";
  const EfficiencyFit fit = fit_efficiency(measured, c, hw, "fp32");
  CHECK(fit.compute_efficiency == doctest::Approx(0.37).epsilon(1e-9));
  CHECK(fit.memory_efficiency == doctest::Approx(0.61).epsilon(1e-9));
  CHECK(fit.rms_relative_error < 1e-9);
  CHECK(fit.points == 8);
  CHECK(fit.layer_overhead_ms == doctest::Approx(0).scale(1));

  // With a fixed overhead per layer too, fitted jointly over two
  // microbatch sizes: all three come back.
  hw.layer_overhead_ms = 0.05;
  Profile small_batch = analytic_profile(c, hw, 1, "fp32"), large_batch = analytic_profile(c, hw, 8, "fp32");
  small_batch.origin = large_batch.origin = "synthetic";
  const EfficiencyFit joint = fit_efficiency({{&small_batch, c, "fp32"}, {&large_batch, c, "fp32"}}, hw);
  CHECK(joint.compute_efficiency == doctest::Approx(0.37).epsilon(1e-6));
  CHECK(joint.memory_efficiency == doctest::Approx(0.61).epsilon(1e-6));
  CHECK(joint.layer_overhead_ms == doctest::Approx(0.05).epsilon(1e-6));
  CHECK(joint.points == 16);
}

TEST_CASE("profile: bad hardware descriptions are clear errors") {
  CHECK_THROWS_WITH_AS((void)load_hardware("tpu-v9"), doctest::Contains("unknown hardware \"tpu-v9\""), InputError);
  oobleck::test::Scratch s("true");
  s.write("hw.json", R"({"gpus_per_node": 8, "gpu_memory_bytes": 1e10, "peak_fp32_flops_per_s": -1})");
  CHECK_THROWS_WITH_AS((void)load_hardware(s.str("hw.json")),
                       doctest::Contains("peak_fp32_flops_per_s: expected a positive number"), InputError);
  s.write("hw2.json", R"({"gpus_per_node": 8, "gpu_memory_bytes": 1e10, "peak_fp32_flops_per_s": 1e12})");
  CHECK_THROWS_WITH_AS((void)load_hardware(s.str("hw2.json")), doctest::Contains("memory_bytes_per_s: missing"),
                       InputError);
}

TEST_CASE("profile: the command line writes profiles the planner takes, and refuses bad input") {
  oobleck::test::Scratch s(OOBLECK_PROFILE_BINARY);
  const auto analytic = s.run("analytic --model gpt3-2.7b --hardware h100-80gb --microbatch-size 2 --seq-len 2048 "
                              "--out " + s.str("a.json"));
  REQUIRE(analytic.status == 0);
  const auto doc = nlohmann::json::parse(s.read("a.json"));
  CHECK(doc["source"] == "analytic");
  CHECK(doc["model"]["parameters"].get<double>() == doctest::Approx(2.7e9).epsilon(0.03));
  const auto plan = s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + s.str("a.json") +
                                                           " --nodes 8 --fault-tolerance 1 --global-microbatches 64");
  CHECK(plan.status == 0);

  const auto measured = s.run("measure --model gpt-tiny --microbatch-size 2 --seq-len 16 --device cpu --threads 1 "
                              "--repeats 2 --out " + s.str("m.json"));
  REQUIRE(measured.status == 0);
  CHECK(measured.out.find("gap") != std::string::npos);
  // The links were measured between this process and a second one, which is gone.
  const auto m = nlohmann::json::parse(s.read("m.json"));
  CHECK(m["measured"]["links"]["point_to_point"]["bytes_per_s"].get<double>() > 0);
  CHECK(m["measured"]["links"]["allreduce"]["bytes_per_s"].get<double>() > 0);
  CHECK(m["hardware"]["inter_node_bytes_per_s"] == m["measured"]["links"]["point_to_point"]["bytes_per_s"]);
  // The all-reduce's medians price gradient all-reduces: five sizes between
  // two processes, never falling as sizes grow.
  const auto& table = m["hardware"]["allreduce_table"];
  REQUIRE(table.size() == 5);
  for (std::size_t i = 0; i < table.size(); ++i) {
    CHECK(table[i]["ranks"] == 2);
    CHECK(table[i]["ms"].get<double>() > 0);
    if (i > 0) CHECK(table[i]["bytes"].get<double>() > table[i - 1]["bytes"].get<double>());
    if (i > 0) CHECK(table[i]["ms"].get<double>() >= table[i - 1]["ms"].get<double>());
  }
  CHECK(s.processes_left() == 0);  // the link measurement's peer included (others' runs may have theirs)
  CHECK(s.run_program(OOBLECK_PLAN_BINARY,
                      "instantiate --profile " + s.str("m.json") + " --nodes 3 --fault-tolerance 0 --global-microbatches 4")
            .status == 0);
  const auto fitted = s.run("analytic --model gpt-tiny --hardware cpu --fit " + s.str("m.json") +
                            " --microbatch-size 2 --seq-len 16 --out " + s.str("f.json"));
  CHECK(fitted.status == 0);
  CHECK(nlohmann::json::parse(s.read("f.json"))["fit"]["points"] == 12);

  const auto bad_model = s.run("analytic --model gpt5 --hardware h200 --microbatch-size 1 --seq-len 8 --out " +
                               s.str("x.json"));
  CHECK(bad_model.status == 2);
  CHECK(bad_model.err.find("unknown model \"gpt5\"") != std::string::npos);
  s.write("bad.json", R"({"layers": 2, "hidden": 30, "heads": 4, "vocab": 10, "seq_len": 8})");
  const auto bad_config = s.run("measure --model " + s.str("bad.json") +
                                " --microbatch-size 1 --seq-len 8 --out " + s.str("x.json"));
  CHECK(bad_config.status == 2);
  CHECK(bad_config.err.find("bad.json: heads") != std::string::npos);
  if (!torch::cuda::is_available()) {
    const auto no_cuda = s.run("measure --model gpt-tiny --microbatch-size 1 --seq-len 8 --device cuda --out " +
                               s.str("x.json"));
    CHECK(no_cuda.status == 2);
    CHECK(no_cuda.err.find("no CUDA device") != std::string::npos);
  }
  const auto no_folder = s.run("analytic --model gpt-tiny --hardware h200 --microbatch-size 1 --seq-len 8 --out " +
                               s.str("missing/x.json"));
  CHECK(no_folder.status == 2);
  CHECK_FALSE(std::filesystem::exists(s.path("x.json")));
}

TEST_CASE("profile: hostile model, hardware and profile files exit 2 with a short message naming the field, and "
          "write nothing") {
  oobleck::test::Scratch s(OOBLECK_PROFILE_BINARY);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string hw = R"({"gpus_per_node": 8, "gpu_memory_bytes": 1e10, "peak_fp32_flops_per_s": 1e12,
                             "peak_bf16_flops_per_s": 1e12, "memory_bytes_per_s": 1e12,
                             "intra_node_bytes_per_s": 1e11, "inter_node_bytes_per_s": 1e10)";
  struct Case {
    std::string what, model, hardware, expected;
  };
  const std::vector<Case> cases = {
      {"a model value 100,000 arrays deep", R"({"layers": )" + deep + "}", "h200", "model.json:1:"},
      {"a model's layers that wrap an int", R"({"layers": 4294967298, "hidden": 32, "heads": 4, "vocab": 10,
                                              "seq_len": 8})", "h200", "model.json: layers"},
      {"a model key twice", R"({"layers": 2, "layers": 3, "hidden": 32, "heads": 4, "vocab": 10, "seq_len": 8})",
       "h200", "model.json:1:"},
      {"gpus_per_node that wraps an int", "gpt-tiny", hw + R"(, "gpus_per_node": 2147483648})", "hw.json:"},
      {"a hardware name that is not a string", "gpt-tiny", hw + R"(, "name": 7})", "hw.json: name"},
      {"a megabyte string where a count belongs", "gpt-tiny",
       R"({"gpus_per_node": ")" + std::string(1 << 20, 'x') + "\"}", "hw.json: gpus_per_node"},
      {"a hardware value of 1e999", "gpt-tiny",
       R"({"gpus_per_node": 8, "gpu_memory_bytes": 1e999})", "hw.json:1:"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const bool model_file = c.model.front() == '{', hardware_file = c.hardware.front() == '{';
    if (model_file) s.write("model.json", c.model);
    if (hardware_file) s.write("hw.json", c.hardware);
    const auto run = s.run("analytic --model " + (model_file ? s.str("model.json") : c.model) + " --hardware " +
                           (hardware_file ? s.str("hw.json") : c.hardware) +
                           " --microbatch-size 1 --seq-len 8 --out " + s.str("out.json"));
    CHECK(run.status == 2);
    CHECK(run.err.find(c.expected) != std::string::npos);
    CHECK(run.err.size() < 1000);
    CHECK_FALSE(std::filesystem::exists(s.path("out.json")));
  }
  // compare: a profile 100,000 arrays deep on either side.
  s.write("deep.json", R"({"format": "oobleck.profile.v1", "microbatch_size": )" + deep + "}");
  REQUIRE(s.run("analytic --model gpt-tiny --hardware h200 --microbatch-size 1 --seq-len 8 --out " +
                s.str("good.json")).status == 0);
  REQUIRE(s.run("analytic --model gpt-tiny --hardware h200 --microbatch-size 1 --seq-len 8 --sequence-parallel --out " +
                s.str("sequence.json")).status == 0);
  CHECK(parse_profile(s.read("sequence.json"), "sequence.json").sequence_parallel);
  CHECK_FALSE(parse_profile(s.read("good.json"), "good.json").sequence_parallel);
  for (const auto& [measured, predicted] : {std::pair{"deep.json", "good.json"}, std::pair{"good.json", "deep.json"}}) {
    const auto run = s.run("compare --measured " + s.str(measured) + " --predicted " + s.str(predicted) +
                           " --json " + s.str("cmp.json"));
    CHECK(run.status == 2);
    CHECK(run.err.find("deep.json:1:") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(s.path("cmp.json")));
  }
}

TEST_CASE("profile: a node of 2 GPUs is measured by 2 worker processes at every degree") {
  oobleck::test::Scratch s(OOBLECK_PROFILE_BINARY);
  // gpt-tiny has 4 heads: degrees 1 and 2 of a 2-GPU node split it.
  const auto measured = s.run("measure --model gpt-tiny --microbatch-size 2 --seq-len 16 --threads 1 --repeats 2 "
                              "--gpus-per-node 2 --no-links --out " + s.str("node.json"));
  REQUIRE(measured.status == 0);
  CHECK(measured.out.find("the node's 2 workers busy, degree 2") != std::string::npos);
  CHECK(s.processes_left() == 0);  // the node measurement's peers included (others' runs may have theirs)
  const Profile p = parse_profile(s.read("node.json"), "node.json");
  CHECK(p.hardware.gpus_per_node == 2);
  CHECK(p.hardware.name.find("2 workers of 1 thread") != std::string::npos);
  const auto doc = nlohmann::json::parse(s.read("node.json"));
  const auto& degrees = doc["node_layers_sum"]["degrees"];
  REQUIRE(degrees.size() == 2);
  double forward[2] = {0, 0}, backward[2] = {0, 0};
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    CAPTURE(i);
    const LayerProfile& l = p.layers[i];
    REQUIRE(l.tensor_parallel.size() == 1);
    const TensorParallelTiming& t = l.tensor_parallel[0];
    CHECK(t.degree == 2);
    CHECK(t.forward_ms > 0);
    CHECK(t.backward_ms > 0);
    if (i == 0 || i + 1 == p.layers.size()) {  // replicated: degree 1's work, degree 1's times
      CHECK(t.forward_ms == l.forward_ms);
      CHECK(t.backward_ms == l.backward_ms);
      CHECK(t.activation_bytes == l.activation_bytes);
    } else {
      // A block's heads and MLP columns divide; its LayerNorms' inputs and
      // the residual stream stay whole on each worker (no sequence
      // parallelism), so a share is recorded, within the range a profile
      // allows (counted live on tensors this small, it can come to half).
      CHECK(t.activation_bytes >= l.activation_bytes / 2);
      CHECK(t.activation_bytes <= l.activation_bytes);
    }
    forward[0] += l.forward_ms;
    backward[0] += l.backward_ms;
    forward[1] += t.forward_ms;
    backward[1] += t.backward_ms;
  }
  for (int d = 0; d < 2; ++d) {
    CHECK(degrees[d]["degree"] == d + 1);
    CHECK(degrees[d]["forward_ms"].get<double>() == doctest::Approx(forward[d]));
    CHECK(degrees[d]["backward_ms"].get<double>() == doctest::Approx(backward[d]));
  }
  // The planner takes it and lays stages over both GPUs of every node.
  const auto plan = s.run_program(OOBLECK_PLAN_BINARY, "instantiate --profile " + s.str("node.json") +
                                                           " --nodes 3 --fault-tolerance 1 --global-microbatches 4 "
                                                           "--json " + s.str("plan.json"));
  REQUIRE(plan.status == 0);
  for (const auto& pipeline : nlohmann::json::parse(s.read("plan.json"))["pipelines"]) {
    std::map<int, int> gpus;
    for (const auto& stage : pipeline["stages"]) gpus[stage["node"].get<int>()] += stage["gpus"].get<int>();
    for (const auto& [node, count] : gpus) CHECK(count == 2);
  }
  // A degree that does not divide the heads is left out, and said so.
  const auto three = s.run("measure --model gpt-tiny --microbatch-size 1 --seq-len 8 --threads 1 --repeats 1 "
                           "--gpus-per-node 3 --no-links --out " + s.str("three.json"));
  REQUIRE(three.status == 0);
  const Profile p3 = parse_profile(s.read("three.json"), "three.json");
  CHECK(p3.hardware.gpus_per_node == 3);
  for (const auto& l : p3.layers) CHECK(l.tensor_parallel.empty());
  CHECK(s.read("three.json").find("degree 3 not measured: it does not divide the model's 4 attention heads") !=
        std::string::npos);
  const auto zero = s.run("measure --model gpt-tiny --microbatch-size 1 --seq-len 8 --gpus-per-node 0 --out " +
                          s.str("x.json"));
  CHECK(zero.status == 2);
  CHECK(zero.err.find("--gpus-per-node") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(s.path("x.json")));
}

TEST_CASE("profile: compare puts a prediction beside a measurement, layer by layer") {
  const ModelConfig c = small();
  HardwareDescription hw = load_hardware("h100-80gb");
  const Profile measured = analytic_profile(c, hw, 2, "fp32");
  const ProfileComparison same = compare_profiles(measured, measured);
  CHECK(same.rms_relative_error == 0);
  CHECK(same.max_relative_error == 0);
  CHECK(same.layers.size() == measured.layers.size());
  // Half the compute efficiency, no memory term: every time at least as long.
  hw.compute_efficiency /= 2;
  const Profile slower = analytic_profile(c, hw, 2, "fp32");
  const ProfileComparison c2 = compare_profiles(measured, slower);
  CHECK(c2.predicted_ms > c2.measured_ms);
  CHECK(c2.max_relative_error > 0);
  CHECK(c2.max_relative_error <= 1.0 + 1e-9);  // at most twice as long
  Profile other_batch = analytic_profile(c, hw, 4, "fp32");
  other_batch.origin = "other.json";
  CHECK_THROWS_WITH_AS((void)compare_profiles(measured, other_batch), doctest::Contains("microbatch_size 4"),
                       oobleck::InputError);
}

TEST_CASE("profile: the documents and sums the command line writes and prints") {
  const ModelConfig c = small();
  const HardwareDescription hw = load_hardware("h100-80gb");
  const Profile measured = analytic_profile(c, hw, 2, "fp32");
  HardwareDescription slower_hw = hw;
  slower_hw.compute_efficiency /= 2;
  const Profile predicted = analytic_profile(c, slower_hw, 2, "fp32");

  const ProfileTotals totals = profile_totals(measured);
  double forward = 0;
  for (const auto& l : measured.layers) forward += l.forward_ms;
  CHECK(totals.forward_ms == forward);
  CHECK(totals.backward_ms == doctest::Approx(2 * forward));

  const ProfileComparison comparison = compare_profiles(measured, predicted);
  CHECK(comparison.total_relative_error == comparison.predicted_ms / comparison.measured_ms - 1);
  const auto compared = nlohmann::json::parse(comparison_to_json(comparison, measured, "m.json", "p.json"));
  CHECK(compared["measured"] == "m.json");
  CHECK(compared["predicted"] == "p.json");
  CHECK(compared["microbatch_size"] == 2);
  CHECK(compared["total_relative_error"].get<double>() > 0);
  CHECK(compared["layers"].size() == measured.layers.size());
  CHECK(compared["layers"][1]["predicted_forward_ms"].get<double>() == predicted.layers[1].forward_ms);

  // Without a fit the analytic document has no `fit`; with one it names the
  // measured profiles.
  const auto plain = nlohmann::json::parse(analytic_profile_to_json(predicted, slower_hw, nullptr, {}));
  CHECK(plain["source"] == "analytic");
  CHECK(plain["hardware_description"]["compute_efficiency"] == slower_hw.compute_efficiency);
  CHECK_FALSE(plain.contains("fit"));
  EfficiencyFit fit;
  fit.points = 8;
  const auto fitted = nlohmann::json::parse(analytic_profile_to_json(predicted, slower_hw, &fit, {"a.json"}));
  CHECK(fitted["fit"]["measured_profiles"] == nlohmann::json::array({"a.json"}));
  CHECK(fitted["fit"]["points"] == 8);

  Measurement m;
  m.layers_forward_ms = 3;
  m.layers_backward_ms = 9;
  CHECK(layers_gap(m) == 0);  // the whole model was not timed
  m.whole_forward_ms = 2;
  m.whole_backward_ms = 8;
  CHECK(layers_gap(m) == doctest::Approx(0.2));
}

TEST_CASE("profile: fitting to measured profiles reads their device, model and dtype") {
  oobleck::test::Scratch s("true");
  const ModelConfig c = small();
  HardwareDescription truth = load_hardware("h100-80gb");
  truth.compute_efficiency = 0.37;
  truth.memory_efficiency = 0.61;
  Profile measured = analytic_profile(c, truth, 2, "fp32");
  measured.model_json = model_json(c, "fp32");
  auto doc = nlohmann::json::parse(profile_to_json(measured));
  doc["date"] = "2030-01-01T00:00:00Z";
  doc["measured"] = {{"gemm_flops_per_s", truth.peak_fp32_flops_per_s}, {"copy_bytes_per_s", truth.memory_bytes_per_s}};
  s.write("m.json", doc.dump());

  // The device the profile was measured on, as a fit on a CPU takes it.
  const HardwareDescription device = hardware_of_measurement(s.read("m.json"), measured);
  CHECK(device.key == "cpu");
  CHECK(device.peak_fp32_flops_per_s == truth.peak_fp32_flops_per_s);
  CHECK(device.source.find("2030-01-01") != std::string::npos);
  measured.origin = "hand.json";
  CHECK_THROWS_WITH_AS((void)hardware_of_measurement(profile_to_json(measured), measured),
                       doctest::Contains("hand.json: measured.gemm_flops_per_s: missing"), InputError);

  // The profile's own model, not the fallback, is what the fit uses.
  const ModelConfig other{"other", 3, 48, 4, 64, 16};
  const FittedHardware from_device = fit_to_measured(std::nullopt, {s.str("m.json")}, other, kFitCompute | kFitMemory);
  CHECK(from_device.fit.points == 8);
  CHECK(from_device.fit.compute_efficiency == doctest::Approx(0.37).epsilon(1e-9));
  CHECK(from_device.hardware.compute_efficiency == from_device.fit.compute_efficiency);
  CHECK(from_device.hardware.memory_efficiency == doctest::Approx(0.61).epsilon(1e-9));
  CHECK(from_device.hardware.key == "cpu");
  const FittedHardware given = fit_to_measured(truth, {s.str("m.json")}, other, kFitCompute | kFitMemory);
  CHECK(given.hardware.key == "h100-80gb");
  CHECK(given.fit.compute_efficiency == doctest::Approx(0.37).epsilon(1e-9));

  // A profile that describes no model is taken as the fallback.
  Profile hand = measured;
  hand.model_json = "{}";
  s.write("hand.json", profile_to_json(hand));
  const FittedHardware fallback = fit_to_measured(truth, {s.str("hand.json")}, c, kFitCompute | kFitMemory);
  CHECK(fallback.fit.compute_efficiency == doctest::Approx(0.37).epsilon(1e-9));
}

TEST_CASE("profiles: the degrees templates may choose are those oobleck-run splits a layer over, for every preset model") {
  // The planner reads the profile's model section (splits_over); the
  // workers refuse a stage their model does not split over
  // (tensor_parallel_fits). Both must say the same of every degree, or a
  // plan would hold stages no worker runs.
  int refused = 0;
  for (const ModelConfig& c : model_presets()) {
    CAPTURE(c.name);
    Profile profile;
    profile.model_json = model_json(c, "bf16");
    for (int degree = 1; degree <= 64; ++degree) {
      CAPTURE(degree);
      CHECK(splits_over(profile, degree) == tensor_parallel_fits(c, degree));
      refused += !tensor_parallel_fits(c, degree);
    }
  }
  CHECK(refused > 0);
}
