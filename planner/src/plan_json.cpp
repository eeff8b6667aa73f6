// Templates and plans as JSON (oobleck.templates.v1, oobleck.plan.v1), and
// MPI-style hostfiles.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "oobleck/common/event_lines.h"
#include "oobleck/common/json_input.h"
#include "oobleck/planner.h"

namespace oobleck {
namespace {

using json_input::FieldPath;
using json_input::json;

constexpr std::string_view kPlanFormat = "oobleck.plan.v1";
constexpr std::string_view kTemplatesFormat = "oobleck.templates.v1";

json stages_to_json(const CostModel& cost, const std::vector<Stage>& stages, int microbatches) {
  json out = json::array();
  const int count = static_cast<int>(stages.size());
  for (int s = 0; s < count; ++s) {
    const Stage& stage = stages[s];
    const int in_flight = std::min(microbatches, count - s);
    json object = {
        {"layers", {stage.layer_begin, stage.layer_end}},
        {"gpus", stage.gpus},
        {"node", stage.node},
        {"forward_ms", cost.stage_forward_ms(stage.layer_begin, stage.layer_end, stage.gpus)},
        {"backward_ms", cost.stage_backward_ms(stage.layer_begin, stage.layer_end, stage.gpus, stage.recompute)},
        {"memory_bytes",
         cost.stage_memory_bytes(stage.layer_begin, stage.layer_end, stage.gpus, in_flight, stage.recompute)}};
    if (stage.recompute != Recompute::none) object["recompute"] = recompute_name(stage.recompute);
    out.push_back(std::move(object));
  }
  return out;
}

json profile_summary(const Profile& profile) {
  return {{"model", profile.model_name},
          {"hardware", profile.hardware.name},
          {"layers", profile.layers.size()},
          {"gpus_per_node", profile.hardware.gpus_per_node},
          {"microbatch_size", profile.microbatch_size},
          {"fingerprint", profile_fingerprint(profile)}};
}

json templates_array(const CostModel& cost, const TemplateSet& templates) {
  json out = json::array();
  for (const auto& t : templates.templates) {
    out.push_back({{"nodes", t.nodes},
                   {"iteration_ms", t.iteration_ms},
                   {"microbatches", t.microbatches},
                   {"first_microbatch_ms", t.first_microbatch_ms},
                   {"bottleneck_ms", t.bottleneck_ms},
                   {"max_microbatches", t.max_microbatches > 0 ? json(t.max_microbatches) : json(nullptr)},
                   {"stages", stages_to_json(cost, t.stages, t.microbatches)}});
    if (t.gpus > 0 && t.gpus < t.nodes * cost.gpus_per_node()) out.back()["gpus"] = t.gpus;
    if (t.interleave > 1) out.back()["interleave"] = t.interleave;
  }
  return out;
}

json plan_object(const Plan& plan, const TemplateSet& templates, const Profile& profile) {
  const CostModel cost(profile, std::max(1, templates.microbatches));
  json pipelines = json::array();
  for (const auto& p : plan.pipelines) {
    pipelines.push_back({{"template_nodes", p.template_nodes},
                         {"nodes", p.nodes},
                         {"microbatches", p.microbatches},
                         {"iteration_ms", p.iteration_ms},
                         {"stages", stages_to_json(cost, p.stages, p.microbatches)}});
    if (p.interleave > 1) pipelines.back()["interleave"] = p.interleave;
  }
  json out = {{"format", kPlanFormat},
              {"profile", profile_summary(profile)},
              {"fault_tolerance", plan.fault_tolerance},
              {"global_microbatches", plan.global_microbatches},
              {"microbatches", plan.template_microbatches},
              {"nodes", plan_node_count(plan)},
              {"iteration_ms", plan.iteration_ms},
              {"pipelines_ms", plan.pipelines_ms},
              {"sync_ms", plan.sync_ms},
              {"pipelines", std::move(pipelines)},
              {"spare_nodes", plan.spare_nodes},
              {"templates", templates_array(cost, templates)}};
  if (plan.recompute != RecomputePolicy::none) out["recompute"] = recompute_policy_name(plan.recompute);
  if (plan.gradient_sync != GradientSync::per_layer) out["gradient_sync"] = gradient_sync_name(plan.gradient_sync);
  if (plan.gradient_sync == GradientSync::buckets) out["gradient_bucket_bytes"] = plan.gradient_bucket_bytes;
  if (plan.tensor_parallel_nodes > 1) out["tensor_parallel_nodes"] = plan.tensor_parallel_nodes;
  if (plan.pipelines_per_node > 1) out["pipelines_per_node"] = plan.pipelines_per_node;
  if (plan.interleave > 1) out["interleave"] = plan.interleave;
  return out;
}

// Node names, each in at most `sharing` pipelines (Plan::pipelines_per_node),
// a spare one in none.
class NodeNames {
 public:
  explicit NodeNames(int sharing) : sharing_(sharing) {}
  std::string take(const json& value, const FieldPath& at, bool spare = false) {
    if (!value.is_string() || value.get<std::string>().empty()) throw at.error("expected a node name");
    const std::string name = value.get<std::string>();
    if (name.find_first_of(", \t\r\n") != std::string::npos) throw at.error("node names cannot hold commas or spaces");
    int& seen = uses_[name];
    if (seen != 0 && (sharing_ == 1 || spare || seen < 0)) {
      throw at.error("node " + quoted_excerpt(name) + " appears twice in the plan");
    }
    if (seen >= sharing_) {
      throw at.error("node " + quoted_excerpt(name) + " holds more than pipelines_per_node = " +
                     std::to_string(sharing_) + " pipelines");
    }
    seen = spare ? -1 : seen + 1;
    return name;
  }
  // The first pipeline node held by fewer than `sharing` pipelines, if any.
  [[nodiscard]] std::optional<std::pair<std::string, int>> underfilled() const {
    for (const auto& [name, seen] : uses_) {
      if (seen >= 0 && seen < sharing_) return std::make_pair(name, seen);
    }
    return std::nullopt;
  }

