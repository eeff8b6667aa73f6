#include "reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "oobleck/common/one_f_one_b.h"

namespace oobleck::test {

Profile random_profile(std::mt19937_64& rng, const RandomProfileOptions& options) {
  std::uniform_int_distribution<int> layer_count(options.min_layers, options.max_layers);
  std::uniform_int_distribution<std::size_t> gpu_choice(0, options.gpus_per_node_choices.size() - 1);
  std::uniform_real_distribution<double> time(0.1, 10.0);
  std::uniform_int_distribution<Bytes> state(1'000, 100'000);
  std::uniform_int_distribution<Bytes> activation(0, 30'000);
  std::uniform_int_distribution<Bytes> output(0, 200'000);
  std::uniform_real_distribution<double> bandwidth(1e6, 1e9);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  Profile p;
  p.origin = "random";
  p.source = "random";
  p.model_name = "random";
  p.model_json = "{}";
  p.hardware.name = "random";
  p.hardware.gpus_per_node = options.gpus_per_node_choices[gpu_choice(rng)];
  p.hardware.inter_node_bytes_per_s = bandwidth(rng);
  p.hardware.intra_node_bytes_per_s = p.hardware.inter_node_bytes_per_s * (1 + 20 * unit(rng));
  p.hardware.latency_ms = 0.05 * unit(rng);
  const int layers = layer_count(rng);
  Bytes total_state = 0, total_activation = 0;
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = time(rng);
    layer.backward_ms = time(rng) * 2;
    layer.param_bytes = state(rng);
    layer.optimizer_bytes = 2 * layer.param_bytes;
    layer.activation_bytes = activation(rng);
    // Memory-bound instances: some layers' activations dominate, so the
    // microbatches more stages keep in flight decide feasibility.
    if (options.memory_bound && unit(rng) < 0.5) layer.activation_bytes *= 10;
    layer.output_bytes = output(rng);
    // Attention cores of three kinds, derived without drawing (the draws
    // stay those of the instances before they were recorded): none, a
    // small share of the activations, most of them.
    const int kind = (l + 1) % 3;
    layer.attention_forward_ms = layer.forward_ms * 0.1 * kind;
    layer.attention_activation_bytes = layer.activation_bytes * (kind == 0 ? 0 : kind == 1 ? 3 : 8) / 10;
    // Sometimes a measured tensor-parallel time, faster or slower than the model's.
    for (int t = 2; t <= p.hardware.gpus_per_node; t *= 2) {
      if (unit(rng) < 0.15) {
        layer.tensor_parallel.push_back({t, layer.forward_ms / t * (0.7 + unit(rng)), layer.backward_ms / t * (0.7 + unit(rng))});
      }
    }
    total_state += layer.param_bytes + layer.optimizer_bytes;
    total_activation += layer.activation_bytes;
    p.layers.push_back(std::move(layer));
  }
  if (options.activation_shares_seed != 0) {
    std::mt19937_64 shares_rng(options.activation_shares_seed);
    for (auto& layer : p.layers) {
      for (int t = 2; t <= p.hardware.gpus_per_node; t *= 2) {
        auto it = std::find_if(layer.tensor_parallel.begin(), layer.tensor_parallel.end(),
                               [t](const TensorParallelTiming& m) { return m.degree == t; });
        if (it == layer.tensor_parallel.end()) {
          if (unit(shares_rng) < 0.3) continue;
          layer.tensor_parallel.push_back(
              {t, layer.forward_ms / t * (0.7 + unit(shares_rng)), layer.backward_ms / t * (0.7 + unit(shares_rng))});
          it = layer.tensor_parallel.end() - 1;
        }
        const Bytes share = (layer.activation_bytes + t - 1) / t;
        it->activation_bytes =
            share + static_cast<Bytes>(unit(shares_rng) * static_cast<double>(layer.activation_bytes - share));
      }
      std::sort(layer.tensor_parallel.begin(), layer.tensor_parallel.end(),
                [](const auto& a, const auto& b) { return a.degree < b.degree; });
    }
    p.sequence_parallel = unit(shares_rng) < 0.5;
  }
  const double scale = options.memory_bound ? 0.15 + 0.5 * unit(rng) : 1.5 + unit(rng);
  p.hardware.gpu_memory_bytes =
      std::max<Bytes>(1, static_cast<Bytes>(scale * static_cast<double>(total_state + 2 * total_activation) /
                                            p.hardware.gpus_per_node));
  if (options.allreduce_table_seed != 0) {
    // The ring's law at 2 (and sometimes 4) ranks, each point off it by a
    // factor of 0.6 to 1.8, never falling with size (as profiles read it).
    std::mt19937_64 table_rng(options.allreduce_table_seed);
    std::uniform_real_distribution<double> off(0.6, 1.8);
    const double beta = p.hardware.gradient_allreduce_bytes_per_s();
    for (const int ranks : unit(table_rng) < 0.5 ? std::vector<int>{2} : std::vector<int>{2, 4}) {
      double last = 0;
      for (const double bytes : {300.0, 3e3, 3e4, 3e5}) {
        last = std::max(last, off(table_rng) * ring_allreduce_ms(bytes, ranks, beta, p.hardware.latency_ms));
        p.hardware.allreduce_table.push_back({ranks, bytes, last});
      }
    }
  }
  return p;
}

Profile uniform_profile(int layers, int gpus_per_node, double forward_ms, double backward_ms, Bytes state_bytes_per_layer,
                        Bytes activation_bytes_per_layer, Bytes gpu_memory_bytes) {
  Profile p;
  p.origin = "uniform";
  p.source = "test";
  p.model_name = "uniform";
  p.model_json = "{}";
  p.hardware = {"test nodes", gpus_per_node, gpu_memory_bytes, 100e9, 10e9, 0.01, 0, {}, {}};
  for (int l = 0; l < layers; ++l) {
    LayerProfile layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = forward_ms;
    layer.backward_ms = backward_ms;
    layer.param_bytes = state_bytes_per_layer / 4;
    layer.optimizer_bytes = state_bytes_per_layer - layer.param_bytes;
    layer.activation_bytes = activation_bytes_per_layer;
    layer.output_bytes = 1 << 20;
    p.layers.push_back(layer);
  }
  return p;
}

double direct_iteration_ms(const CostModel& cost, const std::vector<Stage>& stages, int microbatches, Runs runs) {
  const Profile& profile = cost.profile();
  const std::size_t count = stages.size();
  std::vector<double> stage(count, 0.0), transfer(count, 0.0);  // transfer[s]: s to s + 1, one way
  for (std::size_t s = 0; s < count; ++s) {
    for (int l = stages[s].layer_begin; l < stages[s].layer_end; ++l) {
      const double forward = cost.layer_forward_ms(l, stages[s].gpus);
      // Recomputing, the backward runs the forward (or the attention core,
      // split with the heads unless the layer is replicated) again first.
      const double attention = profile.layers[l].attention_forward_ms /
                               (cost.layer_replicated(l, stages[s].gpus) ? 1 : stages[s].gpus);
      stage[s] += forward + cost.layer_backward_ms(l, stages[s].gpus) +
                  (stages[s].recompute == Recompute::full        ? forward
                   : stages[s].recompute == Recompute::selective ? attention
                                                                 : 0.0);
    }
    if (s + 1 < count) {
      const bool same = stages[s].node == stages[s + 1].node;
      // Between nodes, over the cards of the stage's GPUs, one each, on
      // one node at most (a stage over several sends from its last).
      const int cards = std::min(stages[s].gpus, profile.hardware.gpus_per_node);
      const double bandwidth =
          same ? profile.hardware.intra_node_bytes_per_s : profile.hardware.inter_node_bytes_per_s * cards;
      transfer[s] = static_cast<double>(profile.layers[stages[s].layer_end - 1].output_bytes) / bandwidth * 1000.0 +
                    profile.hardware.latency_ms;
    }
  }
  // The first microbatch goes down and back; then one leaves every period.
  double first = 0;
  for (std::size_t s = 0; s < count; ++s) first += stage[s] + 2 * transfer[s];
  return first + (microbatches - 1) * direct_period_ms(stage, transfer, runs);
}

double direct_period_ms(const std::vector<double>& stage_ms, const std::vector<double>& transfer_ms, Runs runs) {
  const std::size_t count = stage_ms.size();
  const auto link = [&](std::size_t s) { return s + 1 < count ? transfer_ms[s] : 0.0; };
  double period = 0;
  for (std::size_t s = 0; s < count; ++s) {
    period = std::max({period, stage_ms[s], link(s)});
    for (std::size_t e = runs == Runs::every ? s : count - 1; e < count; ++e) {
      double round_trip = 0;
      for (std::size_t j = s; j <= e; ++j) round_trip += stage_ms[j] + (j < e ? 2 * link(j) : 0.0);
      period = std::max(period, round_trip / static_cast<double>(e - s + 1));
    }
  }
  return period;
}

namespace {

// What one GPU of `degree` keeps of layer l where the profile records it
// (0 where it does not).
Bytes recorded_share(const LayerProfile& layer, int degree) {
  if (degree == 1) return 0;
  for (const auto& m : layer.tensor_parallel) {
    if (m.degree == degree) return m.activation_bytes;
  }
  return 0;
}

// Random profiles' measured times are never slower than degree 1 (no
// replicated layers): a layer's activations divide among the GPUs unless
// one GPU's share is recorded, which the GPUs then each keep.
bool fits_directly(const Profile& profile, const Stage& stage, int in_flight) {
  Bytes state = 0, activation = 0;
  for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
    state += profile.layers[l].param_bytes + profile.layers[l].optimizer_bytes;
    const Bytes share = recorded_share(profile.layers[l], stage.gpus);
    activation += share > 0 ? stage.gpus * share : profile.layers[l].activation_bytes;
  }
  if (stage.recompute == Recompute::none) {
    return state + in_flight * activation <= stage.gpus * profile.hardware.gpu_memory_bytes;
  }
  if (stage.recompute == Recompute::selective) {
    // Every microbatch keeps all but the attention cores' activations; one
    // layer's attention activations (on one GPU) return while its backward runs.
    Bytes kept = 0, largest = 0;
    for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
      const Bytes share = recorded_share(profile.layers[l], stage.gpus);
      const Bytes held = share > 0 ? stage.gpus * share : profile.layers[l].activation_bytes;
      kept += std::max<Bytes>(0, held - profile.layers[l].attention_activation_bytes);
      largest = std::max(largest, (profile.layers[l].attention_activation_bytes + stage.gpus - 1) / stage.gpus);
    }
    const Bytes per_gpu = (state + in_flight * kept + stage.gpus - 1) / stage.gpus + largest;
    return per_gpu <= profile.hardware.gpu_memory_bytes;
  }
  // Per GPU: its share of the state, every microbatch's layer inputs whole
  // (layer l's is layer l - 1's output; the first layer's, tokens, nothing;
  // 1/t of them with sequence parallelism), and the largest layer's
  // activations on one GPU, one layer at a time.
  Bytes inputs = 0, largest = 0;
  for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
    if (l > 0) inputs += profile.layers[l - 1].output_bytes;
    const Bytes share = recorded_share(profile.layers[l], stage.gpus);
    largest = std::max(largest, share > 0 ? share : (profile.layers[l].activation_bytes + stage.gpus - 1) / stage.gpus);
  }
  if (profile.sequence_parallel) inputs = (inputs + stage.gpus - 1) / stage.gpus;
  const Bytes per_gpu = (state + stage.gpus - 1) / stage.gpus + in_flight * inputs + largest;
  return per_gpu <= profile.hardware.gpu_memory_bytes;
}

}  // namespace

