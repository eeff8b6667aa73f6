// The gradient synchronisation across pipelines (README.md, "Cost model"):
// when each layer's gradient is ready, how the all-reduces queue on a
// stage's network interfaces, and the buckets they may go in.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck {

std::string_view gradient_sync_name(GradientSync sync) {
  switch (sync) {
    case GradientSync::per_layer:
      return "per-layer";
    case GradientSync::after_backward:
      return "after-backward";
    case GradientSync::buckets:
      return "buckets";
  }
  return "per-layer";
}

std::optional<GradientSync> gradient_sync_named(std::string_view name) {
  for (const auto s : {GradientSync::per_layer, GradientSync::after_backward, GradientSync::buckets}) {
    if (gradient_sync_name(s) == name) return s;
  }
  return std::nullopt;
}

void CostModel::set_gradient_bucket_bytes(double bytes) {
  if (!(bytes > 0) || !std::isfinite(bytes)) {
    throw InputError("gradient bucket bytes: expected a positive number, got " + std::to_string(bytes));
  }
  gradient_bucket_bytes_ = bytes;
}

std::vector<int> gradient_buckets(const Profile& profile, double bucket_bytes,
                                  const std::vector<const std::vector<Stage>*>& layouts) {
  const int layers = static_cast<int>(profile.layers.size());
  std::vector<char> cut(static_cast<std::size_t>(layers) + 1, 0);  // cut[l]: a stage begins at l
  cut[0] = 1;
  for (const auto* stages : layouts) {
    for (const Stage& st : *stages) cut[static_cast<std::size_t>(st.layer_begin)] = 1;
  }
  std::vector<int> out(static_cast<std::size_t>(layers), 0);
  int bucket = 0;
  double bytes = 0;
  for (int l = layers - 1; l >= 0; --l) {
    out[static_cast<std::size_t>(l)] = bucket;
    bytes += static_cast<double>(profile.layers[static_cast<std::size_t>(l)].param_bytes);
    if (bytes >= bucket_bytes || cut[static_cast<std::size_t>(l)]) {
      ++bucket;
      bytes = 0;
    }
  }
  return out;
}

Milliseconds CostModel::gradient_sync_ms(int pipelines) const {
  return gradient_allreduce_ms(static_cast<double>(profile_->layers.front().param_bytes), pipelines);
}

// The synchronisation a pipeline's backward passes cannot hide. In the drain
// of 1F1B stage 0's last backward ends at T; stage s + 1's ended before
// stage s began its own, one transfer earlier: e_0 = T, e_{s+1} = e_s - B_s
// - C_s (B_s: the stage's backward of one microbatch; C_s: the gradient's
// transfer between them). A stage's backward runs from its last layer down,
// so layer l of stage s is ready at e_s - B_s + sum_{l' >= l in s} b_l'.
// Each of the stage's t GPUs has its own network interface and all-reduces
// its 1/t of each layer among the `ranks` replicas, the layers in the order
// they became ready: finish = max(finish, ready_l) + allreduce(bytes_l / t).
// In buckets, each bucket is one all-reduce of its layers' bytes, ready
// with its first layer (the last its stage's backward reaches).
// The tail is the latest finish after T (0 if every all-reduce ends before
// T). This is the pipeline alone; where pipelines of several templates run
// side by side a layer waits for its slowest holder (synced_iteration.h,
// as `oobleck-sim iteration` plays it).
//
// With optimizer steps, stage s steps once both its backward and its
// all-reduces are done, at max(e_s, finish_s) + O_s, and the iteration's
// tail is the latest of these after T.
CostModel::Tail CostModel::tail(const std::vector<Stage>& stages, bool with_optimizer) const {
  Tail out;
  out.cost_ = this;
  out.with_optimizer_ = with_optimizer && optimizer_bytes_per_s_ > 0;
  const bool at_end = gradient_sync_ == GradientSync::after_backward;
  const bool buckets = gradient_sync_ == GradientSync::buckets;
  Milliseconds stage_end = 0;  // e_s - T
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    const Milliseconds backward = stage_backward_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
    Tail::StageEnd end{out.allreduces_.size(), 0, stage_end, 0};
    Milliseconds ready = at_end ? stage_end : stage_end - backward;
    double bucket = 0;  // bytes in the open bucket
    for (int l = st.layer_end - 1; l >= st.layer_begin; --l) {
      if (!at_end) ready += layer_backward_ms(l, st.gpus, st.recompute);
      bucket += static_cast<double>(profile_->layers[l].param_bytes);
      if (buckets && bucket < gradient_bucket_bytes_ && l > st.layer_begin) continue;
      out.allreduces_.push_back({ready, bucket / st.gpus});
      bucket = 0;
    }
    end.last = out.allreduces_.size();
    if (out.with_optimizer_) end.optimizer_ms = stage_optimizer_ms(st.layer_begin, st.layer_end, st.gpus);
    out.stages_.push_back(end);
    if (s + 1 < stages.size()) stage_end -= backward + transfer_ms(st.layer_end, st.node == stages[s + 1].node, st.gpus);
  }
  return out;
}

Milliseconds CostModel::Tail::ms(int ranks) const {
  if (ranks <= 1 && !with_optimizer_) return 0;
  // Without a measured table and with a pipeline a node, an all-reduce is
  // the ring's law: its terms in the rank count are taken out of the loop,
  // the same operations in the same order, so the same bits as
  // gradient_allreduce_ms (the composition search prices every template's
  // tail at every pipeline count it weighs).
  const Hardware& hw = cost_->profile_->hardware;
  const bool ring = hw.allreduce_table.empty() && cost_->pipelines_per_node_ == 1 && ranks > 1;
  const double k = ranks, ring_share = 2 * (k - 1) / k, ring_latency_ms = 2 * (k - 1) * hw.latency_ms;
  const double ring_bytes_per_s = hw.gradient_allreduce_bytes_per_s();
  const auto allreduce_ms = [&](double bytes) {
    return ring ? ring_share * bytes / ring_bytes_per_s * 1000.0 + ring_latency_ms
                : cost_->gradient_allreduce_ms(bytes, ranks);
  };
  Milliseconds tail = 0;
  for (const StageEnd& st : stages_) {
    Milliseconds finish = -std::numeric_limits<double>::infinity();
    for (std::size_t i = st.first; ranks > 1 && i < st.last; ++i) {
      finish = std::max(finish, allreduces_[i].ready_ms) + allreduce_ms(allreduces_[i].bytes);
    }
    if (with_optimizer_) finish = std::max(finish, st.end_ms) + st.optimizer_ms;
    tail = std::max(tail, finish);
  }
  return tail;
}

Milliseconds CostModel::sync_tail_ms(const std::vector<Stage>& stages, int ranks) const {
  if (ranks <= 1) return 0;  // (what Tail::ms says, without gathering)
  return tail(stages, false).ms(ranks);
}

Milliseconds CostModel::iteration_tail_ms(const std::vector<Stage>& stages, int ranks) const {
  return tail(stages, true).ms(ranks);
}

CostModel::Tail CostModel::iteration_tail(const std::vector<Stage>& stages) const { return tail(stages, true); }

Milliseconds CostModel::sync_tail_lower_bound_ms(int ranks) const {
  return gradient_allreduce_ms(static_cast<double>(profile_->layers.front().param_bytes) / gpus_per_node(), ranks);
}

}  // namespace oobleck
