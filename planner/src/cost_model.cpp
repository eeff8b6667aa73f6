// The planner's cost model (DESIGN.md, "The cost model"), with the two
// modelling choices documented in README.md:
//  * tensor parallelism without measurements: a layer at degree t computes
//    1/t of its work and all-reduces its output twice per pass inside the node
//    (Megatron-style: after attention and after the MLP). The all-reduce
//    part is kept apart as well, so the simulator can show it as ops of its
//    own while the totals the planner optimises stay the same;
//  * a tensor-parallel group over k whole nodes all-reduces hierarchically
//    (hierarchical_allreduce_ms: inside each node, then the shards across
//    the nodes on every GPU's card at once); unmeasured at its degree, a
//    layer's compute measured at a whole node divides further, and a layer
//    replicated there is replicated on the k nodes too;
//  * the gradient synchronisation of pipelines of one template ending
//    together: what of their layers' all-reduces runs after the last
//    backward (sync_tail_ms, gradient_sync.cpp); pipelines of several
//    templates side by side: synced_iteration.h; a whole pipeline's T(M)
//    and memory fit: pipeline_costs.cpp.
//  * full activation recomputation (Recompute::full) keeps, per microbatch in
//    flight, each layer's input whole on every GPU (1/t of it with sequence
//    parallelism), plus one layer's activations while its backward runs: per
//    GPU, state / t + in_flight x sum(inputs) + max(one layer's
//    activations on a GPU). Both terms grow with the stage, as the
//    template search's windows need. Its backward passes run the forward
//    first.
//  * selective recomputation (Recompute::selective) keeps all but the
//    attention cores' activations per microbatch, plus one layer's
//    attention activations while its backward runs; each backward runs the
//    layer's attention core first.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "oobleck/planner.h"