void for_each_layout(const CostModel& cost, int max_gpus,
                     const std::function<void(const std::vector<Stage>&, int)>& visit) {
  const Profile& profile = cost.profile();
  const int layers = cost.layers();
  const int gpus = cost.gpus_per_node();
  const int microbatches = cost.microbatches();
  // Every stage kind: a degree and a recomputation choice the cost model allows.
  std::vector<std::pair<int, Recompute>> kinds;
  for (int t : cost.degrees()) {
    for (Recompute r : cost.recompute_choices()) kinds.emplace_back(t, r);
  }
  for (unsigned mask = 0; mask < (1u << (layers - 1)); ++mask) {
    std::vector<std::pair<int, int>> ranges;
    int begin = 0;
    for (int l = 1; l < layers; ++l) {
      if (mask & (1u << (l - 1))) {
        ranges.emplace_back(begin, l);
        begin = l;
      }
    }
    ranges.emplace_back(begin, layers);
    const int count = static_cast<int>(ranges.size());
    std::vector<int> choice(count, 0);
    while (true) {
      // Place stages on nodes in order.
      std::vector<Stage> stages;
      int used = 0;
      bool valid = true;
      for (int s = 0; s < count && valid; ++s) {
        const auto [t, r] = kinds[choice[s]];
        // Inside one node, or (a degree of k nodes) on k whole nodes.
        const bool spans = t > gpus;
        if (spans ? used % gpus != 0 || t % gpus != 0 : used / gpus != (used + t - 1) / gpus) valid = false;
        stages.push_back({ranges[s].first, ranges[s].second, t, used / gpus, r, spans ? t / gpus : 1});
        used += t;
      }
      valid = valid && used >= 1 && used <= max_gpus;
      for (int s = 0; s < count && valid; ++s) {
        valid = fits_directly(profile, stages[s], std::min(microbatches, count - s));
      }
      if (valid) visit(stages, used);
      int digit = 0;
      while (digit < count && ++choice[digit] == static_cast<int>(kinds.size())) choice[digit++] = 0;
      if (digit == count) break;
    }
  }
}

