// The microbatch size as a planning choice (planner.h).
//
// A larger microbatch runs each layer more efficiently and halves the
// microbatches a pipeline must fill, but keeps more activations in flight
// and leaves fewer microbatches to split among the pipelines and to hide the
// pipeline's fill and drain. The search is exhaustive over the sizes given:
// each is a whole plan_cluster (templates and instantiation exact for that
// size), and iteration times compare directly because every size trains the
// same samples per iteration.

#include "oobleck/planner.h"

namespace oobleck {
namespace {

// The profiles must describe one model on one kind of node.
void check_alike(const std::vector<const Profile*>& profiles) {
  if (profiles.empty()) throw InputError("profiles: expected at least one");
  const Profile& first = *profiles.front();
  for (std::size_t i = 1; i < profiles.size(); ++i) {
    const Profile& p = *profiles[i];
    const auto differ = [&](const std::string& what) {
      throw InputError(p.origin + ": " + what + " differs from " + first.origin +
                       "'s: the profiles must be one model on one kind of node at different microbatch sizes");
    };
    if (p.model_name != first.model_name) differ("the model (" + p.model_name + ")");
    if (p.layers.size() != first.layers.size()) differ("the layer count (" + std::to_string(p.layers.size()) + ")");
    for (std::size_t l = 0; l < p.layers.size(); ++l) {
      if (p.layers[l].name != first.layers[l].name) differ("layer " + std::to_string(l) + "'s name");
    }
    if (p.hardware.gpus_per_node != first.hardware.gpus_per_node) differ("gpus_per_node");
    for (std::size_t j = 0; j < i; ++j) {
      if (profiles[j]->microbatch_size == p.microbatch_size) {
        throw InputError(p.origin + ": microbatch size " + std::to_string(p.microbatch_size) + " given twice (also " +
                         profiles[j]->origin + ")");
      }
    }
  }
}

}  // namespace

SizedClusterPlan plan_cluster_over_sizes(const std::vector<const Profile*>& profiles,
                                         const std::vector<std::string>& nodes, int fault_tolerance,
                                         int global_batch_samples, const Progress& progress,
                                         RecomputePolicy recompute, GradientSync gradient_sync,
                                         double gradient_bucket_bytes, int tensor_parallel_nodes,
                                         int pipelines_per_node, int interleave) {
  check_alike(profiles);
  if (global_batch_samples < 1) {
    throw InputError("global batch: expected at least 1 sample, got " + std::to_string(global_batch_samples));
  }
  SizedClusterPlan out;
  bool any_divides = false, found = false;
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const Profile& profile = *profiles[i];
    MicrobatchSizeChoice choice;
    choice.microbatch_size = profile.microbatch_size;
    if (global_batch_samples % profile.microbatch_size != 0) {
      choice.problem = "does not divide the batch of " + std::to_string(global_batch_samples);
      out.choices.push_back(std::move(choice));
      continue;
    }
    any_divides = true;
    choice.global_microbatches = global_batch_samples / profile.microbatch_size;
    if (progress) progress("microbatch size " + std::to_string(profile.microbatch_size));
    try {
      ClusterPlan cluster =
          plan_cluster(profile, nodes, fault_tolerance, choice.global_microbatches, 0, progress, recompute,
                       gradient_sync, gradient_bucket_bytes, tensor_parallel_nodes, pipelines_per_node, interleave);
      choice.planned = true;
      choice.iteration_ms = cluster.plan.iteration_ms;
      if (!found || choice.iteration_ms < out.cluster.plan.iteration_ms) {
        out.chosen = i;
        out.cluster = std::move(cluster);
        found = true;
      }
    } catch (const NoPlanError& e) {
      choice.problem = e.what();
    }
    out.choices.push_back(std::move(choice));
  }
  if (!any_divides) {
    throw InputError("global batch of " + std::to_string(global_batch_samples) +
                     " samples: no microbatch size given divides it");
  }
  if (!found) {
    std::string why = "no plan at any microbatch size:";
    for (const auto& c : out.choices) {
      if (!c.problem.empty()) why += " size " + std::to_string(c.microbatch_size) + ": " + c.problem + ";";
    }
    why.pop_back();
    throw NoPlanError(why);
  }
  return out;
}

}  // namespace oobleck
