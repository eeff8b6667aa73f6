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
                      {"node_index", s.node_index},
                      {"gpus", s.gpus},
                      {"tp_degree", s.gpus},
                      {"layers", {st.layer_begin, st.layer_end}},
                      {"microbatches", s.microbatches},
                      {"busy_ms", s.compute_ms + s.tp_allreduce_ms + s.optimizer_ms},
                      {"compute_ms", s.compute_ms},
                      {"tp_allreduces_per_pass", s.tp_allreduces_per_pass},
                      {"tp_allreduce_ms", s.tp_allreduce_ms},
                      {"optimizer_ms", s.optimizer_ms},
                      {"idle_ms", s.idle_ms},
                      {"finished_ms", s.finished_ms}});
  }
  out["stages"] = std::move(stages);
  return out.dump(2) + "\n";
}

namespace {

// One thread per link direction: each carries one transfer at a time.
constexpr int kForwardLinksTid = 1000, kBackwardLinksTid = 2000;

// Stages on one node hand over through the node's own link (NVLink, PCIe),
// the others through the network: the transfers say which.
std::string link_of(const Pipeline& pipeline, int from, int to) {
  return pipeline.stages[from].node == pipeline.stages[to].node ? "intra-node" : "inter-node";
}

void name_pipeline_threads(ChromeTrace& trace, const Pipeline& pipeline, int pid) {
  const int S = static_cast<int>(pipeline.stages.size());
  for (int s = 0; s < S; ++s) {
    const Stage& st = pipeline.stages[s];
    std::string node = st.node < static_cast<int>(pipeline.nodes.size()) ? pipeline.nodes[st.node] : "";
    if (st.node_span > 1 && st.node + st.node_span <= static_cast<int>(pipeline.nodes.size())) {
      node += "-" + pipeline.nodes[st.node + st.node_span - 1];
    }
    trace.name_thread(pid, s,
                      "stage " + std::to_string(s) + ": layers " + std::to_string(st.layer_begin) + "-" +
                          std::to_string(st.layer_end - 1) + " on " + node + " (" + std::to_string(st.gpus) + " GPUs)");
  }
  for (int s = 0; s + 1 < S; ++s) {
    const std::string link = " (" + link_of(pipeline, s, s + 1) + ")";
    trace.name_thread(pid, kForwardLinksTid + s,
                      "activations " + std::to_string(s) + "->" + std::to_string(s + 1) + link);
    trace.name_thread(pid, kBackwardLinksTid + s + 1,
                      "gradients " + std::to_string(s + 1) + "->" + std::to_string(s) + link);
  }
}

// The trace of a stage's or a link's op (not a gradient all-reduce).
void add_pipeline_op(ChromeTrace& trace, const OpRecord& op, const Pipeline& pipeline, const StageTimes& stage) {
  const int pid = op.pipeline + 1;
  const std::string microbatch = std::to_string(op.index);
  std::vector<std::pair<std::string, double>> args = {{"microbatch", op.index}};
  switch (op.kind) {
    case OpKind::forward:
    case OpKind::backward:
      trace.add_span((op.kind == OpKind::forward ? "F" : "B") + microbatch, "compute", pid, op.stage, op.start_ms,
                     op.end_ms, std::move(args));
      return;
    case OpKind::tp_allreduce_forward:
    case OpKind::tp_allreduce_backward: {
      const bool forward = op.kind == OpKind::tp_allreduce_forward;
      args.emplace_back("tp_degree", stage.gpus);
      args.emplace_back("allreduces", stage.tp_allreduces_per_pass);
      trace.add_span("TP all-reduce " + std::string(forward ? "F" : "B") + microbatch, "communication", pid, op.stage,
                     op.start_ms, op.end_ms, std::move(args), {{"link", "intra-node"}});
      return;
    }
    case OpKind::send_activation:
    case OpKind::send_gradient: {
      const bool activation = op.kind == OpKind::send_activation;
      const std::string link = link_of(pipeline, op.stage, op.stage + (activation ? 1 : -1));
      trace.add_span((activation ? "activation " : "gradient ") + microbatch + " (" + link + ")", "communication", pid,
                     (activation ? kForwardLinksTid : kBackwardLinksTid) + op.stage, op.start_ms, op.end_ms,
                     std::move(args), {{"link", link}});
      return;
    }
    case OpKind::optimizer:
      trace.add_span("optimizer", "communication", pid, op.stage, op.start_ms, op.end_ms);
      return;
    case OpKind::allreduce:
      return;  // not a pipeline's
  }
}

}  // namespace

std::string chrome_trace_json(const IterationResult& result, const Plan& plan, const Profile& profile) {
  ChromeTrace trace;
  // result.stages lists the stages pipeline by pipeline: where each begins.
  std::vector<std::size_t> first_row;
  for (std::size_t p = 0, row = 0; p < plan.pipelines.size(); row += plan.pipelines[p++].stages.size()) {
    first_row.push_back(row);
  }
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pipeline = plan.pipelines[p];
    const int pid = static_cast<int>(p) + 1;
    trace.name_process(pid, "pipeline " + std::to_string(p) + " (" + std::to_string(pipeline.nodes.size()) +
                                " nodes, " + std::to_string(pipeline.microbatches) + " microbatches)");
    trace.sort_process(pid, pid);
    name_pipeline_threads(trace, pipeline, pid);
  }
  const int allreduce_pid = static_cast<int>(plan.pipelines.size()) + 1;
  trace.name_process(allreduce_pid, "gradient all-reduce");
  // All-reduces on different nodes overlap: give each one the first free lane.
  std::vector<Milliseconds> lanes;
  for (const auto& op : result.ops) {
    if (op.kind != OpKind::allreduce) {
      const StageTimes& stage = result.stages.at(first_row.at(op.pipeline) + op.stage);
      add_pipeline_op(trace, op, plan.pipelines[op.pipeline], stage);
      continue;
    }
    std::size_t lane = 0;
    while (lane < lanes.size() && lanes[lane] > op.start_ms) ++lane;
    if (lane == lanes.size()) lanes.push_back(0);
    lanes[lane] = op.end_ms;
    trace.add_span("all-reduce " + profile.layers[op.index].name, "communication", allreduce_pid,
                   static_cast<int>(lane), op.start_ms, op.end_ms);
  }
  for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
    trace.name_thread(allreduce_pid, static_cast<int>(lane), "lane " + std::to_string(lane));
  }
  return trace.to_json({{"iteration_ms", result.iteration_ms}, {"planner_iteration_ms", plan.iteration_ms}});
}

}  // namespace oobleck::sim