namespace {

// Every layout on up to max_gpus GPUs (below a node: one node's first GPUs),
// the best per GPU count.
std::vector<std::optional<BruteTemplate>> brute_force_by_gpus(const CostModel& cost, int max_gpus) {
  const int microbatches = cost.microbatches();
  std::vector<std::optional<BruteTemplate>> best(max_gpus + 1);
  for_each_layout(cost, max_gpus, [&](const std::vector<Stage>& stages, int used) {
    const double t = direct_iteration_ms(cost, stages, microbatches);
    const double suffix_t = direct_iteration_ms(cost, stages, microbatches, Runs::suffixes);
    if (!best[used]) best[used] = BruteTemplate{t, stages, suffix_t};
    if (t < best[used]->iteration_ms) {
      best[used]->iteration_ms = t;
      best[used]->stages = stages;
    }
    best[used]->suffix_iteration_ms = std::min(best[used]->suffix_iteration_ms, suffix_t);
  });
  return best;
}

}  // namespace

std::vector<std::optional<BruteTemplate>> brute_force_templates(const CostModel& cost, int max_nodes) {
  const int gpus = cost.gpus_per_node();
  const auto by_gpus = brute_force_by_gpus(cost, max_nodes * gpus);
  std::vector<std::optional<BruteTemplate>> best(max_nodes + 1);
  for (int n = 1; n <= max_nodes; ++n) best[n] = by_gpus[n * gpus];
  return best;
}

