// A model of one's own: each pipeline layer a TorchScript module loaded from
// the file its manifest names (model_config.h). The module's parameters are
// registered as the layer's own (the same tensors), so everything that moves
// a layer's state (optimizer, snapshots, copies between workers) sees them
// as it sees a built-in layer's. The weights are the file's, whatever the
// seed: every process loading it starts from the same ones.
//
// Determinism: the modules run in eval mode (no dropout, as the built-in
// models have none) and with the graph executor's optimisations off, so a
// layer computes the same way on its first call and its hundredth, in any
// process (the profiling executor would otherwise specialise after a few
// calls). Buffers are constants: they are neither trained nor saved.
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include "layer_parts.h"

namespace oobleck::executor {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

torch::jit::Module load_module(const ScriptedLayerSpec& spec, const std::string& where) {
  torch::jit::setGraphExecutorOptimize(false);
  try {
    auto module = torch::jit::load(spec.file, torch::kCPU);
    module.eval();
    return module;
  } catch (const c10::Error& e) {
    throw InputError(spec.file + " (" + where + "): not a TorchScript module (" +
                     first_line(e.what_without_backtrace()) +
                     "); expected a file written by torch.jit.save, as tools/export_model.py writes them");
  }
}

class ScriptedLayer final : public GptLayer {
 public:
  ScriptedLayer(const ModelConfig& c, int index) {
    const auto& spec = c.scripted->layers.at(static_cast<std::size_t>(index));
    const std::string where = c.scripted->path + ": layers[" + std::to_string(index) + "]";
    module_ = load_module(spec, where);
    std::int64_t count = 0;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      register_parameter(scripted_parameter_name(p.name), p.value, /*requires_grad=*/true);
      count += p.value.numel();
    }
    // Registered so that moving the layer to a device moves them too.
    for (const auto& b : module_.named_buffers(/*recurse=*/true))
      register_buffer(scripted_parameter_name(b.name), b.value);
    // The last layer's copy of a tied weight is not counted in the manifest.
    const auto tied = tied_parameter_names(c);
    if (tied && index == pipeline_layers(c) - 1) {
      const auto params = named_parameters();
      const auto* copy = params.find(tied->second);
      if (copy == nullptr) {
        throw InputError(spec.file + " (" + where + "): has no parameter \"" + c.scripted->tied->second +
                         "\" for the tied weight");
      }
      count -= copy->numel();
    }
    if (tied && index == 0 && named_parameters().find(tied->first) == nullptr) {
      throw InputError(spec.file + " (" + where + "): has no parameter \"" + c.scripted->tied->first +
                       "\" for the tied weight");
    }
    if (count != spec.parameters) {
      throw InputError(spec.file + " (" + where + ".parameters): the module has " + std::to_string(count) +
                       " parameters, the manifest says " + std::to_string(spec.parameters));
    }
  }
  torch::Tensor forward(const torch::Tensor& input) override {
    auto output = module_.forward({input});
    if (!output.isTensor()) throw std::runtime_error("a TorchScript layer returned something other than a tensor");
    return output.toTensor();
  }

 private:
  torch::jit::Module module_;
};

std::vector<std::int64_t> actual_shape(const std::vector<std::int64_t>& declared, std::int64_t batch,
                                       std::int64_t seq) {
  std::vector<std::int64_t> out;
  for (auto size : declared) out.push_back(size == kBatchDim ? batch : size == kSeqDim ? seq : size);
  return out;
}

}  // namespace

std::shared_ptr<GptLayer> make_scripted_layer(const ModelConfig& config, int index) {
  return std::make_shared<ScriptedLayer>(config, index);
}

void check_scripted_model(const ModelConfig& c) {
  if (!is_scripted(c)) return;
  const std::int64_t batch = 2, seq = c.seq_len;
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::zeros({batch, seq}, torch::kLong);
  if (const auto tied = tied_parameter_names(c)) {
    const auto first = make_scripted_layer(c, 0)->named_parameters()[tied->first];
    const auto last = make_scripted_layer(c, pipeline_layers(c) - 1)->named_parameters()[tied->second];
    if (!first.sizes().equals(last.sizes()) || !torch::equal(first, last)) {
      throw InputError(c.scripted->path + ": tied: the first layer's \"" + c.scripted->tied->first +
                       "\" and the last layer's \"" + c.scripted->tied->second +
                       "\" differ; a tied weight starts "
                       "equal in both files");
    }
  }
  for (int i = 0; i < pipeline_layers(c); ++i) {
    const auto& spec = c.scripted->layers.at(static_cast<std::size_t>(i));
    const auto layer = make_scripted_layer(c, i);
    const std::string where = spec.file + " (" + c.scripted->path + ": layers[" + std::to_string(i) + "])";
    try {
      x = layer->forward(x);
    } catch (const std::exception& e) {
      throw InputError(where + ": fails on input " + shape_text(spec.input_shape) + " (" + first_line(e.what()) + ")");
    }
    const auto expected = actual_shape(spec.output_shape, batch, seq);
    const auto dtype = spec.output_dtype == "int64" ? torch::kLong : torch::kFloat32;
    if (!x.sizes().equals(expected) || x.scalar_type() != dtype) {
      std::vector<std::int64_t> got(x.sizes().begin(), x.sizes().end());
      throw InputError(where + ": output " + std::string(c10::toString(x.scalar_type())) + " " + shape_text(got) +
                       " for a microbatch of " + std::to_string(batch) + " x " + std::to_string(seq) +
                       ", but the manifest says " + spec.output_dtype + " " + shape_text(spec.output_shape));
    }
  }
}

}  // namespace oobleck::executor
