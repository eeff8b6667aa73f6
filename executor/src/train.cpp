// Training: the single-process reference and the pipeline worker.
//
// Both take step k's global batch from the same order (data.h) and scale each
// microbatch's mean token loss by 1/B, so the gradients they sum are the
// full-batch gradient. The worker runs 1F1B over its pipeline's microbatches,
// sends activations and gradients to its neighbours, and all-reduces each
// layer's gradient among the workers holding that layer in every pipeline
// (the tied embedding/head weight among all holders of either). Clipping
// uses the global norm, each layer counted once; then AdamW.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "communicator.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/train.h"

namespace oobleck::executor {
namespace {

using Clock = std::chrono::steady_clock;

torch::Tensor long_tensor(const std::vector<std::int64_t>& values, std::int64_t rows, std::int64_t cols) {
  return torch::from_blob(const_cast<std::int64_t*>(values.data()), {rows, cols}, torch::kLong).clone();
}

torch::optim::AdamW make_optimizer(const std::vector<torch::Tensor>& parameters, const TrainOptions& o) {
  return torch::optim::AdamW(parameters, torch::optim::AdamWOptions(o.learning_rate).weight_decay(o.weight_decay));
}

// Scales gradients so that their global norm is at most `max_norm`, as
// torch.nn.utils.clip_grad_norm_ does.
void clip(const std::vector<torch::Tensor>& grads, double total_norm, double max_norm) {
  const double coefficient = max_norm / (total_norm + 1e-6);
  if (coefficient >= 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) g.mul_(coefficient);
}

}  // namespace

std::string metrics_line(const StepMetrics& m) {
  return nlohmann::ordered_json{
      {"step", m.step}, {"loss", m.loss}, {"samples", m.samples}, {"iteration_ms", m.iteration_ms}}
      .dump();
}

ModelConfig model_of_profile(const Profile& profile) {
  ModelConfig c = parse_model_config(profile.model_json, profile.origin + ": model");
  if (static_cast<int>(profile.layers.size()) != pipeline_layers(c)) {
    throw InputError(profile.origin + ": " + std::to_string(profile.layers.size()) + " layers, but its model has " +
                     std::to_string(pipeline_layers(c)) + " (embedding, blocks, head)");
  }
  return c;
}

std::vector<StepMetrics> train_single_process(const std::vector<std::uint16_t>& tokens, const TrainOptions& o,
                                              int global_microbatches) {
  torch::manual_seed(o.seed);
  Gpt model(o.model, o.seed);
  const auto parameters = model.parameters();
  auto optimizer = make_optimizer(parameters, o);
  const int B = global_microbatches, mb = o.microbatch_size, S = o.model.seq_len;
  std::vector<StepMetrics> out;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < B; ++m) {
      const Sequences batch = step_sequences(tokens, o.seed, step, m * mb, mb, S);
      const auto logits = model.forward(long_tensor(batch.inputs, mb, S));
      const auto loss = language_model_loss(logits, long_tensor(batch.targets, mb, S)) / B;
      loss.backward();
      loss_sum += loss.item<double>();
    }
    double norm2 = 0;
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters) {
      grads.push_back(p.grad());
      norm2 += p.grad().pow(2).sum().item<double>();
    }
    clip(grads, std::sqrt(norm2), o.clip_norm);
    optimizer.step();
    out.push_back({step, loss_sum, static_cast<std::int64_t>(step + 1) * B * mb,
                   std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
  }
  return out;
}