namespace oobleck {

namespace {
const TensorParallelTiming* measured(const LayerProfile& layer, int degree) {
  for (const auto& t : layer.tensor_parallel) {
    if (t.degree == degree) return &t;
  }
  return nullptr;
}

// A layer whose measured passes at some degree are no faster than at degree
// 1 was not split: every GPU computed it whole (an embedding or an LM head
// the executor replicates), so it has no tensor-parallel all-reduce. Both
// passes decide together, as a layer is split or not as a whole.
bool replicated(const LayerProfile& layer, const TensorParallelTiming& timing) {
  return timing.forward_ms >= layer.forward_ms && timing.backward_ms >= layer.backward_ms;
}

// Whether the profile records what one GPU of `degree` keeps of the layer.
bool recorded_activation(const LayerProfile& layer, int degree) {
  const auto* m = measured(layer, degree);
  return m != nullptr && m->activation_bytes > 0;
}
}  // namespace

CostModel::CostModel(const Profile& profile, int microbatches)
    : profile_(&profile), microbatches_(microbatches), optimizer_bytes_per_s_(profile.hardware.memory_bytes_per_s) {
  if (microbatches < 1) throw InputError("microbatches: expected at least 1, got " + std::to_string(microbatches));
  const int gpus = profile.hardware.gpus_per_node;
  if (gpus < 1) throw InputError(profile.origin + ": hardware.gpus_per_node: expected at least 1");
  for (int t = 1; t <= gpus; ++t) {
    if (gpus % t == 0) priced_degrees_.push_back(t);
  }
  for (int k = 2; k <= kMaxTensorParallelNodes; ++k) priced_degrees_.push_back(k * gpus);
  // Templates choose only the degrees the model's layers split over; the
  // others are priced all the same, for plans read from files.
  splitting_degrees_ = degrees_split_over(profile, priced_degrees_);
  for (const int t : splitting_degrees_) {
    if (t <= gpus) degrees_.push_back(t);
  }
  const int count = layers();
  // The stage sums below count replicated bytes once per GPU: within int64
  // for any profile whose bytes, over all layers and the GPUs of the most
  // nodes a stage may span, stay under 2^62 (the parse limits alone allow
  // more).
  long double held_at_most = 0;
  for (const auto& layer : profile.layers) {
    held_at_most += static_cast<long double>(layer.param_bytes) + layer.optimizer_bytes + layer.activation_bytes +
                    layer.output_bytes;
  }
  if (held_at_most * gpus * kMaxTensorParallelNodes >= static_cast<long double>(std::int64_t{1} << 62)) {
    throw InputError(profile.origin + ": layers: their bytes times " + std::to_string(kMaxTensorParallelNodes) +
                     " x hardware.gpus_per_node reach 2^62; expected a smaller profile");
  }
  forward_prefix_.assign(priced_degrees_.size(), std::vector<double>(count + 1, 0.0));
  forward_allreduce_prefix_ = forward_prefix_;
  backward_prefix_.fill(forward_prefix_);
  compute_prefix_.fill(forward_prefix_);
  backward_allreduce_prefix_.fill(forward_prefix_);
  layer_backward_.fill(PerDegreePrefix(priced_degrees_.size(), std::vector<double>(count, 0.0)));
  degree_slot_.assign(static_cast<std::size_t>(priced_degrees_.back()) + 1, -1);
  for (std::size_t d = 0; d < priced_degrees_.size(); ++d) degree_slot_[priced_degrees_[d]] = static_cast<int>(d);
  constexpr std::array kinds{Recompute::none, Recompute::selective, Recompute::full};
  for (std::size_t d = 0; d < priced_degrees_.size(); ++d) {
    for (int l = 0; l < count; ++l) {
      const double f = layer_forward_ms(l, priced_degrees_[d]);
      const double fa = layer_forward_allreduce_ms(l, priced_degrees_[d]);
      forward_prefix_[d][l + 1] = forward_prefix_[d][l] + f;
      forward_allreduce_prefix_[d][l + 1] = forward_allreduce_prefix_[d][l] + fa;
      for (std::size_t r = 0; r < kRecomputeKinds; ++r) {
        const double b = computed_backward_ms(l, priced_degrees_[d], kinds[r]);
        layer_backward_[r][d][l] = b;
        // The forward run again brings its own all-reduces; the attention core has none.
        const double ba = layer_backward_allreduce_ms(l, priced_degrees_[d]) + (kinds[r] == Recompute::full ? fa : 0.0);
        backward_prefix_[r][d][l + 1] = backward_prefix_[r][d][l] + b;
        compute_prefix_[r][d][l + 1] = compute_prefix_[r][d][l] + (f + b);
        backward_allreduce_prefix_[r][d][l + 1] = backward_allreduce_prefix_[r][d][l] + ba;
      }
    }
  }
  state_prefix_.assign(count + 1, 0);
  attention_activation_prefix_.assign(count + 1, 0);
  replicated_state_prefix_.assign(priced_degrees_.size(), std::vector<Bytes>(count + 1, 0));
  held_activation_prefix_ = replicated_state_prefix_;
  held_selective_activation_prefix_ = replicated_state_prefix_;
  for (int l = 0; l < count; ++l) {
    const auto& layer = profile.layers[l];
    if (layer.attention_activation_bytes > layer.activation_bytes) {
      throw InputError(profile.origin + ": layers[" + std::to_string(l) +
                       "].attention_core.activation_bytes: expected at most the layer's activation_bytes (" +
                       std::to_string(layer.activation_bytes) + ")");
    }
    state_prefix_[l + 1] = state_prefix_[l] + layer.param_bytes + layer.optimizer_bytes;
    attention_activation_prefix_[l + 1] = attention_activation_prefix_[l] + layer.attention_activation_bytes;
    for (std::size_t d = 0; d < priced_degrees_.size(); ++d) {
      const int t = priced_degrees_[d];
      const bool whole = layer_replicated(l, t);
      replicated_state_prefix_[d][l + 1] =
          replicated_state_prefix_[d][l] + (whole ? layer.param_bytes + layer.optimizer_bytes : 0);
      // A split layer's share unrecorded: its whole here, divided with the
      // stage's total (stage_memory_bytes), as it always was.
      const Bytes held = t > 1 && (whole || recorded_activation(layer, t))
                             ? t * layer_activation_bytes(l, t)
                             : layer.activation_bytes;
      const Bytes attention = whole ? t * layer.attention_activation_bytes : layer.attention_activation_bytes;
      held_activation_prefix_[d][l + 1] = held_activation_prefix_[d][l] + held;
      held_selective_activation_prefix_[d][l + 1] =
          held_selective_activation_prefix_[d][l] + std::max<Bytes>(0, held - attention);
    }
  }
  input_prefix_.assign(count + 1, 0);
  for (int l = 1; l < count; ++l) input_prefix_[l + 1] = input_prefix_[l] + profile.layers[l - 1].output_bytes;
  // Sparse tables of range maxima of one layer's bytes on one GPU
  // (`on_gpu(layer, degree)`).
  const auto range_max_tables = [&](const auto& on_gpu) {
    std::vector<std::vector<std::vector<Bytes>>> tables(priced_degrees_.size());
    for (std::size_t d = 0; d < priced_degrees_.size(); ++d) {
      std::vector<Bytes> one(count);
      for (int l = 0; l < count; ++l) one[l] = on_gpu(l, priced_degrees_[d]);
      auto& table = tables[d];
      table.push_back(std::move(one));
      for (int width = 2; width <= count; width *= 2) {
        const auto& below = table.back();
        std::vector<Bytes> level(count - width + 1);
        for (int l = 0; l + width <= count; ++l) level[l] = std::max(below[l], below[l + width / 2]);
        table.push_back(std::move(level));
      }
    }
    return tables;
  };
  working_max_ = range_max_tables([&](int l, int t) { return layer_activation_bytes(l, t); });
  // The attention core divides with the heads on a split layer.
  attention_working_max_ = range_max_tables([&](int l, int t) {
    const Bytes a = profile.layers[l].attention_activation_bytes;
    return layer_replicated(l, t) ? a : (a + t - 1) / t;
  });
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "none";
}

std::optional<Recompute> recompute_named(std::string_view name) {
  for (const auto r : {Recompute::none, Recompute::selective, Recompute::full}) {
    if (recompute_name(r) == name) return r;
  }
  return std::nullopt;
}

std::string_view recompute_policy_name(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::none:
      return "none";
    case RecomputePolicy::automatic:
      return "auto";
    case RecomputePolicy::selective:
      return "selective";
    case RecomputePolicy::full:
      return "full";
  }
  return "none";
}