std::vector<std::optional<BruteTemplate>> brute_force_shared_node_templates(const CostModel& cost) {
  auto best = brute_force_by_gpus(cost, cost.gpus_per_node() - 1);
  if (!best.empty()) best[0].reset();
  return best;
}

std::optional<double> brute_force_instantiation(const CostModel& cost, const TemplateSet& templates, int nodes,
                                                int min_pipelines, int global_microbatches,
                                                const std::vector<int>& fixed_sizes) {
  std::vector<const PipelineTemplate*> chosen;
  for (int size : fixed_sizes) {
    if (!templates.find(size)) return std::nullopt;
    chosen.push_back(templates.find(size));
  }
  double best = std::numeric_limits<double>::infinity();
  // Least slowest pipeline over splits of `left` microbatches over chosen[i..].
  std::function<double(std::size_t, int, double)> split = [&](std::size_t i, int left, double slowest) {
    if (i == chosen.size()) return left == 0 ? slowest : std::numeric_limits<double>::infinity();
    const int limit = chosen[i]->max_microbatches > 0 ? chosen[i]->max_microbatches : left;
    const int others = static_cast<int>(chosen.size() - i - 1);
    double result = std::numeric_limits<double>::infinity();
    for (int q = 1; q <= std::min(limit, left - others); ++q) {
      result = std::min(result, split(i + 1, left - q, std::max(slowest, chosen[i]->iteration_ms_for(q))));
    }
    return result;
  };
  std::function<void(int, std::size_t)> pick = [&](int left, std::size_t from) {
    if (left == 0) {
      const int p = static_cast<int>(chosen.size());
      if (p < min_pipelines || p > global_microbatches) return;
      double tail = 0;
      for (const auto* t : chosen) tail = std::max(tail, cost.iteration_tail_ms(t->stages, p));
      best = std::min(best, split(0, global_microbatches, 0) + tail);
      return;
    }
    for (std::size_t k = from; k < templates.templates.size(); ++k) {
      if (templates.templates[k].nodes > left) break;
      chosen.push_back(&templates.templates[k]);
      pick(left - templates.templates[k].nodes, k);
      chosen.pop_back();
    }
  };
  pick(nodes, 0);
  if (best == std::numeric_limits<double>::infinity()) return std::nullopt;
  return best;
}