namespace {

// Where every node of the plan sits.
struct Worker {
  int pipeline = 0;
  int position = 0;
  int layer_begin = 0, layer_end = 0;  // the node's stages, contiguous
};

std::vector<Worker> workers_of(const Plan& plan) {
  std::vector<Worker> out;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    for (std::size_t r = 0; r < pipeline.nodes.size(); ++r) {
      Worker w{static_cast<int>(p), static_cast<int>(r), INT32_MAX, -1};
      for (const auto& st : pipeline.stages) {
        if (st.node != static_cast<int>(r)) continue;
        if (st.gpus != 1) throw InputError("plan: tensor-parallel stages (gpus > 1) are not run by oobleck-run yet");
        w.layer_begin = std::min(w.layer_begin, st.layer_begin);
        w.layer_end = std::max(w.layer_end, st.layer_end);
      }
      if (w.layer_end < 0) throw InputError("plan: node " + pipeline.nodes[r] + " holds no stage");
      out.push_back(w);
    }
  }
  return out;
}

// A gradient tensor's sharing label: the layer, or -1 for the tied weight.
constexpr int kTied = -1;

class PipelineWorker {
 public:
  PipelineWorker(const std::vector<std::uint16_t>& tokens, const TrainOptions& o, const Plan& plan, int rank,
                 const std::string& master_addr, int port)
      : tokens_(tokens), o_(o), plan_(plan), rank_(rank), all_(workers_of(plan)), me_(all_.at(rank)) {
    // On one machine everything stays on loopback; across machines Gloo
    // binds to this host's own address.
    bind_host_ = master_addr == "127.0.0.1" || master_addr == "localhost" ? "127.0.0.1" : "";
    const int world = static_cast<int>(all_.size());
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = false;
    store_options.timeout = std::chrono::seconds(120);
    store_ = c10::make_intrusive<c10d::TCPStore>(master_addr, store_options);
    world_ = group("world", rank_, world);
    for (int l = me_.layer_begin; l < me_.layer_end; ++l) layers_.push_back(make_layer(o.model, l, o.seed));
    last_layer_ = o.model.layers + 1;
    build_gradient_groups();
    std::vector<torch::Tensor> parameters;
    for (auto& layer : layers_) {
      for (auto& p : layer->parameters()) parameters.push_back(p);
    }
    optimizer_ = std::make_unique<torch::optim::AdamW>(make_optimizer(parameters, o));
    // Microbatches of this pipeline within the global batch.
    for (int p = 0; p < me_.pipeline; ++p) first_microbatch_ += plan.pipelines[p].microbatches;
    microbatches_ = plan.pipelines[me_.pipeline].microbatches;
    stages_ = static_cast<int>(plan.pipelines[me_.pipeline].nodes.size());
  }

