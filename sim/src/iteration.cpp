// One 1F1B iteration played op by op on the event engine. Each stage is a
// processor running its ops in 1F1B order (warm-up forwards, then one
// forward and one backward in turn, then the remaining backwards); an op
// starts when the stage is free and its input has arrived. Each direction of
// each stage-to-stage link carries one transfer at a time. A layer's
// gradient all-reduce starts once every pipeline holding the layer has
// finished its last backward over it (with tied embeddings, the first and
// last layers are all-reduced together among the holders of either); each
// holder's GPUs (one network interface each) carry their shard of it after
// the all-reduces queued before it. A stage's optimizer step follows the
// all-reduces of all its layers.
//
// Delays at nodes (IterationOptions::node_send_delay_ms) add to the arrival
// of what the node sends, not to its link's occupancy; a ring all-reduce of
// k ranks takes 2(k - 1) steps, each waiting for its slowest sender, so it
// ends 2(k - 1) times its members' largest delay later. With the gradient
// norm, every stage's optimizer step waits for one all-reduce of a number
// among all trainers, started once the last stage's gradients are summed.
//
// Interleaved 1F1B: each stage is a virtual stage, and each device runs its
// virtual stages' passes in Megatron's order (interleaved_one_f_one_b): a
// pass starts when it is the device's next and its input has arrived. The
// transfers between virtual stages each have their own link.
//
// Tensor parallelism: a stage at degree t > 1 all-reduces each split layer's
// output twice per pass among its t GPUs (CostModel::*_allreduce_ms). Each
// forward or backward op is shown as its compute followed by one
// tensor-parallel all-reduce op that stands for all of the pass's
// all-reduces (really interleaved layer by layer, after attention and after
// the MLP). Grouping them keeps the trace readable and the model simple: the
// pass still occupies the stage for exactly the cost model's total (one
// event at its end, as at degree 1), so iteration times are those of the
// cost model's totals; only the split of each pass is shown. Layer gradients
// still become ready layer by layer at the layers' total times.
//
// A stage's costs are priced in played_stage.cpp, the all-reduces and the
// layers each carries are laid out in gradient_reductions.cpp.
#include "oobleck/sim/iteration.h"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>

#include "gradient_reductions.h"
#include "oobleck/common/one_f_one_b.h"
#include "oobleck/sim/engine.h"
#include "played_stage.h"

namespace oobleck::sim {
namespace {

class IterationModel {
 public:
  IterationModel(const CostModel& cost, const Plan& plan, const IterationOptions& options)
      : cost_(cost), plan_(plan), options_(options) {}

  IterationResult run() {
    build();
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      if (stages_[i].order.empty()) {
        hand_over_unpassed(static_cast<int>(i));
      } else {
        try_start(static_cast<int>(i));
      }
    }
    engine_.run();
    return collect();
  }

 private:
  void build() {
    if (plan_.pipelines.empty()) throw InputError("plan: no pipelines to simulate");
    if (!options_.extra_forward_ms.empty() && options_.extra_forward_ms.size() != plan_.pipelines.size()) {
      throw std::invalid_argument("extra_forward_ms: one entry per pipeline expected");
    }
    devices_ = options_.shared_device ? 1 : 0;
    holders_.assign(cost_.layers(), {});
    representative_.assign(plan_.pipelines.size(), -1);
    copies_.assign(plan_.pipelines.size(), 0);
    std::map<std::pair<std::vector<double>, int>, int> representative_of;
    for (std::size_t p = 0; p < plan_.pipelines.size(); ++p) {
      if (is_played(p, representative_of)) add_stages(p);
    }
    nic_free_ms_.assign(stages_.size(), 0);
    link_free_ms_.assign(2 * stages_.size(), 0);
    queued_.assign(stages_.size(), 0);
    device_busy_.assign(devices_, 0);
    waiting_.assign(devices_, {});
    device_next_.assign(device_order_.size(), 0);
    reductions_ = gradient_reductions(cost_, plan_, options_, holders_);
  }