double plan_objective_ms(const CostModel& cost, const Plan& plan) {
  const int ranks = static_cast<int>(plan.pipelines.size());
  double slowest = 0, tail = 0;
  for (const auto& p : plan.pipelines) {
    slowest = std::max(slowest, cost.pipeline_ms(p.stages, p.microbatches));
    tail = std::max(tail, cost.iteration_tail_ms(p.stages, ranks));
  }
  return slowest + tail;
}

Played play_1f1b(const std::vector<double>& forward_ms, const std::vector<double>& backward_ms,
                 const std::vector<double>& transfer_ms, int microbatches, int chunks) {
  const int S = static_cast<int>(forward_ms.size());
  const int M = microbatches;
  const int D = S / chunks;  // devices: stage s on device s mod D
  Played out;
  out.last_backward_ms.assign(static_cast<std::size_t>(S), 0.0);
  // Each device's passes, with the stage each runs on.
  std::vector<std::vector<std::pair<PipelinePass, int>>> order(D);
  for (int d = 0; d < D; ++d) {
    const auto passes = chunks == 1 ? one_f_one_b(d, S, M) : interleaved_one_f_one_b(d, D, chunks, M);
    for (const auto& pass : passes) order[d].emplace_back(pass, pass.chunk * D + d);
  }
  std::vector<std::vector<char>> activation(S, std::vector<char>(M, 0)), gradient(S, std::vector<char>(M, 0));
  for (int m = 0; m < M; ++m) activation[0][m] = 1;
  std::vector<std::size_t> next(D, 0);
  std::vector<char> busy(D, 0);
  std::vector<double> forward_link(S, 0.0), backward_link(S, 0.0);
  // Events in time order, then in the order they were made: (time, seq, kind, stage, microbatch).
  enum Kind { kDone, kActivation, kGradient };
  using Event = std::tuple<double, long, int, int, int>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  long seq = 0;
  const auto try_start = [&](int d, double now) {
    if (busy[d] || next[d] == order[d].size()) return;
    const auto [pass, s] = order[d][next[d]];
    if (!(pass.forward ? activation[s][pass.microbatch] : gradient[s][pass.microbatch])) return;
    busy[d] = 1;
    events.emplace(now + (pass.forward ? forward_ms[s] : backward_ms[s]), seq++, kDone, s, pass.microbatch);
  };
  for (int d = 0; d < D; ++d) try_start(d, 0);
  while (!events.empty()) {
    const auto [now, unused, kind, s, m] = events.top();
    events.pop();
    const int d = s % D;
    if (kind == kActivation) {
      activation[s][m] = 1;
    } else if (kind == kGradient) {
      gradient[s][m] = 1;
    } else {
      const bool forward = order[d][next[d]].first.forward;
      busy[d] = 0;
      ++next[d];
      out.end_ms = std::max(out.end_ms, now);
      if (forward && s + 1 < S) {
        forward_link[s] = std::max(now, forward_link[s]) + transfer_ms[s];
        events.emplace(forward_link[s], seq++, kActivation, s + 1, m);
      } else if (forward) {
        gradient[s][m] = 1;
      } else {
        out.last_backward_ms[s] = now;
        if (s > 0) {
          backward_link[s] = std::max(now, backward_link[s]) + transfer_ms[s - 1];
          events.emplace(backward_link[s], seq++, kGradient, s - 1, m);
        }
      }
    }
    try_start(d, now);
  }
  return out;
}

