#include "last_step.h"

#include <cstdio>
#include <sstream>

#include "oobleck/common/chrome_trace.h"
#include "plan_seats.h"

namespace oobleck::executor {

LastStepReport last_step_report(const Plan& plan, const std::map<int, nlohmann::json>& timelines,
                                Milliseconds iteration_ms) {
  const std::vector<Seat> seats = seats_of(plan);
  double origin = 1e300;
  for (const auto& [rank, t] : timelines) origin = std::min(origin, t.at("step_start_ms").get<double>());
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
    const Seat& s = seats[rank];
    const int pid = s.pipeline + 1, tid = s.position;
    const std::string node = plan.pipelines[s.pipeline].nodes[s.position];
    trace.name_thread(pid, tid,
                      "stage " + std::to_string(s.position) + ": layers " + std::to_string(s.layer_begin) + "-" +
                          std::to_string(s.layer_end - 1) + " on " + node + " (1 GPUs)");
    for (const auto& op : t.at("ops")) {
      const std::string kind = op[0];
      const bool optimizer = kind == "O";
      trace.add_span(optimizer ? "optimizer" : kind + std::to_string(op[1].get<int>()),
                     optimizer ? "communication" : "compute", pid, tid, op[2].get<double>() - origin,
                     op[3].get<double>() - origin);
    }
    char line[256];
    std::snprintf(line, sizeof line, "  %8d  %5d  %-12s  [%3d,%3d)  %10.2f  %10.2f  %10.2f  %10.2f\n", s.pipeline,
                  s.position, node.c_str(), s.layer_begin, s.layer_end, t.at("compute_ms").get<double>(),
                  t.at("wait_ms").get<double>(), t.at("sync_ms").get<double>(), t.at("optimizer_ms").get<double>());
    summary << line;
  }
  return {trace.to_json({{"iteration_ms", iteration_ms}, {"source", std::string("oobleck-run")}}), summary.str()};
}

}  // namespace oobleck::executor