std::optional<RecomputePolicy> recompute_policy_named(std::string_view name) {
  for (const auto p :
       {RecomputePolicy::none, RecomputePolicy::automatic, RecomputePolicy::selective, RecomputePolicy::full}) {
    if (recompute_policy_name(p) == name) return p;
  }
  return std::nullopt;
}

void CostModel::set_recompute(RecomputePolicy policy) {
  // Selective recomputation of a profile without attention cores would be
  // no recomputation under another name: auto leaves it out, and asking for
  // it alone is an error.
  const bool attention = attention_activation_prefix_.back() > 0;
  if (policy == RecomputePolicy::selective && !attention) {
    throw InputError(profile_->origin +
                     ": --recompute selective: the profile records no attention cores (layers' attention_core); "
                     "make it with oobleck-profile analytic or measure");
  }
  recompute_policy_ = policy;
  switch (policy) {
    case RecomputePolicy::none:
      recompute_choices_ = {Recompute::none};
      break;
    case RecomputePolicy::automatic:
      recompute_choices_ = attention ? std::vector{Recompute::none, Recompute::selective, Recompute::full}
                                     : std::vector{Recompute::none, Recompute::full};
      break;
    case RecomputePolicy::selective:
      recompute_choices_ = {Recompute::selective};
      break;
    case RecomputePolicy::full:
      recompute_choices_ = {Recompute::full};
      break;
  }
}

Bytes CostModel::working_bytes(int begin, int end, std::size_t d, Recompute recompute) const {
  if (end <= begin || recompute == Recompute::none) return 0;
  const auto& table = (recompute == Recompute::full ? working_max_ : attention_working_max_)[d];
  int level = 0;
  while ((2 << level) <= end - begin) ++level;
  return std::max(table[level][begin], table[level][end - (1 << level)]);
}

