// The iteration's outputs: the per-stage summary as JSON and the schedule as
// a Chrome trace.
#include <nlohmann/json.hpp>

#include "oobleck/common/chrome_trace.h"
#include "oobleck/sim/iteration.h"

namespace oobleck::sim {

std::string iteration_to_json(const IterationResult& result, const Plan& plan) {
  using nlohmann::ordered_json;
  ordered_json out;
  out["format"] = "oobleck.iteration.v1";
  out["iteration_ms"] = result.iteration_ms;
  out["last_backward_ms"] = result.last_backward_ms;
  out["sync_exposed_ms"] = result.sync_exposed_ms;
  out["planner_iteration_ms"] = plan.iteration_ms;
  out["events"] = result.events;
  ordered_json stages = ordered_json::array();
  for (const auto& s : result.stages) {
    const Stage& st = plan.pipelines[s.pipeline].stages[s.stage];
    stages.push_back({{"pipeline", s.pipeline},
                      {"stage", s.stage},
                      {"node", s.node},
                      {"gpus", s.gpus},
                      {"layers", {st.layer_begin, st.layer_end}},
                      {"microbatches", s.microbatches},
                      {"busy_ms", s.compute_ms + s.optimizer_ms},
                      {"compute_ms", s.compute_ms},
                      {"optimizer_ms", s.optimizer_ms},
                      {"idle_ms", s.idle_ms},
                      {"finished_ms", s.finished_ms}});
  }
  out["stages"] = std::move(stages);
  return out.dump(2) + "\n";
}

std::string chrome_trace_json(const IterationResult& result, const Plan& plan, const Profile& profile) {
  ChromeTrace trace;
  // One thread per link direction: each carries one transfer at a time.
  const int forward_links_tid = 1000, backward_links_tid = 2000;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    const int pid = static_cast<int>(p) + 1;
    trace.name_process(pid, "pipeline " + std::to_string(p) + " (" + std::to_string(pipeline.nodes.size()) +
                                " nodes, " + std::to_string(pipeline.microbatches) + " microbatches)");
    trace.sort_process(pid, pid);
    for (std::size_t s = 0; s < pipeline.stages.size(); ++s) {
      const Stage& st = pipeline.stages[s];
      const std::string node = st.node < static_cast<int>(pipeline.nodes.size()) ? pipeline.nodes[st.node] : "";
      trace.name_thread(pid, static_cast<int>(s),
                        "stage " + std::to_string(s) + ": layers " + std::to_string(st.layer_begin) + "-" +
                            std::to_string(st.layer_end - 1) + " on " + node + " (" + std::to_string(st.gpus) +
                            " GPUs)");
    }
    for (std::size_t s = 0; s + 1 < pipeline.stages.size(); ++s) {
      trace.name_thread(pid, forward_links_tid + static_cast<int>(s),
                        "activations " + std::to_string(s) + "->" + std::to_string(s + 1));
      trace.name_thread(pid, backward_links_tid + static_cast<int>(s) + 1,
                        "gradients " + std::to_string(s + 1) + "->" + std::to_string(s));
    }
  }
  const int allreduce_pid = static_cast<int>(plan.pipelines.size()) + 1;
  trace.name_process(allreduce_pid, "gradient all-reduce");
  // All-reduces on different nodes overlap: give each one the first free lane.
  std::vector<Milliseconds> lanes;
  for (const auto& op : result.ops) {
    int pid = op.pipeline + 1, tid = op.stage;
    std::string name;
    switch (op.kind) {
      case OpKind::forward: name = "F" + std::to_string(op.index); break;
      case OpKind::backward: name = "B" + std::to_string(op.index); break;
      case OpKind::send_activation:
        name = "activation " + std::to_string(op.index);
        tid = forward_links_tid + op.stage;
        break;
      case OpKind::send_gradient:
        name = "gradient " + std::to_string(op.index);
        tid = backward_links_tid + op.stage;
        break;
      case OpKind::optimizer: name = "optimizer"; break;
      case OpKind::allreduce: {
        pid = allreduce_pid;
        std::size_t lane = 0;
        while (lane < lanes.size() && lanes[lane] > op.start_ms) ++lane;
        if (lane == lanes.size()) lanes.push_back(0);
        lanes[lane] = op.end_ms;
        tid = static_cast<int>(lane);
        name = "all-reduce " + profile.layers[op.index].name;
        break;
      }
    }
    const bool compute = op.kind == OpKind::forward || op.kind == OpKind::backward;
    std::vector<std::pair<std::string, double>> args;
    if (compute) args.emplace_back("microbatch", op.index);
    trace.add_span(name, compute ? "compute" : "communication", pid, tid, op.start_ms, op.end_ms, std::move(args));
  }
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
    trace.name_thread(allreduce_pid, static_cast<int>(lane), "lane " + std::to_string(lane));
  }
  return trace.to_json({{"iteration_ms", result.iteration_ms}, {"planner_iteration_ms", plan.iteration_ms}});
}

}  // namespace oobleck::sim
