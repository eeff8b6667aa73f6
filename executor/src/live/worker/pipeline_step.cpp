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

double PipelineStep::run(int step, bool record) {
  inbox_.throw_if_superseded();
  recording_ = record;
  timeline_ = {};
  if (recording_) groups_.trainers().barrier();
  timeline_.step_start_ms = now_ms();
  zero_sums(slots_);
  double loss = 0;
  {
    const CudaAutocast autocast(o_.bf16);
    loss = one_f_one_b(step);
  }
  const double sync_start = now_ms();
  synchronise_gradients();
  timeline_.sync_ms = now_ms() - sync_start;
  return loss;
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
      step_sequences(tokens_, o_.seed, step, (place_.first_microbatch + microbatch) * o_.microbatch_size,
                     o_.microbatch_size, o_.model.seq_len);
  return long_tensor(targets ? s.targets : s.inputs, o_.microbatch_size, o_.model.seq_len, train_device(o_));
}

// A newer generation is looked for between layers too: a long pass must
// not hold up everyone's recovery until its next communication.
torch::Tensor PipelineStep::forward_layers(torch::Tensor x) {
  for (int l = place_.seat.layer_begin; l < place_.seat.layer_end; ++l) {
    inbox_.throw_if_superseded();
    x = held_.at(l).module->forward(x);
  }
  return x;
}

double PipelineStep::one_f_one_b(int step) {
  const Plan& plan = *place_.plan;
  const Pipeline& pipeline = plan.pipelines[place_.seat.pipeline];
  const int stages = static_cast<int>(pipeline.nodes.size()), position = place_.seat.position;
  const bool first = position == 0, last = position == stages - 1;
  const int M = pipeline.microbatches, B = plan.global_microbatches, rank = place_.rank;
  const auto activation_shape = std::vector<std::int64_t>{o_.microbatch_size, o_.model.seq_len, o_.model.hidden};
  // Stage boundaries carry fp32 (under autocast too: the residual stream is fp32).
  const auto activation = torch::TensorOptions().dtype(torch::kFloat32).device(train_device(o_));
  Communicator& links = groups_.trainers();
  std::vector<torch::Tensor> inputs(M), outputs(M);
  std::vector<std::unique_ptr<PendingOp>> sends;
  double loss_sum = 0;
  auto forward = [&](int m) {
    torch::Tensor x;
    if (first) {
      x = microbatch_tokens(step, m, false);
    } else {
      auto buffer = torch::empty(activation_shape, activation);
      const double wait_start = now_ms();
      links.recv(buffer, rank - 1, 2 * m);
      timeline_.wait_ms += now_ms() - wait_start;
      x = buffer.requires_grad_(true);
    }
    const double start = now_ms();
    auto y = forward_layers(x);
    if (last) {
      y = language_model_loss(y, microbatch_tokens(step, m, true)) / B;
      loss_sum += y.item<double>();
    }
    wait_for_device(o_);
    const double end = now_ms();
    record('F', m, start, end);
    timeline_.compute_ms += end - start;
    if (!last) sends.push_back(links.send(y.detach().to(torch::kFloat32), rank + 1, 2 * m));
    if (m == 0 && rank == 0) inbox_.send(protocol::Started{place_.generation, step});
    inputs[m] = x;
    outputs[m] = y;
  };
  auto backward = [&](int m) {
    inbox_.throw_if_superseded();
    double start = now_ms();
    if (last) {
      outputs[m].backward();
    } else {
      auto buffer = torch::empty(activation_shape, activation);
      links.recv(buffer, rank + 1, 2 * m + 1);
      const double arrived = now_ms();
      timeline_.wait_ms += arrived - start;
      start = arrived;
      outputs[m].backward(buffer);
    }
    add_microbatch(slots_);
    wait_for_device(o_);
    const double end = now_ms();
    record('B', m, start, end);
    timeline_.compute_ms += end - start;
    if (!first) sends.push_back(links.send(inputs[m].grad(), rank - 1, 2 * m + 1));
    inputs[m] = outputs[m] = torch::Tensor();
  };
  for (const PipelinePass pass : oobleck::one_f_one_b(position, stages, M)) {
    pass.forward ? forward(pass.microbatch) : backward(pass.microbatch);
  }
  for (auto& w : sends) w->wait();
  return loss_sum;
}

// Sums each layer's gradient over its holders (the tied weight over the
// holders of either end), in float64, then clips by the global norm: each
// label's norm comes from its lowest-ranked holder, and everyone adds the
// labels up in the same order (train_common.h).
void PipelineStep::synchronise_gradients() {
  std::map<std::vector<int>, std::vector<torch::Tensor>> by_set;
  for (const auto& s : slots_) {
    if (s.label != kTied) by_set[holders_.of_label.at(s.label)].push_back(s.sum);
  }
  torch::Tensor tied = tied_sum(slots_);
  if (tied.defined()) by_set[holders_.of_label.at(kTied)].push_back(tied);
  // Every group's all-reduce in flight at once: each group is its own
  // communicator, so none waits for another worker's other groups.
  struct InFlight {
    std::vector<torch::Tensor>* tensors;
    torch::Tensor flat;
    std::unique_ptr<PendingOp> op;
  };
  std::vector<InFlight> in_flight;
  for (auto& [set, tensors] : by_set) {
    if (set.size() < 2) continue;
    std::vector<torch::Tensor> views;
    for (auto& t : tensors) views.push_back(t.reshape({-1}));
    auto flat = torch::cat(views);
    auto op = groups_.gradient_group(set).start_allreduce_sum(flat);
    in_flight.push_back({&tensors, std::move(flat), std::move(op)});
  }
  for (auto& f : in_flight) {
    f.op->wait();
    std::int64_t offset = 0;
    for (auto& t : *f.tensors) {
      t.copy_(f.flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
  write_gradients(slots_, tied);
  const int last_layer = o_.model.layers + 1;
  auto norms =
      label_norms(slots_, last_layer, [&](int label) { return holders_.of_label.at(label).front() == place_.rank; });
  // Each entry has one contributor: the sum is exact. (An owning tensor:
  // an abandoned all-reduce may still write into it.)
  auto reduced = torch::tensor(norms, torch::kFloat64);
  groups_.trainers().allreduce_sum(reduced);
  const auto total = reduced.accessor<double, 1>();
  for (std::size_t i = 0; i < norms.size(); ++i) norms[i] = total[static_cast<std::int64_t>(i)];
  clip_by_global_norm(slots_, norms, o_.clip_norm);
}

}  // namespace oobleck::executor