  // Pipelines with the same stages, microbatches and extra work run the
  // same schedule, and their nodes' network queues see the same
  // all-reduces: one of them stands for all (unless every op is recorded).
  // True when pipeline `p` is played: it stands for itself, or is the first
  // of its kind.
  bool is_played(std::size_t p, std::map<std::pair<std::vector<double>, int>, int>& representative_of) {
    // (A shared device sees every copy's work, and a delay is one node's:
    // then each is played.)
    if (options_.record_ops || options_.shared_device || !options_.node_send_delay_ms.empty()) {
      representative_[p] = static_cast<int>(p);
      copies_[p] = 1;
      return true;
    }
    const Pipeline& pipeline = plan_.pipelines[p];
    std::vector<double> signature;
    for (const auto& st : pipeline.stages) {
      signature.insert(signature.end(), {static_cast<double>(st.layer_begin), static_cast<double>(st.layer_end),
                                         static_cast<double>(st.gpus), static_cast<double>(st.node),
                                         static_cast<double>(st.recompute)});
    }
    if (!options_.extra_forward_ms.empty()) {
      signature.insert(signature.end(), options_.extra_forward_ms[p].begin(), options_.extra_forward_ms[p].end());
    }
    auto [it, fresh] =
        representative_of.try_emplace({std::move(signature), pipeline.microbatches}, static_cast<int>(p));
    representative_[p] = it->second;
    ++copies_[it->second];
    return fresh;
  }

  // Pipeline `p`'s stages, with their op order and costs.
  void add_stages(std::size_t p) {
    const Pipeline& pipeline = plan_.pipelines[p];
    const int S = static_cast<int>(pipeline.stages.size());
    const int M = pipeline.microbatches;
    const int v = pipeline.interleave > 1 ? pipeline.interleave : options_.interleave;
    if (v < 1 || S % v != 0) {
      throw InputError("plan: pipeline " + std::to_string(p) + " has " + std::to_string(S) +
                       " stages, not a multiple of the interleave " + std::to_string(v));
    }
    const int first_device = devices_;
    if (!options_.shared_device && v > 1) devices_ += S / v;
    first_stage_[p] = static_cast<int>(stages_.size());
    for (int s = 0; s < S; ++s) {
      const Stage& st = pipeline.stages[s];
      PlayedStage state = priced_stage(cost_, options_, plan_, p, s);
      if (v == 1) state.order = one_f_one_b(s, S, M);
      state.activation_arrived.assign(M, s == 0 ? 1 : 0);
      state.gradient_arrived.assign(M, s == S - 1 ? 1 : 0);
      state.device = options_.shared_device ? 0 : v > 1 ? first_device + s % (S / v) : -1;
      for (int l = st.layer_begin; l < st.layer_end; ++l) holders_[l].push_back(static_cast<int>(stages_.size()));
      stages_.push_back(std::move(state));
    }
    if (v > 1 && !options_.shared_device) {
      // Each device runs its chunks' passes in Megatron's interleaved order.
      const int p_devices = S / v;
      device_order_.resize(devices_);
      for (int rank = 0; rank < p_devices; ++rank) {
        for (const PipelinePass& pass : interleaved_one_f_one_b(rank, p_devices, v, M)) {
          const int id = first_stage_[p] + pass.chunk * p_devices + rank;
          device_order_[first_device + rank].push_back(id);
          stages_[id].order.push_back({pass.forward, pass.microbatch});
        }
      }
    }
  }

  void record(OpKind kind, int pipeline, int stage, int index, Milliseconds start, Milliseconds end) {
    if (options_.record_ops) ops_.push_back({kind, pipeline, stage, index, start, end});
  }

