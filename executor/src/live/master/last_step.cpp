#include "last_step.h"

#include <cstdio>
#include <sstream>

#include "oobleck/common/chrome_trace.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {

LastStepReport last_step_report(const Plan& plan, int gpus_per_node,
                                const std::map<int, protocol::StepTimeline>& timelines, Milliseconds iteration_ms) {
  const std::vector<recovery::WorkerSeat> seats = recovery::worker_seats(plan, gpus_per_node);
  double origin = 1e300;
  for (const auto& [rank, t] : timelines) origin = std::min(origin, t.step_start_ms);
  ChromeTrace trace;
  std::ostringstream summary;
  summary << "per-stage timing of the last step (ms):\n"
          << "  pipeline  stage  shard  node          GPU  layers     compute   (TP sync)     waiting   grad sync   "
             "optimizer\n";
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    trace.name_process(static_cast<int>(p) + 1, "pipeline " + std::to_string(p) + " (" +
                                                    std::to_string(pipeline.nodes.size()) + " nodes, " +
                                                    std::to_string(pipeline.microbatches) + " microbatches)");
  }
  for (const auto& [rank, t] : timelines) {
    if (rank >= static_cast<int>(seats.size())) continue;
    const recovery::WorkerSeat& s = seats[static_cast<std::size_t>(rank)];
    const int pid = s.pipeline + 1, tid = s.stage * gpus_per_node + s.shard;
    const std::string node = plan.pipelines[static_cast<std::size_t>(s.pipeline)].nodes[static_cast<std::size_t>(s.node_position)];
    const std::string shard =
        s.degree == 1 ? "" : ", shard " + std::to_string(s.shard) + " of " + std::to_string(s.degree);
    trace.name_thread(pid, tid,
                      "stage " + std::to_string(s.stage) + shard + ": layers " + std::to_string(s.layer_begin) + "-" +
                          std::to_string(s.layer_end - 1) + " on " + node + " GPU " + std::to_string(s.gpu));
    for (const auto& op : t.ops) {
      const bool shards = op.kind == 'T' || op.kind == 't';
      const std::string name = op.kind == 'O' ? "optimizer"
                               : shards       ? std::string("TP all-reduce ") + (op.kind == 'T' ? "F" : "B") +
                                              std::to_string(op.index)
                                              : std::string(1, op.kind) + std::to_string(op.index);
      trace.add_span(name, op.kind == 'F' || op.kind == 'B' ? "compute" : "communication", pid, tid,
                     op.start_ms - origin, op.end_ms - origin);
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %8d  %5d  %2d/%-2d  %-12s  %3d  [%3d,%3d)  %10.2f  %10.2f  %10.2f  %10.2f  %10.2f\n", s.pipeline,
                  s.stage, s.shard, s.degree, node.c_str(), s.gpu, s.layer_begin, s.layer_end, t.compute_ms,
                  t.tensor_parallel_ms, t.wait_ms, t.sync_ms, t.optimizer_ms);
    summary << line;
  }
  return {trace.to_json({{"iteration_ms", iteration_ms}, {"source", std::string("oobleck-run")},
                        {"gpus_per_node", static_cast<double>(gpus_per_node)}}), summary.str()};
}

}  // namespace oobleck::executor
