#include "last_step.h"

#include <cstdio>
#include <sstream>

#include "oobleck/common/chrome_trace.h"
#include "oobleck/recovery/seats.h"

namespace oobleck::executor {

LastStepReport last_step_report(const Plan& plan, const std::map<int, protocol::StepTimeline>& timelines,
                                Milliseconds iteration_ms) {
  const std::vector<recovery::Seat> seats = recovery::seats_of(plan);
  double origin = 1e300;
  for (const auto& [rank, t] : timelines) origin = std::min(origin, t.step_start_ms);
  ChromeTrace trace;
  std::ostringstream summary;
  summary << "per-stage timing of the last step (ms):\n"
          << "  pipeline  stage  node          layers     compute     waiting   grad sync   optimizer\n";
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    trace.name_process(static_cast<int>(p) + 1, "pipeline " + std::to_string(p) + " (" +
                                                    std::to_string(pipeline.nodes.size()) + " nodes, " +
                                                    std::to_string(pipeline.microbatches) + " microbatches)");
  }
  for (const auto& [rank, t] : timelines) {
    if (rank >= static_cast<int>(seats.size())) continue;
    const recovery::Seat& s = seats[rank];
    const int pid = s.pipeline + 1, tid = s.position;
    const std::string node = plan.pipelines[s.pipeline].nodes[s.position];
    trace.name_thread(pid, tid,
                      "stage " + std::to_string(s.position) + ": layers " + std::to_string(s.layer_begin) + "-" +
                          std::to_string(s.layer_end - 1) + " on " + node + " (1 GPUs)");
    for (const auto& op : t.ops) {
      const bool optimizer = op.kind == 'O';
      trace.add_span(optimizer ? "optimizer" : std::string(1, op.kind) + std::to_string(op.index),
                     optimizer ? "communication" : "compute", pid, tid, op.start_ms - origin, op.end_ms - origin);
    }
    char line[256];
    std::snprintf(line, sizeof line, "  %8d  %5d  %-12s  [%3d,%3d)  %10.2f  %10.2f  %10.2f  %10.2f\n", s.pipeline,
                  s.position, node.c_str(), s.layer_begin, s.layer_end, t.compute_ms, t.wait_ms, t.sync_ms,
                  t.optimizer_ms);
    summary << line;
  }
  return {trace.to_json({{"iteration_ms", iteration_ms}, {"source", std::string("oobleck-run")}}), summary.str()};
}

}  // namespace oobleck::executor
