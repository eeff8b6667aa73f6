// Plans a cluster with the installed oobleck library and plays one iteration
// of the plan in the simulator; prints what install-consumer.sh checks.
// Usage: plan_pipelines PROFILE NODES FAULT_TOLERANCE GLOBAL_MICROBATCHES
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "oobleck/planner.h"
#include "oobleck/sim/iteration.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s PROFILE NODES FAULT_TOLERANCE GLOBAL_MICROBATCHES\n", argv[0]);
    return 2;
  }
  try {
    const oobleck::Profile profile = oobleck::load_profile(argv[1]);
    const int nodes = std::atoi(argv[2]);
    const int fault_tolerance = std::atoi(argv[3]);
    const int global_microbatches = std::atoi(argv[4]);
    const oobleck::ClusterPlan result =
        oobleck::plan_cluster(profile, oobleck::numbered_nodes(nodes), fault_tolerance, global_microbatches);
    const oobleck::Plan& plan = result.plan;

    std::printf("layers %zu\n", profile.layers.size());
    std::printf("pipelines %zu\n", plan.pipelines.size());
    std::printf("spare_nodes %zu\n", plan.spare_nodes.size());
    int microbatches = 0;
    for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
      const oobleck::Pipeline& pipeline = plan.pipelines[i];
      microbatches += pipeline.microbatches;
      std::string stages;
      for (const oobleck::Stage& stage : pipeline.stages) {
        if (!stages.empty()) stages += ',';
        stages += std::to_string(stage.layer_begin);
        stages += '-';
        stages += std::to_string(stage.layer_end);
      }
      std::printf("pipeline %zu nodes %zu microbatches %d stages %s\n", i, pipeline.nodes.size(),
                  pipeline.microbatches, stages.c_str());
    }
    std::printf("microbatches %d\n", microbatches);

    const oobleck::CostModel cost(profile, plan.template_microbatches);
    const oobleck::sim::IterationResult played = oobleck::sim::simulate_iteration(cost, plan);
    std::printf("planned_ms %.3f simulated_ms %.3f\n", plan.iteration_ms, played.iteration_ms);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "plan_pipelines: %s\n", error.what());
    return 1;
  }
}
