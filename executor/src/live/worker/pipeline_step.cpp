#include "pipeline_step.h"

#include <chrono>

#include "model/autocast.h"
#include "oobleck/common/one_f_one_b.h"
#include "oobleck/executor/data.h"

namespace oobleck::executor {
namespace {

// CLOCK_MONOTONIC: one time base for every process on this machine.
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double PipelineStep::run(int step, bool record, const std::vector<int>& microbatches, PassedSums& passed) {
  inbox_.throw_if_superseded();
  recording_ = record;
  timeline_ = {};
  if (recording_) groups_.trainers().barrier();
  timeline_.step_start_ms = now_ms();
  if (passed.step == step) {
    forget_gradients(slots_);
  } else {
    begin_sums(slots_);
    passed = {step, 0, {}};
  }
  passed.step = -1;  // the sums change
  if (microbatches.empty() && place_.rank == 0) inbox_.send(protocol::Started{place_.generation, step});
  double loss = 0;
  {
    const CudaAutocast autocast(o_.bf16);
    loss = one_f_one_b(step, microbatches);
  }
  passed.step = step;
  passed.loss += loss;
  passed.microbatches.insert(passed.microbatches.end(), microbatches.begin(), microbatches.end());
  inbox_.send(protocol::Passed{place_.generation, step});
  const double sync_start = now_ms();
  synchronise_gradients(slots_, gradients_, groups_, o_.model.layers + 1, o_.clip_norm);
  timeline_.sync_ms = now_ms() - sync_start;
  return passed.loss;
}

void PipelineStep::record(char kind, int index, double start_ms, double end_ms) {
  if (recording_) timeline_.ops.push_back({kind, index, start_ms, end_ms});
}

void PipelineStep::record_optimizer(double start_ms, double end_ms) {
  if (!recording_) return;
  timeline_.optimizer_ms = end_ms - start_ms;
  record('O', 0, start_ms, end_ms);
}

torch::Tensor PipelineStep::microbatch_tokens(int step, int microbatch, bool targets) const {
  const Sequences s =
      step_sequences(tokens_, o_.seed, step, microbatch * o_.microbatch_size,
                     o_.microbatch_size, o_.model.seq_len);
  return long_tensor(targets ? s.targets : s.inputs, o_.microbatch_size, o_.model.seq_len, train_device(o_));
}

// A newer generation is looked for between layers too: a long pass must
// not hold up everyone's recovery until its next communication.
torch::Tensor PipelineStep::forward_layers(torch::Tensor x) {
  for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
    inbox_.throw_if_superseded();
    x = held_.at(l).module->forward(x);
  }
  return x;
}

torch::Tensor PipelineStep::forward_keeping_inputs(torch::Tensor x, std::vector<torch::Tensor>& kept) {
  torch::NoGradGuard no_graph;
  kept.clear();
  for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
    inbox_.throw_if_superseded();
    kept.push_back(x.detach());
    x = held_.at(l).module->forward(x);
  }
  return x;
}

torch::Tensor PipelineStep::recompute_backward(std::vector<torch::Tensor>& kept, torch::Tensor gradient,
                                               const torch::Tensor& targets) {
  const bool last = seat().stage == seat().stages - 1;
  for (int l = seat().layer_end - 1; l >= seat().layer_begin; --l) {
    inbox_.throw_if_superseded();
    torch::Tensor& in = kept[static_cast<std::size_t>(l - seat().layer_begin)];
    // (Token ids, the first layer's input, take no gradient.)
    const torch::Tensor x = in.is_floating_point() ? in.detach().requires_grad_(true) : in;
    torch::Tensor y = held_.at(l).module->forward(x);
    if (last && l == seat().layer_end - 1) {
      (language_model_loss(y, targets) / place_.plan->global_microbatches).backward();
    } else {
      y.backward(gradient);
    }
    gradient = x.is_floating_point() ? x.grad() : torch::Tensor();
    in = torch::Tensor();
  }
  return gradient;
}