  WorkerResult run() {
    WorkerResult out;
    for (int step = 0; step < o_.steps; ++step) {
      recording_ = step == o_.steps - 1;  // the last step: warmed up
      if (recording_) world_->barrier();
      const auto start = Clock::now();
      step_start_ms_ = now_ms();
      optimizer_->zero_grad();
      const double local_loss = one_f_one_b(step);
      const double sync_start = now_ms();
      synchronise_gradients();
      const double step_start = now_ms();
      optimizer_->step();
      if (recording_) {
        sync_ms_ = step_start - sync_start;
        optimizer_ms_ = now_ms() - step_start;
        record('O', 0, step_start, now_ms());
      }
      auto loss = torch::tensor({local_loss}, torch::kFloat64);
      world_->allreduce_sum(loss);
      out.metrics.push_back({step, loss.item<double>(),
                             static_cast<std::int64_t>(step + 1) * plan_.global_microbatches * o_.microbatch_size,
                             std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
    }
    publish_timeline();
    world_->barrier();
    if (rank_ == 0) {
      collect_timelines(out);
    } else {
      out.metrics.clear();
    }
    return out;
  }

 private:
  // CLOCK_MONOTONIC: one time base for every process on this machine.
  static double now_ms() {
    return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
  }
  void record(char kind, int index, double start, double end) {
    if (recording_) ops_.push_back({kind, index, start, end});
  }

  // This worker's last step, for rank 0.
  void publish_timeline() {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : ops_) ops.push_back({std::string(1, op.kind), op.index, op.start_ms, op.end_ms});
    const std::string text = nlohmann::json{{"step_start_ms", step_start_ms_},
                                            {"compute_ms", compute_ms_},
                                            {"wait_ms", wait_ms_},
                                            {"sync_ms", sync_ms_},
                                            {"optimizer_ms", optimizer_ms_},
                                            {"ops", ops}}
                                 .dump();
    store_->set("timeline/" + std::to_string(rank_), std::vector<std::uint8_t>(text.begin(), text.end()));
  }

  void collect_timelines(WorkerResult& out) {
    std::vector<nlohmann::json> timelines;
    double origin = 1e300;
    for (int r = 0; r < static_cast<int>(all_.size()); ++r) {
      const auto bytes = store_->get("timeline/" + std::to_string(r));
      timelines.push_back(nlohmann::json::parse(std::string(bytes.begin(), bytes.end())));
      origin = std::min(origin, timelines.back()["step_start_ms"].get<double>());
    }
    using nlohmann::ordered_json;
    ordered_json events = ordered_json::array();
    auto meta = [&](const char* what, int pid, int tid, const std::string& name) {
      ordered_json e = {{"name", what}, {"ph", "M"}, {"pid", pid}};
      if (tid >= 0) e["tid"] = tid;
      e["args"] = {{"name", name}};
      events.push_back(std::move(e));
    };
    std::ostringstream summary;
    summary << "per-stage timing of the last step (ms):\n"
            << "  pipeline  stage  node          layers     compute     waiting   grad sync   optimizer\n";
    for (std::size_t p = 0; p < plan_.pipelines.size(); ++p) {
      const Pipeline& pipeline = plan_.pipelines[p];
      meta("process_name", static_cast<int>(p) + 1, -1,
           "pipeline " + std::to_string(p) + " (" + std::to_string(pipeline.nodes.size()) + " nodes, " +
               std::to_string(pipeline.microbatches) + " microbatches)");
    }
    for (int r = 0; r < static_cast<int>(all_.size()); ++r) {
      const Worker& w = all_[r];
      const auto& t = timelines[r];
      const int pid = w.pipeline + 1, tid = w.position;
      const std::string node = plan_.pipelines[w.pipeline].nodes[w.position];
      meta("thread_name", pid, tid,
           "stage " + std::to_string(w.position) + ": layers " + std::to_string(w.layer_begin) + "-" +
               std::to_string(w.layer_end - 1) + " on " + node + " (1 GPUs)");
      for (const auto& op : t["ops"]) {
        const std::string kind = op[0];
        const std::string name = kind == "O" ? "optimizer" : kind + std::to_string(op[1].get<int>());
        events.push_back({{"name", name},
                          {"cat", kind == "O" ? "communication" : "compute"},
                          {"ph", "X"},
                          {"ts", (op[2].get<double>() - origin) * 1000.0},
                          {"dur", (op[3].get<double>() - op[2].get<double>()) * 1000.0},
                          {"pid", pid},
                          {"tid", tid}});
      }
      char line[256];
      std::snprintf(line, sizeof line, "  %8d  %5d  %-12s  [%3d,%3d)  %10.2f  %10.2f  %10.2f  %10.2f\n", w.pipeline,
                    w.position, node.c_str(), w.layer_begin, w.layer_end, t["compute_ms"].get<double>(),
                    t["wait_ms"].get<double>(), t["sync_ms"].get<double>(), t["optimizer_ms"].get<double>());
      summary << line;
    }
    ordered_json trace;
    trace["traceEvents"] = std::move(events);
    trace["displayTimeUnit"] = "ms";
    trace["otherData"] = {{"iteration_ms", out.metrics.empty() ? 0.0 : out.metrics.back().iteration_ms},
                          {"source", "oobleck-run"}};
    out.chrome_trace = trace.dump() + "\n";
    out.stage_summary = summary.str();
  }

  std::unique_ptr<Communicator> group(const std::string& name, int rank, int size) {
    return make_gloo_communicator(store_, name, rank, size, bind_host_);
  }

  [[nodiscard]] bool holds(const Worker& w, int layer) const { return w.layer_begin <= layer && layer < w.layer_end; }

  // Which ranks share each label, and one process group per distinct set of
  // ranks this worker is in (created in one global order, so no two workers
  // wait on each other's groups in opposite orders).
  void build_gradient_groups() {
    auto holders = [&](int label) {
      std::vector<int> ranks;
      for (int r = 0; r < static_cast<int>(all_.size()); ++r) {
        const bool in = label == kTied ? holds(all_[r], 0) || holds(all_[r], last_layer_) : holds(all_[r], label);
        if (in) ranks.push_back(r);
      }
      return ranks;
    };
    std::set<std::vector<int>> sets;
    for (int l = 0; l <= last_layer_; ++l) sets.insert(holders(l));
    sets.insert(holders(kTied));
    for (const auto& set : sets) {
      auto it = std::find(set.begin(), set.end(), rank_);
      if (it == set.end() || set.size() < 2) continue;
      std::string name = "grads";
      for (int r : set) name.append(":").append(std::to_string(r));
      groups_[set] = group(name, static_cast<int>(it - set.begin()), static_cast<int>(set.size()));
    }
    for (int l = me_.layer_begin; l < me_.layer_end; ++l) label_holders_[l] = holders(l);
    label_holders_[kTied] = holders(kTied);
  }

  torch::Tensor microbatch_tokens(int step, int m, bool targets) const {
    const Sequences s = step_sequences(tokens_, o_.seed, step, (first_microbatch_ + m) * o_.microbatch_size,
                                       o_.microbatch_size, o_.model.seq_len);
    return long_tensor(targets ? s.targets : s.inputs, o_.microbatch_size, o_.model.seq_len);
  }

  torch::Tensor forward_layers(torch::Tensor x) {
    for (auto& layer : layers_) x = layer->forward(x);
    return x;
  }

  // 1F1B over this pipeline's microbatches; returns the sum of the scaled
  // losses this worker computed (non-zero on last stages only).
  double one_f_one_b(int step) {
    const bool first = me_.position == 0, last = me_.position == stages_ - 1;
    const int M = microbatches_, B = plan_.global_microbatches;
    const int warmup = std::min(stages_ - me_.position - 1, M);
    const auto activation_shape = std::vector<std::int64_t>{o_.microbatch_size, o_.model.seq_len, o_.model.hidden};
    std::vector<torch::Tensor> inputs(M), outputs(M);
    std::vector<std::unique_ptr<PendingOp>> sends;
    double loss_sum = 0;
    auto forward = [&](int m) {
      torch::Tensor x;
      if (first) {
        x = microbatch_tokens(step, m, false);
      } else {
        auto buffer = torch::empty(activation_shape);
        const double wait_start = now_ms();
        world_->recv(buffer, rank_ - 1, 2 * m);
        if (recording_) wait_ms_ += now_ms() - wait_start;
        x = buffer.requires_grad_(true);
      }
      const double start = now_ms();
      auto y = forward_layers(x);
      if (last) {
        y = language_model_loss(y, microbatch_tokens(step, m, true)) / B;
        loss_sum += y.item<double>();
      }
      const double end = now_ms();
      record('F', m, start, end);
      if (recording_) compute_ms_ += end - start;
      if (!last) sends.push_back(world_->send(y.detach(), rank_ + 1, 2 * m));
      inputs[m] = x;
      outputs[m] = y;
    };
    auto backward = [&](int m) {
      double start = now_ms();
      if (last) {
        outputs[m].backward();
      } else {
        auto buffer = torch::empty(activation_shape);
        world_->recv(buffer, rank_ + 1, 2 * m + 1);
        const double arrived = now_ms();
        if (recording_) wait_ms_ += arrived - start;
        start = arrived;
        outputs[m].backward(buffer);
      }
      const double end = now_ms();
      record('B', m, start, end);
      if (recording_) compute_ms_ += end - start;
      if (!first) sends.push_back(world_->send(inputs[m].grad(), rank_ - 1, 2 * m + 1));
      inputs[m] = outputs[m] = torch::Tensor();
    };
    for (int m = 0; m < warmup; ++m) forward(m);
    for (int m = 0; m < M; ++m) {
      if (warmup + m < M) forward(warmup + m);
      backward(m);
    }
    for (auto& w : sends) w->wait();
    return loss_sum;
  }

  // Labels and tensors in a fixed order: every member of a group packs the
  // same labels in the same order.
  std::vector<std::pair<int, torch::Tensor>> labelled_gradients() {
    std::vector<std::pair<int, torch::Tensor>> out;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const int l = me_.layer_begin + static_cast<int>(i);
      for (const auto& item : layers_[i]->named_parameters()) {
        const bool tied = (l == 0 && item.key() == "token") || (l == last_layer_ && item.key() == "tied_token");
        out.emplace_back(tied ? kTied : l, item.value().grad());
      }
    }
    return out;
  }