  void try_start(int id) {
    PlayedStage& st = stages_[id];
    if (st.busy || st.next == st.order.size()) return;
    const PipelinePass op = st.order[st.next];
    if (op.forward ? !st.activation_arrived[op.microbatch] : !st.gradient_arrived[op.microbatch]) return;
    if (st.device >= 0 && !device_order_.empty()) {
      // Interleaved: only the device's next pass, and one at a time.
      const auto& order = device_order_[st.device];
      if (device_busy_[st.device] || device_next_[st.device] >= order.size() ||
          order[device_next_[st.device]] != id) {
        return;
      }
      device_busy_[st.device] = 1;
    } else if (st.device >= 0) {
      if (device_busy_[st.device]) {
        if (!queued_[id]) waiting_[st.device].push_back(id);
        queued_[id] = 1;
        return;
      }
      device_busy_[st.device] = 1;
    }
    st.busy = true;
    const Milliseconds start = engine_.now();
    const Milliseconds duration = op.forward ? st.forward_ms : st.backward_ms;
    if (!op.forward && st.next + 1 == st.order.size()) announce_gradients(id, start);
    engine_.schedule_after(duration, [this, id, op, start] { finish(id, op, start); });
  }

  // A pipeline given no microbatch (a step resumed after a loss, whose
  // pipeline kept its passes) trains nothing: its gradients are there at
  // once, for the all-reduces.
  void hand_over_unpassed(int id) {
    PlayedStage& st = stages_[id];
    st.backward_done = true;
    for (int l = st.stage.layer_end - 1; l >= st.stage.layer_begin; --l) {
      engine_.schedule_at(0, [this, l] { gradient_ready(l); });
    }
  }

  // The last backward pass goes from the stage's last layer to its first;
  // each layer's gradient is final once the pass has gone through it (with
  // GradientSync::after_backward, handed over once the pass ends).
  void announce_gradients(int id, Milliseconds start) {
    const PlayedStage& st = stages_[id];
    const bool at_end = options_.gradient_sync == GradientSync::after_backward;
    Milliseconds t = start;
    for (int l = st.stage.layer_end - 1; l >= st.stage.layer_begin; --l) {
      t = at_end ? start + st.backward_ms : t + cost_.layer_backward_ms(l, st.stage.gpus, st.stage.recompute);
      engine_.schedule_at(t, [this, l] { gradient_ready(l); });
    }
  }

  void finish(int id, PipelinePass op, Milliseconds start) {
    PlayedStage& st = stages_[id];
    st.busy = false;
    // The pass's compute, then its tensor-parallel all-reduces (top comment).
    const Milliseconds allreduce_ms = op.forward ? st.forward_allreduce_ms : st.backward_allreduce_ms;
    const Milliseconds compute_end = std::max(start, engine_.now() - allreduce_ms);
    st.compute_ms += compute_end - start;
    st.tp_allreduce_ms += engine_.now() - compute_end;
    record(op.forward ? OpKind::forward : OpKind::backward, st.pipeline, st.index, op.microbatch, start, compute_end);
    if (allreduce_ms > 0) {
      record(op.forward ? OpKind::tp_allreduce_forward : OpKind::tp_allreduce_backward, st.pipeline, st.index,
             op.microbatch, compute_end, engine_.now());
    }
    const Pipeline& pipeline = plan_.pipelines[st.pipeline];
    const int S = static_cast<int>(pipeline.stages.size());
    if (op.forward && st.index + 1 < S) {
      send(id, id + 1, true, op.microbatch);
    } else if (!op.forward && st.index > 0) {
      send(id, id - 1, false, op.microbatch);
    }
    ++st.next;
    if (st.next == st.order.size()) {
      st.backward_done = true;
      st.passes_end_ms = engine_.now();
      last_backward_ms_ = std::max(last_backward_ms_, engine_.now());
      maybe_step(id);
    }
    if (st.device >= 0 && !device_order_.empty()) {
      // Interleaved: on to the device's next pass, once its input is there.
      const int device = st.device;
      device_busy_[device] = 0;
      if (++device_next_[device] < device_order_[device].size()) try_start(device_order_[device][device_next_[device]]);
    } else if (st.device >= 0) {
      // The device goes to the stages that waited for it, first come first.
      const int device = st.device;
      device_busy_[device] = 0;
      while (!device_busy_[device] && !waiting_[device].empty()) {
        const int next = waiting_[device].front();
        waiting_[device].pop_front();
        queued_[next] = 0;
        try_start(next);
      }
    }
    try_start(id);
  }