void CostModel::set_tensor_parallel_nodes(int nodes) {
  if (nodes < 1 || nodes > kMaxTensorParallelNodes) {
    throw InputError("tensor-parallel nodes: expected 1 to " + std::to_string(kMaxTensorParallelNodes) + ", got " +
                     std::to_string(nodes));
  }
  tensor_parallel_nodes_ = nodes;
  degrees_.clear();
  for (int t : splitting_degrees_) {
    if (t <= nodes * gpus_per_node()) degrees_.push_back(t);
  }
}

void CostModel::set_interleave(int chunks) {
  if (chunks < 1 || chunks > 64) throw InputError("interleave: expected 1 to 64 chunks a device, got " + std::to_string(chunks));
  interleave_ = chunks;
}

void CostModel::set_pipelines_per_node(int pipelines) {
  if (pipelines < 1 || gpus_per_node() % pipelines != 0) {
    throw InputError("pipelines per node: expected a divisor of the " + std::to_string(gpus_per_node()) +
                     " GPUs per node, got " + std::to_string(pipelines));
  }
  pipelines_per_node_ = pipelines;
}

int CostModel::degree_index(int degree) const {
  if (degree >= 1 && degree < static_cast<int>(degree_slot_.size()) && degree_slot_[degree] >= 0) {
    return degree_slot_[degree];
  }
  throw InputError("tensor-parallel degree " + std::to_string(degree) + " neither divides gpus_per_node " +
                   std::to_string(gpus_per_node()) + " nor is a multiple of it on at most " +
                   std::to_string(kMaxTensorParallelNodes) + " nodes");
}

// Beyond a node without a measurement at the degree, a layer is priced
// from what was measured at a whole node (else at degree 1): replicated
// there, replicated here; split, its compute there divided further, and
// its all-reduces over the nodes.
const TensorParallelTiming* CostModel::node_measurement(int layer, int degree) const {
  const int gpus = gpus_per_node();
  if (degree <= gpus || gpus == 1) return nullptr;
  return measured(profile_->layers[layer], gpus);
}

bool CostModel::layer_replicated(int layer, int degree) const {
  if (degree == 1) return false;
  const auto& l = profile_->layers[layer];
  if (const auto* m = measured(l, degree)) return replicated(l, *m);
  const auto* node = node_measurement(layer, degree);
  return node != nullptr && replicated(l, *node);
}

Milliseconds CostModel::estimated_pass_ms(int layer, int degree, bool forward) const {
  const auto& l = profile_->layers[layer];
  const Milliseconds whole = forward ? l.forward_ms : l.backward_ms;
  if (const auto* node = node_measurement(layer, degree)) {
    const Milliseconds at_node = forward ? node->forward_ms : node->backward_ms;
    if (replicated(l, *node)) return whole;
    const int gpus = gpus_per_node();
    const Milliseconds compute = at_node - std::min(output_allreduces_ms(layer, gpus), at_node);
    return compute * gpus / degree + output_allreduces_ms(layer, degree);
  }
  return whole / degree + output_allreduces_ms(layer, degree);
}

Bytes CostModel::layer_activation_bytes(int layer, int degree) const {
  const auto& l = profile_->layers[layer];
  if (degree == 1) return l.activation_bytes;
  if (const auto* m = measured(l, degree); m != nullptr && m->activation_bytes > 0) return m->activation_bytes;
  return layer_replicated(layer, degree) ? l.activation_bytes : (l.activation_bytes + degree - 1) / degree;
}

Milliseconds CostModel::output_allreduces_ms(int layer, int degree) const {
  return 2 * tensor_allreduce_ms(static_cast<double>(profile_->layers[layer].output_bytes), degree);
}

Milliseconds CostModel::layer_forward_ms(int layer, int degree) const {
  const auto& l = profile_->layers[layer];
  if (degree == 1) return l.forward_ms;
  if (const auto* m = measured(l, degree)) return m->forward_ms;
  return estimated_pass_ms(layer, degree, true);
}

Milliseconds CostModel::layer_attention_forward_ms(int layer, int degree) const {
  const Milliseconds whole = profile_->layers[layer].attention_forward_ms;
  return layer_replicated(layer, degree) ? whole : whole / degree;
}