 private:
  int sharing_;
  std::map<std::string, int> uses_;  // pipelines naming it; -1: a spare
};

// The fingerprint of the profile the plan was made from ("" when it records
// none); throws when it was made for another layer count.
std::string check_made_for(const json& root, const FieldPath& where, const Profile& profile) {
  std::string fingerprint;
  const int layers = static_cast<int>(profile.layers.size());
  if (auto it = root.find("profile"); it != root.end() && it->is_object()) {
    if (auto f = it->find("fingerprint"); f != it->end() && f->is_string()) fingerprint = f->get<std::string>();
    if (auto l = it->find("layers"); l != it->end() && l->is_number_integer() && *l != layers) {
      throw (where / "profile" / "layers")
          .error("the plan was made for " + l->dump() + " layers but the profile " + profile.origin + " has " +
                 std::to_string(layers));
    }
  }
  return fingerprint;
}

// A stage's own fields: layers within the profile, a GPU count within a node,
// a node within the pipeline.
Stage parse_stage(const json& value, const FieldPath& at, int layers, int gpus, int nodes) {
  const json& range = json_input::require_array(value, "layers", at);
  if (range.size() != 2) throw (at / "layers").error("expected [begin, end)");
  Stage stage;
  stage.layer_begin = static_cast<int>(json_input::as_integer(range[0], (at / "layers")[0], 0, layers));
  stage.layer_end = static_cast<int>(json_input::as_integer(range[1], (at / "layers")[1], 0, layers));
  stage.gpus = static_cast<int>(json_input::require_integer(value, "gpus", at, 1, gpus * kMaxTensorParallelNodes));
  stage.node = static_cast<int>(json_input::require_integer(value, "node", at, 0, nodes - 1));
  const auto recompute = recompute_named(json_input::optional_string(value, "recompute", at, "none"));
  if (!recompute) throw (at / "recompute").error("expected none, selective or full");
  stage.recompute = *recompute;
  return stage;
}

// Stages that cover every layer in order, node by node, each node's stages
// on all of its GPUs.
std::vector<Stage> parse_stages(const json& pipeline, const FieldPath& at, const Profile& profile, int nodes,
                                int sharing, int interleave) {
  const int layers = static_cast<int>(profile.layers.size());
  const int gpus = profile.hardware.gpus_per_node;
  const int node_gpus = gpus / sharing;  // a pipeline's on each of its nodes
  const json& stages = json_input::require_array(pipeline, "stages", at);
  if (stages.empty()) throw (at / "stages").error("expected at least one stage");
  if (stages.size() % static_cast<std::size_t>(interleave) != 0) {
    throw (at / "stages")
        .error("expected a multiple of interleave = " + std::to_string(interleave) + " stages, got " +
               std::to_string(stages.size()));
  }
  // With interleaving, the first D = S / interleave stages are the devices;
  // stage j runs on stage j mod D's.
  const std::size_t devices = stages.size() / static_cast<std::size_t>(interleave);
  std::vector<Stage> out;
  std::vector<int> gpus_on_node(nodes, 0);
  int next_layer = 0, last_node = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const FieldPath sat = (at / "stages")[s];
    Stage stage = parse_stage(stages[s], sat, layers, gpus, nodes);
    if (stage.layer_begin != next_layer || stage.layer_end <= stage.layer_begin) {
      throw (sat / "layers")
          .error("expected a non-empty range starting at layer " + std::to_string(next_layer) +
                 " (stages cover the layers in order)");
    }
    if (gpus % stage.gpus != 0 && stage.gpus % gpus != 0) {
      throw (sat / "gpus").error("expected a divisor of gpus_per_node (" + std::to_string(gpus) +
                                 ") or a multiple of it (whole nodes)");
    }
    if (s >= devices) {
      const Stage& device = out[s % devices];
      if (stage.node != device.node || stage.gpus != device.gpus) {
        throw (sat / "node")
            .error("expected node " + std::to_string(device.node) + " and gpus " + std::to_string(device.gpus) +
                   ": with interleave, stage " + std::to_string(s) + " runs on the device of stage " +
                   std::to_string(s % devices));
      }
      stage.node_span = device.node_span;
      next_layer = stage.layer_end;
      out.push_back(stage);
      continue;
    }
    if (stage.node < last_node) throw (sat / "node").error("expected stages in node order");
    const int span = stage.gpus > gpus ? stage.gpus / gpus : 1;
    stage.node_span = span;
    if (stage.node + span > nodes) {
      throw (sat / "node")
          .error("a stage on " + std::to_string(span) + " nodes from node " + std::to_string(stage.node) +
                 " needs more than the pipeline's " + std::to_string(nodes));
    }
    last_node = stage.node + span - 1;
    for (int n = stage.node; n < stage.node + span; ++n) gpus_on_node[n] += std::min(stage.gpus, gpus);
    next_layer = stage.layer_end;
    out.push_back(stage);
  }
  if (next_layer != layers) {
    throw (at / "stages")
        .error("stages end at layer " + std::to_string(next_layer) + ", expected all " + std::to_string(layers) +
               " layers of the profile");
  }
  for (int n = 0; n < nodes; ++n) {
    if (gpus_on_node[n] != node_gpus) {
      throw (at / "stages")
          .error("node " + std::to_string(n) + " has stages on " + std::to_string(gpus_on_node[n]) +
                 " GPUs, expected " + std::to_string(node_gpus) +
                 (sharing == 1 ? std::string(" (gpus_per_node)")
                               : " (gpus_per_node / pipelines_per_node)"));
    }
  }
  return out;
}

Pipeline parse_pipeline(const json& value, const FieldPath& at, const Profile& profile, NodeNames& names,
                        int sharing, int interleave) {
  Pipeline p;
  if (value.is_object() && value.contains("interleave")) {
    p.interleave = static_cast<int>(json_input::require_integer(value, "interleave", at, 1, interleave));
  }
  p.template_nodes = static_cast<int>(json_input::require_integer(value, "template_nodes", at, 1, 1 << 20));
  p.microbatches = static_cast<int>(json_input::require_integer(value, "microbatches", at, 1, 1000000));
  if (auto it = value.find("iteration_ms"); it != value.end() && it->is_number()) p.iteration_ms = it->get<double>();
  const json& nodes = json_input::require_array(value, "nodes", at);
  if (static_cast<int>(nodes.size()) != p.template_nodes) {
    throw (at / "nodes")
        .error("expected " + std::to_string(p.template_nodes) + " node names (template_nodes), got " +
               std::to_string(nodes.size()));
  }
  if (sharing > 1 && p.template_nodes != 1) {
    throw (at / "template_nodes").error("expected 1: pipelines that share nodes run on one node each");
  }
  for (std::size_t n = 0; n < nodes.size(); ++n) p.nodes.push_back(names.take(nodes[n], (at / "nodes")[n]));
  if (sharing > 1 && p.interleave > 1) {
    throw (at / "interleave").error("expected 1: pipelines that share nodes do not interleave");
  }
  p.stages = parse_stages(value, at, profile, p.template_nodes, sharing, p.interleave);
  return p;
}

}  // namespace

