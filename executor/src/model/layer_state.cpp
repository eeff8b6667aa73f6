#include "layer_state.h"

#include <sstream>

#include "train_common.h"

namespace oobleck::executor {

HeldLayer initial_layer(const TrainOptions& options, int index) {
  HeldLayer out;
  out.module = make_layer(options.model, index, options.seed);  // on the CPU: the same weights everywhere
  out.module->to(train_device(options));  out.optimizer = std::make_unique<torch::optim::AdamW>(out.module->parameters(), adamw_options(options));
  return out;
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