  void send(int from, int to, bool activation, int microbatch) {
    const PlayedStage& a = stages_[from];
    const PlayedStage& b = stages_[to];
    // Both directions of a boundary go over the cards of the stage before it.
    const PlayedStage& before = activation ? a : b;
    const Milliseconds duration =
        cost_.transfer_ms(before.stage.layer_end, a.stage.node == b.stage.node, before.stage.gpus);
    Milliseconds& link = link_free_ms_[2 * static_cast<std::size_t>(from) + (activation ? 0 : 1)];
    const Milliseconds start = std::max(engine_.now(), link);
    link = start + duration;
    record(activation ? OpKind::send_activation : OpKind::send_gradient, a.pipeline, a.index, microbatch, start, link);
    engine_.schedule_at(link + delay_of(a), [this, to, activation, microbatch] {
      auto& arrived = activation ? stages_[to].activation_arrived : stages_[to].gradient_arrived;
      arrived[microbatch] = 1;
      try_start(to);
    });
  }

  void gradient_ready(int layer) {
    const int reduction = reductions_.of_layer[layer];
    Reduction& r = reductions_.all[reduction];
    if (--r.unfinished > 0) return;
    int ranks = 0;
    for (int h : r.stages) ranks += copies_[stages_[h].pipeline];
    if (ranks == 1) {
      reduced(reduction);
      return;
    }
    // Each GPU has its own network interface and reduces its 1/t shard of
    // the layer. Every holder's interfaces carry their share in the order
    // the layers became ready; the all-reduce is done when the last holder
    // is (bandwidth accounting: no convoys across holders).
    Milliseconds start = 0, end = 0, slowest = 0;
    for (int h : r.stages) {
      Milliseconds& nic = nic_free_ms_[h];
      const Milliseconds begin = std::max(engine_.now(), nic);
      nic = begin + cost_.gradient_allreduce_ms(r.bytes / stages_[h].stage.gpus, ranks);
      start = std::max(start, begin);
      end = std::max(end, nic);
      slowest = std::max(slowest, delay_of(stages_[h]));
    }
    end += 2 * (ranks - 1) * slowest;
    record(OpKind::allreduce, -1, -1, layer, start, end);
    last_allreduce_ms_ = std::max(last_allreduce_ms_, end);
    engine_.schedule_at(end, [this, reduction] { reduced(reduction); });
  }

  void reduced(int reduction) {
    for (int l : reductions_.all[reduction].layers) {
      for (int h : holders_[l]) {
        --stages_[h].layers_unreduced;
        maybe_step(h);
      }
    }
  }

  Milliseconds delay_of(const std::string& node) const {
    const auto it = options_.node_send_delay_ms.find(node);
    return it == options_.node_send_delay_ms.end() ? 0.0 : it->second;
  }
  // A stage's: its slowest node's (a stage over several nodes waits for each).
  Milliseconds delay_of(const PlayedStage& stage) const {
    if (options_.node_send_delay_ms.empty()) return 0.0;
    const auto& nodes = plan_.pipelines[static_cast<std::size_t>(stage.pipeline)].nodes;
    Milliseconds most = delay_of(stage.node);
    for (int n = stage.stage.node + 1; n < stage.stage.node + stage.stage.node_span; ++n) {
      if (n < static_cast<int>(nodes.size())) most = std::max(most, delay_of(nodes[static_cast<std::size_t>(n)]));
    }
    return most;
  }

  void maybe_step(int id) {
    PlayedStage& st = stages_[id];
    if (!st.backward_done || st.layers_unreduced > 0) return;
    if (options_.gradient_norm) {
      st.layers_unreduced = -2;  // summed, waiting for the norm
      if (++summed_ < static_cast<int>(stages_.size())) return;
      // Every trainer (each stage's GPUs) takes part; one number.
      int trainers = 0;
      Milliseconds slowest = 0;
      for (const auto& s : stages_) {
        trainers += s.stage.gpus * copies_[s.pipeline];
        slowest = std::max(slowest, delay_of(s));
      }
      const Milliseconds norm_ms =
          trainers > 1 ? cost_.gradient_allreduce_ms(8, trainers) +
                             2 * (trainers - 1) * slowest
                       : 0;
      engine_.schedule_after(norm_ms, [this] {
        for (std::size_t h = 0; h < stages_.size(); ++h) step(static_cast<int>(h));
      });
      return;
    }
    step(id);
  }