std::string templates_to_json(const TemplateSet& templates, const Profile& profile) {
  const CostModel cost(profile, std::max(1, templates.microbatches));
  json missing = json::array();
  for (const auto& [first, last] : nodes_without_template(templates)) missing.push_back({first, last});
  const json out = {{"format", kTemplatesFormat},
                    {"profile", profile_summary(profile)},
                    {"microbatches", templates.microbatches},
                    {"max_nodes", templates.max_nodes},
                    {"templates", templates_array(cost, templates)},
                    {"nodes_without_template", std::move(missing)}};
  return out.dump(2) + "\n";
}

std::string plan_to_json(const Plan& plan, const TemplateSet& templates, const Profile& profile) {
  return plan_object(plan, templates, profile).dump(2) + "\n";
}

std::string sized_plan_to_json(const SizedClusterPlan& result, const Profile& chosen_profile) {
  json out = plan_object(result.cluster.plan, result.cluster.templates, chosen_profile);
  json sizes = json::array();
  for (std::size_t i = 0; i < result.choices.size(); ++i) {
    const auto& c = result.choices[i];
    json entry = {{"microbatch_size", c.microbatch_size}, {"chosen", i == result.chosen}};
    if (c.global_microbatches > 0) entry["global_microbatches"] = c.global_microbatches;
    if (c.planned) {
      entry["iteration_ms"] = c.iteration_ms;
    } else {
      entry["problem"] = c.problem;
    }
    sizes.push_back(std::move(entry));
  }
  out["microbatch_size"] = chosen_profile.microbatch_size;
  out["microbatch_sizes"] = std::move(sizes);
  return out.dump(2) + "\n";
}