Milliseconds CostModel::layer_backward_ms(int layer, int degree, Recompute recompute) const {
  if (degree >= 1 && degree < static_cast<int>(degree_slot_.size()) && degree_slot_[degree] >= 0) {
    return layer_backward_[static_cast<std::size_t>(recompute)][degree_slot_[degree]][layer];
  }
  return computed_backward_ms(layer, degree, recompute);
}

Milliseconds CostModel::computed_backward_ms(int layer, int degree, Recompute recompute) const {
  const double again = recompute == Recompute::full        ? layer_forward_ms(layer, degree)
                       : recompute == Recompute::selective ? layer_attention_forward_ms(layer, degree)
                                                           : 0.0;
  const auto& l = profile_->layers[layer];
  if (degree == 1) return again + l.backward_ms;
  if (const auto* m = measured(l, degree)) return again + m->backward_ms;
  return again + estimated_pass_ms(layer, degree, false);
}

// Measured totals include the all-reduces but do not say how much of them:
// the estimate stands for that part, never more than the total it is in.
Milliseconds CostModel::layer_forward_allreduce_ms(int layer, int degree) const {
  const auto& l = profile_->layers[layer];
  if (degree == 1) return 0;
  if (const auto* m = measured(l, degree)) {
    return replicated(l, *m) ? 0 : std::min(output_allreduces_ms(layer, degree), m->forward_ms);
  }
  return layer_replicated(layer, degree) ? 0 : output_allreduces_ms(layer, degree);
}

Milliseconds CostModel::layer_backward_allreduce_ms(int layer, int degree) const {
  const auto& l = profile_->layers[layer];
  if (degree == 1) return 0;
  if (const auto* m = measured(l, degree)) {
    return replicated(l, *m) ? 0 : std::min(output_allreduces_ms(layer, degree), m->backward_ms);
  }
  return layer_replicated(layer, degree) ? 0 : output_allreduces_ms(layer, degree);
}

Milliseconds CostModel::stage_compute_ms(int begin, int end, int degree, Recompute recompute) const {
  const auto& prefix = compute_prefix_[static_cast<std::size_t>(recompute)][degree_index(degree)];
  return prefix[end] - prefix[begin];
}

Milliseconds CostModel::stage_forward_ms(int begin, int end, int degree) const {
  const auto& prefix = forward_prefix_[degree_index(degree)];
  return prefix[end] - prefix[begin];
}

Milliseconds CostModel::stage_backward_ms(int begin, int end, int degree, Recompute recompute) const {
  const auto& prefix = backward_prefix_[static_cast<std::size_t>(recompute)][degree_index(degree)];
  return prefix[end] - prefix[begin];
}

Milliseconds CostModel::stage_forward_allreduce_ms(int begin, int end, int degree) const {
  const auto& prefix = forward_allreduce_prefix_[degree_index(degree)];
  return prefix[end] - prefix[begin];
}

Milliseconds CostModel::stage_backward_allreduce_ms(int begin, int end, int degree, Recompute recompute) const {
  const auto& prefix = backward_allreduce_prefix_[static_cast<std::size_t>(recompute)][degree_index(degree)];
  return prefix[end] - prefix[begin];
}

Milliseconds CostModel::transfer_ms(int boundary, bool same_node, int degree) const {
  const auto& hw = profile_->hardware;
  const double bytes = static_cast<double>(profile_->layers[boundary - 1].output_bytes);
  // A stage over several nodes sends on one node's cards: the stage after
  // it may be on one node, which receives on no more.
  const int cards = std::clamp(degree, 1, gpus_per_node());
  const double bytes_per_s = same_node ? hw.intra_node_bytes_per_s : hw.inter_node_bytes_per_s * cards;
  return bytes / bytes_per_s * 1000.0 + hw.latency_ms;
}

