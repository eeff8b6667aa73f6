#include "layer_state.h"

#include <sstream>
#include <type_traits>

#include "train_common.h"

namespace oobleck::executor {

namespace {

// The optimizer's state of one parameter; its key is the tensor's address,
// spelled as text by libtorch 1.x and as a pointer by 2.x.
template <class StateMap>
auto state_key(const StateMap&, const torch::Tensor& parameter) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream out;
    out << parameter.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<typename StateMap::key_type>(parameter.unsafeGetTensorImpl());
  }
}

torch::optim::AdamWParamState* adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& parameter) {
  auto& states = optimizer.state();
  const auto it = states.find(state_key(states, parameter));
  return it == states.end() ? nullptr : static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

}  // namespace

HeldLayer initial_layer(const TrainOptions& options, int index, TensorShard shard) {
  HeldLayer out;
  out.module = make_layer(options.model, index, options.seed, shard);  // on the CPU: the same weights everywhere
  out.module->to(train_device(options));
  out.optimizer = std::make_unique<torch::optim::AdamW>(out.module->parameters(), adamw_options(options));
  out.shard = shard;
  return out;
}

void copy_layer_overlap(const HeldLayer& from, HeldLayer& to, const ModelConfig& model, int index) {
  torch::NoGradGuard no_grad;
  const auto sources = from.module->named_parameters();
  for (auto& item : to.module->named_parameters()) {
    const SplitLayout layout = split_layout(model, index, item.key());
    const torch::Tensor& source = sources[item.key()];
    copy_shard_overlap(source, from.shard, item.value(), to.shard, layout);
    const auto* source_state = adamw_state(*from.optimizer, source);
    if (source_state == nullptr) continue;  // no step taken yet
    auto* state = adamw_state(*to.optimizer, item.value());
    if (state == nullptr) {
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->exp_avg(torch::zeros_like(item.value()));
      fresh->exp_avg_sq(torch::zeros_like(item.value()));
      state = fresh.get();
      auto& states = to.optimizer->state();
      states[state_key(states, item.value())] = std::move(fresh);
    }
    state->step(source_state->step());
    auto exp_avg = state->exp_avg(), exp_avg_sq = state->exp_avg_sq();
    copy_shard_overlap(source_state->exp_avg(), from.shard, exp_avg, to.shard, layout);
    copy_shard_overlap(source_state->exp_avg_sq(), from.shard, exp_avg_sq, to.shard, layout);
  }
}

std::string serialize_layer(const HeldLayer& layer) {
  torch::serialize::OutputArchive weights, optimizer, whole;
  layer.module->save(weights);
  layer.optimizer->save(optimizer);
  whole.write("weights", weights);
  whole.write("optimizer", optimizer);
  std::ostringstream out;
  whole.save_to(out);
  return out.str();
}

void deserialize_layer(HeldLayer& layer, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive whole, weights, optimizer;
  // Onto the device the layer lives on (the bytes name the sender's).
  whole.load_from(in, layer.module->parameters().front().device());
  whole.read("weights", weights);
  whole.read("optimizer", optimizer);
  layer.module->load(weights);
  layer.optimizer->load(optimizer);
}

}  // namespace oobleck::executor
