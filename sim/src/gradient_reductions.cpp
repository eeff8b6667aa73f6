#include "gradient_reductions.h"

#include <algorithm>
#include <cstddef>
#include <map>

namespace oobleck::sim {

GradientReductions gradient_reductions(const CostModel& cost, const Plan& plan, const IterationOptions& options,
                                       const std::vector<std::vector<int>>& holders) {
  const int layers = cost.layers();
  std::vector<int> bucket(static_cast<std::size_t>(layers));
  if (options.gradient_sync == GradientSync::buckets) {
    std::vector<const std::vector<Stage>*> layouts;
    for (const auto& p : plan.pipelines) layouts.push_back(&p.stages);
    bucket = gradient_buckets(cost.profile(), options.gradient_bucket_bytes, layouts);
  } else {
    for (int l = 0; l < layers; ++l) bucket[static_cast<std::size_t>(l)] = l;
  }
  GradientReductions out;
  out.of_layer.assign(layers, -1);
  std::map<int, int> reduction_of_bucket;
  for (int l = 0; l < layers; ++l) {
    const bool tied_head = options.tied_embedding && l == layers - 1 && l > 0;
    if (tied_head) {
      out.of_layer[l] = out.of_layer[0];
    } else if (const auto it = reduction_of_bucket.find(bucket[static_cast<std::size_t>(l)]);
               it != reduction_of_bucket.end()) {
      out.of_layer[l] = it->second;
    } else {
      out.of_layer[l] = static_cast<int>(out.all.size());
      reduction_of_bucket[bucket[static_cast<std::size_t>(l)]] = out.of_layer[l];
      out.all.emplace_back();
    }
    Reduction& r = out.all[out.of_layer[l]];
    r.layers.push_back(l);
    r.bytes += static_cast<double>(cost.profile().layers[l].param_bytes) * options.gradient_scale;
    r.unfinished += static_cast<int>(holders[l].size());
    for (int h : holders[l]) {
      if (std::find(r.stages.begin(), r.stages.end(), h) == r.stages.end()) r.stages.push_back(h);
    }
  }
  return out;
}

}  // namespace oobleck::sim
