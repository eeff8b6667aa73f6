// A layer as a worker holds it: the module and its own AdamW state. One
// optimizer per layer is the same arithmetic as one over the whole model
// (AdamW works parameter by parameter), and lets a layer move between
// workers whole: weights, both moments and the step count.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "oobleck/executor/gpt.h"
#include "oobleck/executor/train.h"

namespace oobleck::executor {

struct HeldLayer {
  std::shared_ptr<GptLayer> module;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  TensorShard shard;
};

// Shard `shard` of layer `index` as training starts: weights from (seed,
// index), no optimizer state yet.
[[nodiscard]] HeldLayer initial_layer(const TrainOptions& options, int index, TensorShard shard = {});

// AdamW on layers [begin, end) of `layers`, each parameter that has a
// gradient. On a CUDA device with libtorch 2 or later (use_fused_kernels),
// one fused kernel (aten's _fused_adamw_) updates all of them at once, per
// element the update torch::optim::AdamW makes, in place of a dozen kernels
// per parameter; elsewhere each layer's own optimizer steps.
void step_optimizers(std::map<int, HeldLayer>& layers, int begin, int end);

// What two shards of layer `index` have in common, weights and optimizer
// state (both moments and the step count), copied from `from` into `to`.
void copy_layer_overlap(const HeldLayer& from, HeldLayer& to, const ModelConfig& model, int index);

// Weights and optimizer state as bytes (libtorch's archive format), and back
// into a layer built by initial_layer. Exact: the bytes are the tensors'.
[[nodiscard]] std::string serialize_layer(const HeldLayer& layer);
void deserialize_layer(HeldLayer& layer, const std::string& bytes);

// The same state packed raw, for snapshots and copies between workers,
// where libtorch's archive (a zip of pickles) costs far more than the
// copy itself: a header (magic "OOBLKST1", the parameter count, and per
// parameter its element count, type, whether it has optimizer state and
// its step count), then per parameter its weights and, with state, both
// AdamW moments, as the tensors' bytes. Only a layer built the same way
// (same index, same shard) reads it back.
[[nodiscard]] std::size_t packed_layer_bytes(const HeldLayer& layer);
// Packs into `out`, which has packed_layer_bytes(layer) bytes. A tensor on
// a GPU is copied by `device_to_host` where one is given (it may return
// before the bytes land: the caller waits for them), else by libtorch.
using DeviceToHost = std::function<void(const void* device_address, std::size_t bytes, char* out)>;
void pack_layer_into(const HeldLayer& layer, char* out, const DeviceToHost& device_to_host = {});
[[nodiscard]] std::string pack_layer(const HeldLayer& layer);
[[nodiscard]] bool is_packed_layer(std::string_view bytes);
// Throws std::runtime_error when the bytes do not fit the layer.
void unpack_layer(HeldLayer& layer, std::string_view bytes);

}  // namespace oobleck::executor