double PipelineStep::one_f_one_b(int step, const std::vector<int>& microbatches) {
  const Plan& plan = *place_.plan;
  const recovery::WorkerSeat& me = seat();
  const Pipeline& pipeline = plan.pipelines[static_cast<std::size_t>(me.pipeline)];
  const int stages = me.stages, position = me.stage;
  const bool first = position == 0, last = position == stages - 1;
  const int M = static_cast<int>(microbatches.size()), B = plan.global_microbatches;
  // The GPUs across each boundary (the rule at the top of pipeline_step.h).
  const auto [previous_rank, previous_degree] = first ? std::pair{0, 1} : stage_group(position - 1);
  const auto [next_rank, next_degree] = last ? std::pair{0, 1} : stage_group(position + 1);
  const int from_previous = previous_rank + me.shard % previous_degree;
  const int from_next = next_rank + me.shard % next_degree;
  std::vector<int> to_next, to_previous;
  for (int k = me.shard; k < next_degree; k += me.degree) to_next.push_back(next_rank + k);
  for (int k = me.shard; k < previous_degree; k += me.degree) to_previous.push_back(previous_rank + k);
  const auto activation_shape = std::vector<std::int64_t>{o_.microbatch_size, o_.model.seq_len, o_.model.hidden};
  // Stage boundaries carry fp32 (under autocast too: the residual stream is fp32).
  const auto activation = torch::TensorOptions().dtype(torch::kFloat32).device(train_device(o_));
  Communicator& links = groups_.trainers();
  const Recompute recomputation = pipeline.stages[static_cast<std::size_t>(position)].recompute;
  const bool recompute = recomputation == Recompute::full;
  for (int l = me.layer_begin; l < me.layer_end; ++l) {
    held_.at(l).module->set_attention_recompute(recomputation == Recompute::selective);
  }
  std::vector<torch::Tensor> inputs(M), outputs(M), input_gradients(M);
  std::vector<std::vector<torch::Tensor>> kept(recompute ? M : 0);  // each layer's input, per microbatch
  std::vector<std::unique_ptr<PendingOp>> sends;
  double loss_sum = 0;
  auto forward = [&](int m) {
    torch::Tensor x;
    if (first) {
      x = microbatch_tokens(step, microbatches[static_cast<std::size_t>(m)], false);
    } else {
      auto buffer = torch::empty(activation_shape, activation);
      const double wait_start = now_ms();
      links.recv(buffer, from_previous, 2 * m);
      timeline_.wait_ms += now_ms() - wait_start;
      x = buffer.requires_grad_(true);
    }
    const double start = now_ms();
    auto y = recompute ? forward_keeping_inputs(x, kept[m]) : forward_layers(x);
    if (last) {
      // (Recomputing, y came without a graph, and so does the loss: its
      // backward computes it again.)
      y = language_model_loss(y, microbatch_tokens(step, microbatches[static_cast<std::size_t>(m)], true)) / B;
      if (me.shard == 0) loss_sum += y.item<double>();
    }
    wait_for_device(o_);
    const double end = now_ms();
    record('F', m, start, end);
    timeline_.compute_ms += end - start;
    if (!last) {
      const auto activation_out = y.detach().to(torch::kFloat32);
      for (int peer : to_next) sends.push_back(links.send(activation_out, peer, 2 * m));
    }
    if (m == 0 && place_.rank == 0) inbox_.send(protocol::Started{place_.generation, step});
    inputs[m] = x;
    outputs[m] = y;
  };
  auto backward = [&](int m) {
    inbox_.throw_if_superseded();
    double start = now_ms();
    if (last) {
      if (recompute) {
        input_gradients[m] = recompute_backward(kept[m], torch::Tensor(),
                                                microbatch_tokens(step, microbatches[static_cast<std::size_t>(m)], true));
      } else {
        outputs[m].backward();
      }
    } else {
      auto buffer = torch::empty(activation_shape, activation);
      links.recv(buffer, from_next, 2 * m + 1);
      const double arrived = now_ms();
      timeline_.wait_ms += arrived - start;
      start = arrived;
      if (recompute) {
        input_gradients[m] = recompute_backward(kept[m], buffer, torch::Tensor());
      } else {
        outputs[m].backward(buffer);
      }
    }
    add_microbatch(slots_);
    wait_for_device(o_);
    const double end = now_ms();
    record('B', m, start, end);
    timeline_.compute_ms += end - start;
    if (!first) {
      const torch::Tensor gradient = recompute ? input_gradients[m] : inputs[m].grad();
      for (int peer : to_previous) sends.push_back(links.send(gradient, peer, 2 * m + 1));
    }
    inputs[m] = outputs[m] = input_gradients[m] = torch::Tensor();
  };
  for (const PipelinePass pass : oobleck::one_f_one_b(position, stages, M)) {
    pass_ = pass;
    pass.forward ? forward(pass.microbatch) : backward(pass.microbatch);
  }
  for (auto& w : sends) w->wait();
  return loss_sum;
}

void PipelineStep::sum_over_shards(torch::Tensor& t) {
  const double start = now_ms();
  groups_.shards().allreduce_sum(t);
  const double end = now_ms();
  timeline_.tensor_parallel_ms += end - start;
  record(pass_.forward ? 'T' : 't', pass_.microbatch, start, end);
}

std::pair<int, int> PipelineStep::stage_group(int stage) const {
  for (const auto& s : *place_.seats) {
    if (s.pipeline == seat().pipeline && s.stage == stage) return {s.first_rank, s.degree};
  }
  throw std::logic_error("pipeline " + std::to_string(seat().pipeline) + " has no stage " + std::to_string(stage));
}

}  // namespace oobleck::executor