  void synchronise_gradients() {
    const auto grads = labelled_gradients();
    // The tied weight: this worker's contributions summed first.
    torch::Tensor tied;
    for (const auto& [label, g] : grads) {
      if (label == kTied) tied = tied.defined() ? tied + g : g.clone();
    }
    std::map<std::vector<int>, std::vector<torch::Tensor>> by_set;
    for (const auto& [label, g] : grads) {
      if (label != kTied) by_set[label_holders_.at(label)].push_back(g);
    }
    if (tied.defined()) by_set[label_holders_.at(kTied)].push_back(tied);
    for (auto& [set, tensors] : by_set) {
      if (set.size() < 2) continue;
      auto flat = torch::cat([&] {
        std::vector<torch::Tensor> views;
        for (auto& t : tensors) views.push_back(t.reshape({-1}));
        return views;
      }());
      groups_.at(set)->allreduce_sum(flat);
      std::int64_t offset = 0;
      torch::NoGradGuard no_grad;
      for (auto& t : tensors) {
        t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> all;
    for (const auto& [label, g] : grads) {
      if (label == kTied) g.copy_(tied);
      all.push_back(g);
    }
    // Global norm, each label counted once: by its lowest-ranked holder.
    double norm2 = 0;
    bool tied_counted = false;
    for (const auto& [label, g] : grads) {
      if (label_holders_.at(label).front() != rank_) continue;
      if (label == kTied) {
        if (tied_counted) continue;
        tied_counted = true;
      }
      norm2 += g.pow(2).sum().item<double>();
    }
    auto total = torch::tensor({norm2}, torch::kFloat64);
    world_->allreduce_sum(total);
    clip(all, std::sqrt(total.item<double>()), o_.clip_norm);
  }

  const std::vector<std::uint16_t>& tokens_;
  const TrainOptions& o_;
  const Plan& plan_;
  int rank_;
  std::vector<Worker> all_;
  Worker me_;
  std::string bind_host_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::unique_ptr<Communicator> world_;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;
  std::map<int, std::vector<int>> label_holders_;
  std::vector<std::shared_ptr<GptLayer>> layers_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  struct OpTime {
    char kind;
    int index;
    double start_ms, end_ms;
  };
  bool recording_ = false;
  std::vector<OpTime> ops_;
  double step_start_ms_ = 0, compute_ms_ = 0, wait_ms_ = 0, sync_ms_ = 0, optimizer_ms_ = 0;
  int last_layer_ = 0;
  int first_microbatch_ = 0;
  int microbatches_ = 0;
  int stages_ = 0;
};

}  // namespace

WorkerResult train_worker(const std::vector<std::uint16_t>& tokens, const TrainOptions& options, const Plan& plan,
                          int rank, const std::string& master_addr, int port) {
  torch::manual_seed(options.seed);
  PipelineWorker worker(tokens, options, plan, rank, master_addr, port);
  return worker.run();
}

}  // namespace oobleck::executor