  void step(int id) {
    PlayedStage& st = stages_[id];
    st.layers_unreduced = -1;  // stepped
    const Milliseconds start = engine_.now();
    engine_.schedule_after(st.optimizer_ms, [this, id, start] {
      PlayedStage& s = stages_[id];
      s.finished_ms = engine_.now();
      if (s.optimizer_ms > 0) record(OpKind::optimizer, s.pipeline, s.index, 0, start, s.finished_ms);
    });
  }

  IterationResult collect() {
    IterationResult out;
    for (const auto& st : stages_) {
      if (st.layers_unreduced != -1) throw std::logic_error("iteration model: a stage never stepped");
      out.iteration_ms = std::max(out.iteration_ms, st.finished_ms);
    }
    out.last_backward_ms = last_backward_ms_;
    out.sync_exposed_ms = std::max(0.0, last_allreduce_ms_ - last_backward_ms_);
    for (std::size_t p = 0; p < plan_.pipelines.size(); ++p) {
      const Pipeline& pipeline = plan_.pipelines[p];
      const int first = first_stage_[representative_[p]];
      for (std::size_t s = 0; s < pipeline.stages.size(); ++s) {
        const PlayedStage& st = stages_[first + s];
        StageTimes t;
        t.pipeline = static_cast<int>(p);
        t.stage = static_cast<int>(s);
        const int node = pipeline.stages[s].node;
        t.node = node < static_cast<int>(pipeline.nodes.size()) ? pipeline.nodes[node] : "";
        t.node_index = node;
        t.gpus = st.stage.gpus;
        t.microbatches = pipeline.microbatches;
        t.tp_allreduces_per_pass = st.tp_allreduces_per_pass;
        t.compute_ms = st.compute_ms;
        t.tp_allreduce_ms = st.tp_allreduce_ms;
        t.optimizer_ms = st.optimizer_ms;
        t.idle_ms = out.iteration_ms - st.compute_ms - st.tp_allreduce_ms - st.optimizer_ms;
        t.finished_ms = st.finished_ms;
        t.passes_end_ms = st.passes_end_ms;
        out.stages.push_back(std::move(t));
      }
    }
    out.ops = std::move(ops_);
    out.events = engine_.executed();
    return out;
  }

  const CostModel& cost_;
  const Plan& plan_;
  const IterationOptions& options_;
  Engine engine_;
  std::vector<PlayedStage> stages_;
  std::vector<int> first_stage_ = std::vector<int>(plan_.pipelines.size(), -1);  // of representatives
  std::vector<int> representative_;        // per pipeline: the one simulated for it
  std::vector<int> copies_;                // per representative: pipelines it stands for
  std::vector<std::vector<int>> holders_;  // per layer: the stages holding it
  GradientReductions reductions_;
  // Devices that several stages share (one for every stage with a shared
  // device; each pipeline's with interleaving): busy or not, and the stages
  // ready for each, in arrival order.
  int devices_ = 0;
  std::vector<char> device_busy_;
  std::vector<std::deque<int>> waiting_;
  std::vector<char> queued_;
  // With interleaving, per device: the stage of each of its passes in the
  // order it runs them, and how many have started.
  std::vector<std::vector<int>> device_order_;
  std::vector<std::size_t> device_next_;
  std::vector<Milliseconds> nic_free_ms_;   // per stage: its GPUs' network interfaces
  std::vector<Milliseconds> link_free_ms_;  // per stage: its forward and backward send links
  std::vector<OpRecord> ops_;
  Milliseconds last_backward_ms_ = 0;
  Milliseconds last_allreduce_ms_ = 0;
  int summed_ = 0;  // stages whose gradients are all summed (with the gradient norm)
};

}  // namespace

IterationResult simulate_iteration(const CostModel& cost, const Plan& plan, const IterationOptions& options) {
  return IterationModel(cost, plan, options).run();
}

}  // namespace oobleck::sim