std::string reconfiguration_to_json(const Reconfiguration& result, const TemplateSet& templates,
                                    const Profile& profile) {
  json out = plan_object(result.plan, templates, profile);
  json transfers = json::array();
  for (const auto& t : result.transfers) {
    transfers.push_back({{"layer", t.layer}, {"from_node", t.from_node}, {"to_node", t.to_node}, {"bytes", t.bytes}});
  }
  out["lost"] = result.lost;
  out["added"] = result.added;
  out["copy_bytes"] = result.copy_bytes;
  out["copy_ms"] = result.copy_ms;
  out["transfers"] = std::move(transfers);
  return out.dump(2) + "\n";
}

Plan parse_plan(std::string_view json_text, const std::string& origin, const Profile& profile) {
  const json root = json_input::parse(json_text, origin);
  const FieldPath where(origin);
  json_input::require_format(root, kPlanFormat, where);
  Plan plan;
  plan.fault_tolerance = static_cast<int>(json_input::require_integer(root, "fault_tolerance", where, 0, 1 << 20));
  plan.global_microbatches =
      static_cast<int>(json_input::require_integer(root, "global_microbatches", where, 1, 1000000));
  plan.template_microbatches = static_cast<int>(json_input::require_integer(root, "microbatches", where, 1, 100000000));
  plan.profile_fingerprint = check_made_for(root, where, profile);
  const auto policy = recompute_policy_named(json_input::optional_string(root, "recompute", where, "none"));
  if (!policy) throw (where / "recompute").error("expected none, auto, selective or full");
  plan.recompute = *policy;
  const auto sync = gradient_sync_named(json_input::optional_string(root, "gradient_sync", where, "per-layer"));
  if (!sync) throw (where / "gradient_sync").error("expected per-layer, after-backward or buckets");
  plan.gradient_sync = *sync;
  if (root.contains("gradient_bucket_bytes")) {
    plan.gradient_bucket_bytes = json_input::require_number(root, "gradient_bucket_bytes", where, 1, 1e15);
  }
  const int per_node = profile.hardware.gpus_per_node;
  if (root.contains("pipelines_per_node")) {
    plan.pipelines_per_node =
        static_cast<int>(json_input::require_integer(root, "pipelines_per_node", where, 1, per_node));
    if (per_node % plan.pipelines_per_node != 0) {
      throw (where / "pipelines_per_node")
          .error("expected a divisor of the profile's " + std::to_string(per_node) + " GPUs per node");
    }
  }
  if (root.contains("interleave")) {
    plan.interleave = static_cast<int>(json_input::require_integer(root, "interleave", where, 1, 64));
  }
  NodeNames names(plan.pipelines_per_node);
  const json& pipelines = json_input::require_array(root, "pipelines", where);
  if (pipelines.empty()) throw (where / "pipelines").error("expected at least one pipeline");
  long long total_microbatches = 0;
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    plan.pipelines.push_back(
        parse_pipeline(pipelines[i], (where / "pipelines")[i], profile, names, plan.pipelines_per_node,
                       plan.interleave));
    total_microbatches += plan.pipelines.back().microbatches;
  }
  if (total_microbatches != plan.global_microbatches) {
    throw (where / "pipelines")
        .error("microbatches add up to " + std::to_string(total_microbatches) + ", expected global_microbatches = " +
               std::to_string(plan.global_microbatches));
  }
  if (auto it = root.find("spare_nodes"); it != root.end()) {
    if (!it->is_array()) throw (where / "spare_nodes").error("expected an array of node names");
    for (std::size_t n = 0; n < it->size(); ++n) {
      plan.spare_nodes.push_back(names.take((*it)[n], (where / "spare_nodes")[n], true));
    }
  }
  if (const auto short_node = names.underfilled()) {
    throw (where / "pipelines")
        .error("node " + quoted_excerpt(short_node->first) + " holds " + std::to_string(short_node->second) +
               " pipelines, expected pipelines_per_node = " + std::to_string(plan.pipelines_per_node));
  }
  if (plan.pipelines_per_node > 1) {
    for (std::size_t i = 1; i < plan.pipelines.size(); ++i) {
      if (plan.pipelines[i].stages != plan.pipelines[0].stages) {
        throw ((where / "pipelines")[i] / "stages")
            .error("expected the stages of pipeline 0: pipelines that share nodes are of one template");
      }
    }
  }
  if (auto it = root.find("iteration_ms"); it != root.end() && it->is_number()) plan.iteration_ms = it->get<double>();
  // The most nodes its stages may span when it is re-planned: what it says,
  // at least its widest stage's.
  int widest = 1;
  for (const auto& p : plan.pipelines) {
    for (const auto& st : p.stages) widest = std::max(widest, st.node_span);
  }
  plan.tensor_parallel_nodes = widest;
  if (root.contains("tensor_parallel_nodes")) {
    plan.tensor_parallel_nodes = static_cast<int>(
        json_input::require_integer(root, "tensor_parallel_nodes", where, widest, kMaxTensorParallelNodes));
  }
  return plan;
}