// Every GPU of the stage holds 1/degree of the split layers' state and all
// of the replicated ones', so the GPUs together hold split + degree x
// replicated, and each GPU that divided by degree (the same for all of
// them). The activations are those a microbatch in flight keeps, held
// alike (the constructor's held_activation_prefix_): with selective
// recomputation, all but the attention cores'.
std::pair<Bytes, Bytes> CostModel::stage_held_bytes(int begin, int end, int degree, Recompute recompute) const {
  const auto d = static_cast<std::size_t>(degree_index(degree));
  const auto held = [&](const std::vector<Bytes>& all, const std::vector<Bytes>& replicated) {
    return all[end] - all[begin] + (degree - 1) * (replicated[end] - replicated[begin]);
  };
  const auto& kept = recompute == Recompute::selective ? held_selective_activation_prefix_[d] : held_activation_prefix_[d];
  return {held(state_prefix_, replicated_state_prefix_[d]), kept[end] - kept[begin]};
}

// With sequence parallelism the hidden states between layers are split
// along the sequence, and full recomputation keeps each GPU's part.
Bytes CostModel::inputs_per_gpu(int begin, int end, int degree) const {
  const Bytes inputs = input_prefix_[end] - input_prefix_[begin];
  return profile_->sequence_parallel ? (inputs + degree - 1) / degree : inputs;
}

Bytes CostModel::stage_state_bytes_per_gpu(int begin, int end, int degree) const {
  const Bytes held = stage_held_bytes(begin, end, degree, Recompute::none).first;
  return (held + degree - 1) / degree;
}

Milliseconds CostModel::stage_optimizer_ms(int begin, int end, int degree) const {
  if (optimizer_bytes_per_s_ <= 0) return 0;
  return 2.0 * static_cast<double>(stage_state_bytes_per_gpu(begin, end, degree)) / optimizer_bytes_per_s_ * 1000.0;
}

// Per GPU, with W the most one layer's recomputed activations take on one
// GPU while its backward runs:
//   none and selective: ceil((state + in_flight x activations kept) / t) + W
//     (W = 0 without recomputation);
//   full: ceil(state / t) + in_flight x the layers' inputs (whole, or
//     ceil(1/t) of them with sequence parallelism) + W.
Bytes CostModel::stage_memory_bytes(int begin, int end, int degree, int in_flight, Recompute recompute) const {
  const auto [state, activation] = stage_held_bytes(begin, end, degree, recompute);
  const auto working = static_cast<long double>(
      working_bytes(begin, end, static_cast<std::size_t>(degree_index(degree)), recompute));
  // In long double: in_flight x activations can pass 2^63 for absurd M.
  long double per_gpu = 0;
  if (recompute == Recompute::full) {
    per_gpu = std::ceil(static_cast<long double>(state) / degree) +
              static_cast<long double>(in_flight) * static_cast<long double>(inputs_per_gpu(begin, end, degree)) +
              working;
  } else {
    const long double total =
        static_cast<long double>(state) + static_cast<long double>(in_flight) * static_cast<long double>(activation);
    per_gpu = std::ceil(total / degree) + working;
  }
  return per_gpu >= static_cast<long double>(INT64_MAX) ? INT64_MAX : static_cast<Bytes>(per_gpu);
}

int CostModel::stage_max_in_flight(int begin, int end, int degree, Recompute recompute) const {
  const auto [state, activation] = stage_held_bytes(begin, end, degree, recompute);
  const Bytes memory = profile_->hardware.gpu_memory_bytes;
  const Bytes working = working_bytes(begin, end, static_cast<std::size_t>(degree_index(degree)), recompute);
  if (recompute == Recompute::full) {
    const Bytes fixed = (state + degree - 1) / degree + working;
    if (fixed > memory) return 0;
    const Bytes inputs = inputs_per_gpu(begin, end, degree);
    if (inputs == 0) return INT_MAX;
    return static_cast<int>(std::min<Bytes>(INT_MAX, (memory - fixed) / inputs));
  }
  // ceil(x / t) + W <= C holds exactly when x <= t (C - W).
  if (working > memory) return 0;
  const Bytes capacity = static_cast<Bytes>(degree) * (memory - working);
  if (state > capacity) return 0;
  if (activation == 0) return INT_MAX;
  return static_cast<int>(std::min<Bytes>(INT_MAX, (capacity - state) / activation));
}

bool CostModel::stage_fits(int begin, int end, int degree, int in_flight, Recompute recompute) const {
  return stage_max_in_flight(begin, end, degree, recompute) >= in_flight;
}

}  // namespace oobleck
