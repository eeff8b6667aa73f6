#include "layer_state.h"

#include <torch/version.h>

#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
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

// An optimizer state made before the first step, to be filled in.
torch::optim::AdamWParamState& make_adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& parameter) {
  auto fresh = std::make_unique<torch::optim::AdamWParamState>();
  fresh->exp_avg(torch::zeros_like(parameter));
  fresh->exp_avg_sq(torch::zeros_like(parameter));
  auto& made = *fresh;
  auto& states = optimizer.state();
  states[state_key(states, parameter)] = std::move(fresh);
  return made;
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

void step_optimizers(std::map<int, HeldLayer>& layers, int begin, int end) {
  const auto first = layers.find(begin);
  if (first == layers.end() || begin >= end) return;
  if (!use_fused_kernels(first->second.module->parameters().front().device())) {
    for (int l = begin; l < end; ++l) layers.at(l).optimizer->step();
    return;
  }
#if TORCH_VERSION_MAJOR >= 2
  torch::NoGradGuard no_grad;
  // Parameters grouped by their step count (a layer copied in from another
  // worker can be at another step) and their options.
  struct Group {
    std::vector<torch::Tensor> parameters, grads, exp_avgs, exp_avg_sqs;
  };
  using Key = std::tuple<std::int64_t, double, double, double, double, double>;
  std::map<Key, Group> groups;
  for (int l = begin; l < end; ++l) {
    auto& optimizer = *layers.at(l).optimizer;
    for (auto& group : optimizer.param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      if (o.amsgrad()) throw std::logic_error("the fused AdamW step has no AMSGrad");
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto* state = adamw_state(optimizer, p);
        if (state == nullptr) state = &make_adamw_state(optimizer, p);
        state->step(state->step() + 1);
        auto& g = groups[Key{state->step(), o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(),
                             o.eps()}];
        g.parameters.push_back(p);
        g.grads.push_back(p.grad());
        g.exp_avgs.push_back(state->exp_avg());
        g.exp_avg_sqs.push_back(state->exp_avg_sq());
      }
    }
  }
  for (auto& [key, g] : groups) {
    const auto& [step, lr, beta1, beta2, weight_decay, eps] = key;
    const auto step_tensor =
        torch::full({}, static_cast<double>(step), g.parameters.front().options().dtype(torch::kFloat32));
    const std::vector<torch::Tensor> steps(g.parameters.size(), step_tensor);
    at::_fused_adamw_(g.parameters, g.grads, g.exp_avgs, g.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                      weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/{}, /*found_inf=*/{});
  }
#endif
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
    if (state == nullptr) state = &make_adamw_state(*to.optimizer, item.value());
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

// ------------------------------------------------------------------ packed

namespace {

constexpr char kPackMagic[8] = {'O', 'O', 'B', 'L', 'K', 'S', 'T', '1'};

struct PackedParameter {  // the header's entry of one parameter
  std::int64_t numel = 0;
  std::int64_t step = 0;
  std::int32_t scalar_type = 0;
  std::int32_t has_state = 0;
};
static_assert(sizeof(PackedParameter) == 24);

std::size_t header_bytes(std::size_t parameters) { return sizeof kPackMagic + 8 + parameters * sizeof(PackedParameter); }

std::size_t tensor_bytes(const torch::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

// The tensor's bytes into `out`; from the device on a GPU. A CPU tensor
// is copied by memcpy: snapshots are packed on a thread of their own, and
// a libtorch copy there would start an OpenMP team of its own beside the
// training thread's.
char* copy_out(const torch::Tensor& t, char* out, const DeviceToHost& device_to_host) {
  if (t.is_cpu() && t.is_contiguous()) {
    std::memcpy(out, t.data_ptr(), tensor_bytes(t));
  } else if (device_to_host && t.is_cuda() && t.is_contiguous()) {
    device_to_host(t.data_ptr(), tensor_bytes(t), out);
  } else {
    torch::from_blob(out, {t.numel()}, t.options().device(torch::kCPU)).copy_(t.reshape({-1}));
  }
  return out + tensor_bytes(t);
}

const char* copy_in(torch::Tensor t, const char* in) {
  if (t.is_cpu() && t.is_contiguous()) {
    std::memcpy(t.data_ptr(), in, tensor_bytes(t));
  } else {
    t.copy_(torch::from_blob(const_cast<char*>(in), t.sizes(), t.options().device(torch::kCPU)));
  }
  return in + tensor_bytes(t);
}

}  // namespace

std::size_t packed_layer_bytes(const HeldLayer& layer) {
  const auto parameters = layer.module->parameters();
  std::size_t total = header_bytes(parameters.size());
  for (const auto& p : parameters) total += tensor_bytes(p) * (adamw_state(*layer.optimizer, p) ? 3 : 1);
  return total;
}

void pack_layer_into(const HeldLayer& layer, char* out, const DeviceToHost& device_to_host) {
  torch::NoGradGuard no_grad;
  const auto parameters = layer.module->parameters();
  std::memcpy(out, kPackMagic, sizeof kPackMagic);
  const std::int64_t count = static_cast<std::int64_t>(parameters.size());
  std::memcpy(out + sizeof kPackMagic, &count, 8);
  char* entry = out + sizeof kPackMagic + 8;
  char* data = out + header_bytes(parameters.size());
  for (const auto& p : parameters) {
    const auto* state = adamw_state(*layer.optimizer, p);
    const PackedParameter header{p.numel(), state ? state->step() : 0, static_cast<std::int32_t>(p.scalar_type()),
                                 state ? 1 : 0};
    std::memcpy(entry, &header, sizeof header);
    entry += sizeof header;
    data = copy_out(p, data, device_to_host);
    if (!state) continue;
    data = copy_out(state->exp_avg(), data, device_to_host);
    data = copy_out(state->exp_avg_sq(), data, device_to_host);
  }
}

std::string pack_layer(const HeldLayer& layer) {
  std::string out(packed_layer_bytes(layer), '\0');
  pack_layer_into(layer, out.data());
  return out;
}

bool is_packed_layer(std::string_view bytes) {
  return bytes.size() >= sizeof kPackMagic && std::memcmp(bytes.data(), kPackMagic, sizeof kPackMagic) == 0;
}

void unpack_layer(HeldLayer& layer, std::string_view bytes) {
  torch::NoGradGuard no_grad;
  const auto parameters = layer.module->parameters();
  const auto misfit = [&](const std::string& what) {
    return std::runtime_error("packed layer state does not fit the layer: " + what);
  };
  if (!is_packed_layer(bytes)) throw misfit("no header");
  std::int64_t count = 0;
  if (bytes.size() < header_bytes(0)) throw misfit("truncated header");
  std::memcpy(&count, bytes.data() + sizeof kPackMagic, 8);
  if (count != static_cast<std::int64_t>(parameters.size())) {
    throw misfit(std::to_string(count) + " parameters, the layer has " + std::to_string(parameters.size()));
  }
  if (bytes.size() < header_bytes(parameters.size())) throw misfit("truncated header");
  const char* entry = bytes.data() + sizeof kPackMagic + 8;
  const char* data = bytes.data() + header_bytes(parameters.size());
  const char* end = bytes.data() + bytes.size();
  for (const auto& p : parameters) {
    PackedParameter header;
    std::memcpy(&header, entry, sizeof header);
    entry += sizeof header;
    if (header.numel != p.numel() || header.scalar_type != static_cast<std::int32_t>(p.scalar_type())) {
      throw misfit("a parameter of " + std::to_string(header.numel) + " elements where the layer has " +
                   std::to_string(p.numel()));
    }
    const std::size_t need = tensor_bytes(p) * (header.has_state ? 3 : 1);
    if (static_cast<std::size_t>(end - data) < need) throw misfit("truncated data");
    data = copy_in(p, data);
    if (!header.has_state) continue;
    auto* state = adamw_state(*layer.optimizer, p);
    if (state == nullptr) state = &make_adamw_state(*layer.optimizer, p);
    state->step(header.step);
    data = copy_in(state->exp_avg(), data);
    data = copy_in(state->exp_avg_sq(), data);
  }
  if (data != end) throw misfit("trailing bytes");
}

}  // namespace oobleck::executor