namespace {

// A name ssh and the job's messages take as a host and nothing else: never
// an option ("-F/file"), a user ("a@b"), a shell word or bytes that are not
// text.
bool is_host_name(const std::string& host) {
  if (host.empty() || host.size() > 253 || std::isalnum(static_cast<unsigned char>(host[0])) == 0) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x80 && (std::isalnum(u) != 0 || c == '.' || c == '-' || c == '_' || c == ':');
  });
}

}  // namespace

std::vector<std::string> parse_hostfile(std::string_view text, const std::string& origin, int gpus_per_node) {
  std::vector<std::string> hosts;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = origin + ":" + std::to_string(number);
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    if (!is_host_name(host)) {
      throw InputError(where + ": expected a host name first (letters, digits, '.', '-', '_' or ':', at most 253, "
                               "starting with a letter or digit), got " + quoted_excerpt(host));
    }
    int slots = gpus_per_node;
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots")) {
        throw InputError(where + ": expected \"slots=N\" after the host name, got " + quoted_excerpt(word));
      }
      int value = 0;
      try {
        std::size_t used = 0;
        value = std::stoi(word.substr(eq + 1), &used);
        if (used != word.size() - eq - 1) value = 0;
      } catch (const std::exception&) {
        value = 0;
      }
      if (value < 1) throw InputError(where + ": expected a positive number in " + quoted_excerpt(word));
      if (key == "slots") slots = value;
    }
    if (slots != gpus_per_node) {
      throw InputError(where + ": host " + excerpt(host) + " has slots=" + std::to_string(slots) +
                       " but the profile's nodes have " + std::to_string(gpus_per_node) +
                       " GPUs (hardware.gpus_per_node); templates need identical nodes");
    }
    if (!seen.insert(host).second) throw InputError(where + ": host " + excerpt(host) + " is listed twice");
    hosts.push_back(host);
  }
  if (hosts.empty()) throw InputError(origin + ": no hosts (expected lines like \"node0 slots=" +
                                      std::to_string(gpus_per_node) + "\")");
  return hosts;
}

}  // namespace oobleck