Played play_1f1b(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                 const std::vector<double>& stage_speeds, int chunks) {
  std::vector<double> forward_ms, backward_ms, transfer_ms;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    const double speed = stage_speeds.empty() ? 1.0 : stage_speeds[s];
    double f = 0, b = 0;
    for (int l = st.layer_begin; l < st.layer_end; ++l) {
      f += cost.layer_forward_ms(l, st.gpus);
      b += cost.layer_backward_ms(l, st.gpus, st.recompute);
    }
    forward_ms.push_back(f / speed);
    backward_ms.push_back(b / speed);
    if (s + 1 < stages.size()) {
      transfer_ms.push_back(cost.transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus));
    }
  }
  return play_1f1b(forward_ms, backward_ms, transfer_ms, microbatches, chunks);
}

double play_interleaved(const CostModel& cost, const std::vector<Stage>& stages, int chunks, int microbatches) {
  return play_1f1b(cost, stages, microbatches, {}, chunks).end_ms;
}

double synced_iteration_ms(const CostModel& cost, const Plan& plan, const NodeSpeeds& speeds) {
  const int ranks = static_cast<int>(plan.pipelines.size());
  const bool at_end = cost.gradient_sync() == GradientSync::after_backward;
  const auto speed_of = [&](const std::string& node) { return speeds.count(node) ? speeds.at(node) : 1.0; };
  // Each pipeline played pass by pass, stage by stage at its nodes' speeds.
  std::vector<Played> played;
  for (const auto& p : plan.pipelines) {
    std::vector<double> stage_speeds;
    for (const Stage& st : p.stages) stage_speeds.push_back(speed_of(p.nodes.at(static_cast<std::size_t>(st.node))));
    played.push_back(play_1f1b(cost, p.stages, p.microbatches, stage_speeds, p.interleave));
  }
  double slowest = 0;
  for (const auto& p : played) slowest = std::max(slowest, p.end_ms);
  // A stage's optimizer step reads and writes its state once per GPU, at
  // its node's speed, after its last backward and its all-reduces.
  const auto step_ms = [&](const Pipeline& p, const Stage& st) {
    if (cost.optimizer_bytes_per_s() <= 0) return 0.0;
    const double bytes = 2.0 * static_cast<double>(cost.stage_state_bytes_per_gpu(st.layer_begin, st.layer_end, st.gpus));
    return bytes / cost.optimizer_bytes_per_s() * 1000.0 / speed_of(p.nodes.at(static_cast<std::size_t>(st.node)));
  };
  // Where the nodes run the collectives, a ring runs at its slowest member.
  double ring_speed = 1;
  if (cost.collectives_at_node_speed()) {
    ring_speed = kMaxNodeSpeed;
    for (const auto& p : plan.pipelines) {
      for (const auto& n : p.nodes) ring_speed = std::min(ring_speed, speed_of(n));
    }
  }
  // Every layer's final gradient, per pipeline, from each stage's last backward.
  std::vector<double> start(static_cast<std::size_t>(cost.layers()), -std::numeric_limits<double>::infinity());
  std::vector<std::vector<double>> last_backward(plan.pipelines.size());  // per pipeline and stage
  for (std::size_t k = 0; k < plan.pipelines.size(); ++k) {
    const Pipeline& p = plan.pipelines[k];
    const std::size_t S = p.stages.size();
    const auto backward_of = [&](const Stage& st, int l) {
      return cost.layer_backward_ms(l, st.gpus, st.recompute) / speed_of(p.nodes.at(static_cast<std::size_t>(st.node)));
    };
    for (std::size_t s = 0; s < S; ++s) {
      const Stage& st = p.stages[s];
      double done = played[k].last_backward_ms[s];
      last_backward[k].push_back(done);
      for (int l = st.layer_begin; l < st.layer_end; ++l) {
        start[l] = std::max(start[l], done);
        if (!at_end) done -= backward_of(st, l);
      }
    }
  }
  // The all-reduces: per layer, or per bucket. Buckets, from their
  // definition: from the last layer down, closed once they hold the bucket
  // bytes or where any pipeline's stage begins.
  const int layers = cost.layers();
  std::vector<int> first_of(static_cast<std::size_t>(layers));  // each layer's all-reduce, by its lowest layer
  for (int l = 0; l < layers; ++l) first_of[l] = l;
  if (cost.gradient_sync() == GradientSync::buckets) {
    std::set<int> begins;
    for (const auto& p : plan.pipelines) {
      for (const Stage& st : p.stages) begins.insert(st.layer_begin);
    }
    std::vector<int> members;
    double bytes = 0;
    for (int l = layers - 1; l >= 0; --l) {
      members.push_back(l);
      bytes += static_cast<double>(cost.profile().layers[l].param_bytes);
      if (bytes >= cost.gradient_bucket_bytes() || begins.count(l) > 0) {
        for (int m : members) first_of[m] = l;
        members.clear();
        bytes = 0;
      }
    }
  }
  std::map<int, std::pair<double, double>> reduction;  // lowest layer: ready, bytes
  for (int l = 0; l < layers; ++l) {
    auto [it, fresh] = reduction.try_emplace(first_of[l], -std::numeric_limits<double>::infinity(), 0.0);
    it->second.first = std::max(it->second.first, start[l]);
    it->second.second += static_cast<double>(cost.profile().layers[l].param_bytes);
  }
  double out = slowest;
  for (std::size_t k = 0; k < plan.pipelines.size(); ++k) {
    const Pipeline& p = plan.pipelines[k];
    for (std::size_t s = 0; s < p.stages.size(); ++s) {
      const Stage& st = p.stages[s];
      std::vector<std::pair<double, int>> queue;
      for (int l = st.layer_begin; ranks > 1 && l < st.layer_end; ++l) {
        if (first_of[l] == l) queue.emplace_back(reduction.at(l).first, l);
      }
      std::sort(queue.begin(), queue.end());
      double nic = -std::numeric_limits<double>::infinity();
      for (const auto& [at, l] : queue) {
        nic = std::max(nic, at) + cost.gradient_allreduce_ms(reduction.at(l).second / st.gpus, ranks) / ring_speed;
      }
      out = std::max(out, std::max(nic, last_backward[k][s]) + step_ms(p, st));
    }
  }
  return out;
}

}  // namespace oobleck::test
