// `import oobleck`: the planner and the simulator from Python. Results come
// back as Python objects, or as dicts and lists read from the same JSON the
// programs write (one format to learn); errors are the programs' own, as
// oobleck.InputError (a ValueError) and oobleck.NoPlanError (a RuntimeError)
// that carry the message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "oobleck/common.h"
#include "oobleck/common/files.h"
#include "oobleck/executor/analytic.h"
#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"
#include "oobleck/sim/experiment.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/sweep.h"
#include "oobleck/sim/trace.h"

namespace py = pybind11;

namespace oobleck::python {
namespace {

py::object from_json(const std::string& text) { return py::module_::import("json").attr("loads")(text); }
std::string to_json(const py::object& value) {
  return py::module_::import("json").attr("dumps")(value).cast<std::string>();
}

// A profile shared by everything made from it (a cost model keeps a
// reference to its profile).
using ProfilePtr = std::shared_ptr<Profile>;

RecomputePolicy recompute_policy_or_throw(const std::string& name) {
  if (const auto policy = recompute_policy_named(name)) return *policy;
  throw InputError("recompute: expected none, auto, selective or full, got \"" + name + "\"");
}

GradientSync gradient_sync_from(const std::string& name) {
  if (const auto sync = gradient_sync_named(name)) return *sync;
  throw InputError("gradient_sync: expected per-layer, after-backward or buckets, got \"" + name + "\"");
}

// Nodes as a count (node0..node{n-1}) or as names.
using Nodes = std::variant<int, std::vector<std::string>>;
std::vector<std::string> node_names(const Nodes& nodes) {
  if (const int* count = std::get_if<int>(&nodes)) {
    if (*count < 1) throw InputError("nodes: expected at least 1, got " + std::to_string(*count));
    return numbered_nodes(*count);
  }
  return std::get<std::vector<std::string>>(nodes);
}

struct Templates {
  ProfilePtr profile;
  std::shared_ptr<CostModel> cost;
  TemplateSet set;
};

struct PlanObject {
  ProfilePtr profile;
  std::shared_ptr<Templates> templates;  // null for a plan read from a file
  Plan plan;
  // A plan never changes once made: its JSON is written once, when first
  // asked for (under the GIL, as every property is read).
  [[nodiscard]] const std::string& json() const {
    if (json_text.empty()) {
      const TemplateSet none;
      json_text = plan_to_json(plan, templates ? templates->set : none, *profile);
    }
    return json_text;
  }
  mutable std::string json_text = {};
};

Templates make_templates(const ProfilePtr& profile, int max_nodes, int microbatches, const std::string& recompute,
                         const std::string& gradient_sync, int tensor_parallel_nodes) {
  if (max_nodes < 1) throw InputError("max_nodes: expected at least 1, got " + std::to_string(max_nodes));
  const int m = microbatches > 0 ? microbatches : default_template_microbatches(*profile, max_nodes);
  auto cost = std::make_shared<CostModel>(*profile, m);
  cost->set_recompute(recompute_policy_or_throw(recompute));
  cost->set_gradient_sync(gradient_sync_from(gradient_sync));
  cost->set_tensor_parallel_nodes(tensor_parallel_nodes);
  TemplateSet set = build_templates(*cost, max_nodes);
  return {profile, std::move(cost), std::move(set)};
}

struct ReconfigurationObject {
  std::string json;
  PlanObject plan;
};

ReconfigurationObject reconfigure_plan(const PlanObject& current, const std::vector<std::string>& lost,
                                       const std::vector<std::string>& added, bool replan_all,
                                       const NodeSpeeds& node_speeds) {
  // As oobleck-plan reconfigure: templates for the plan's M and choices, up
  // to the most nodes the new plan can use.
  auto cost = std::make_shared<CostModel>(*current.profile, current.plan.template_microbatches);
  cost->set_recompute(current.plan.recompute);
  cost->set_tensor_parallel_nodes(current.plan.tensor_parallel_nodes);
  cost->set_gradient_sync(current.plan.gradient_sync);
  cost->set_gradient_bucket_bytes(current.plan.gradient_bucket_bytes);
  cost->set_pipelines_per_node(current.plan.pipelines_per_node);
  cost->set_interleave(current.plan.interleave);
  auto templates = std::make_shared<Templates>(
      Templates{current.profile, cost, replanning_templates(*cost, current.plan, lost.size(), added.size())});
  const Reconfiguration result =
      reconfigure(*cost, templates->set, current.plan, lost, added, ReconfigureOptions{replan_all, node_speeds});
  return {reconfiguration_to_json(result, templates->set, *current.profile),
          PlanObject{current.profile, templates, result.plan}};
}

sim::Scenario scenario_from(const py::object& scenario) {
  if (scenario.is_none()) return {};
  if (py::isinstance<py::str>(scenario))
    return sim::parse_scenario(read_text_file(scenario.cast<std::string>()), scenario.cast<std::string>());
  return sim::parse_scenario(to_json(scenario), "scenario");
}

}  // namespace
}  // namespace oobleck::python

PYBIND11_MODULE(oobleck, m) {
  using namespace oobleck;
  using namespace oobleck::python;
  m.doc() =
      "oobleck's planner and simulator: profiles, pipeline templates, plans, reconfiguration, "
      "replays and sweeps of failure traces";
  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception<NoPlanError>(m, "NoPlanError", PyExc_RuntimeError);

  // ------------------------------------------------------------ profiles
  py::class_<Profile, ProfilePtr>(m, "Profile", "Per-layer costs of a model on a kind of node")
      .def_static(
          "from_json",
          [](const std::string& text, const std::string& origin) {
            return std::make_shared<Profile>(parse_profile(text, origin));
          },
          py::arg("text"), py::arg("origin") = "<string>", "A profile from its JSON text")
      .def_static(
          "from_dict",
          [](const py::object& document) {
            return std::make_shared<Profile>(parse_profile(to_json(document), "<dict>"));
          },
          py::arg("document"), "A profile from the dict its JSON reads as")
      .def("to_json", [](const Profile& p) { return profile_to_json(p); })
      .def("to_dict", [](const Profile& p) { return from_json(profile_to_json(p)); })
      .def(
          "save",
          [](const Profile& p, const std::filesystem::path& path) { write_file_atomically(path, profile_to_json(p)); },
          py::arg("path"), "Writes the profile's JSON, whole or not at all")
      .def_property_readonly("layers", [](const Profile& p) { return p.layers.size(); })
      .def_property_readonly("layer_names",
                             [](const Profile& p) {
                               std::vector<std::string> names;
                               for (const auto& l : p.layers) names.push_back(l.name);
                               return names;
                             })
      .def_property_readonly("microbatch_size", [](const Profile& p) { return p.microbatch_size; })
      .def_property_readonly("gpus_per_node", [](const Profile& p) { return p.hardware.gpus_per_node; })
      .def_property_readonly("fingerprint", [](const Profile& p) { return profile_fingerprint(p); })
      .def("__repr__", [](const Profile& p) {
        return "<oobleck.Profile: " + std::to_string(p.layers.size()) + " layers, microbatch " +
               std::to_string(p.microbatch_size) + ", " + std::to_string(p.hardware.gpus_per_node) + " GPUs per node>";
      });
  m.def(
      "analytic_profile",
      [](const std::string& model, const std::string& hardware, int microbatch_size, int seq_len,
         const std::string& dtype) {
        // As oobleck-profile analytic: a preset or config file at this length.
        executor::ModelConfig config = executor::load_model_config(model);
        config.seq_len = seq_len;
        executor::validate(config, "model");
        if (microbatch_size < 1) throw InputError("microbatch_size: expected at least 1");
        const executor::HardwareDescription hw = executor::load_hardware(hardware);
        return std::make_shared<Profile>(executor::analytic_profile(config, hw, microbatch_size, dtype));
      },
      py::arg("model"), py::arg("hardware"), py::arg("microbatch_size"), py::arg("seq_len"), py::arg("dtype") = "bf16",
      "A profile derived from FLOP and byte counts (oobleck-profile analytic): a model preset or config file, "
      "a hardware preset or description file");
  m.def(
      "load_profile", [](const std::filesystem::path& path) { return std::make_shared<Profile>(load_profile(path)); },
      py::arg("path"), "A profile file (oobleck-profile) or an Oobleck profile folder");

  // ------------------------------------------------------------ planning
  py::class_<Templates, std::shared_ptr<Templates>>(m, "Templates", "The best pipeline template for each node count")
      .def_property_readonly("node_counts",
                             [](const Templates& t) {
                               std::vector<int> counts;
                               for (const auto& tpl : t.set.templates) counts.push_back(tpl.nodes);
                               return counts;
                             })
      .def_property_readonly("microbatches", [](const Templates& t) { return t.set.microbatches; })
      .def("to_dict", [](const Templates& t) { return from_json(templates_to_json(t.set, *t.profile)); });
  m.def(
      "build_templates",
      [](const ProfilePtr& profile, int max_nodes, int microbatches, const std::string& recompute,
         const std::string& gradient_sync, int tensor_parallel_nodes) {
        return std::make_shared<Templates>(
            make_templates(profile, max_nodes, microbatches, recompute, gradient_sync, tensor_parallel_nodes));
      },
      py::arg("profile"), py::arg("max_nodes"), py::arg("microbatches") = 0, py::arg("recompute") = "none",
      py::arg("gradient_sync") = "per-layer", py::arg("tensor_parallel_nodes") = 1,
      "Templates for 1..max_nodes nodes, optimised for `microbatches` (0: the default M); a stage may span up to "
      "`tensor_parallel_nodes` whole nodes",
      py::call_guard<py::gil_scoped_release>());

  py::class_<PlanObject, std::shared_ptr<PlanObject>>(m, "Plan",
                                                      "Pipelines over nodes, and the batch split between them")
      .def_property_readonly("iteration_ms", [](const PlanObject& p) { return p.plan.iteration_ms; })
      .def_property_readonly("fault_tolerance", [](const PlanObject& p) { return p.plan.fault_tolerance; })
      .def_property_readonly("global_microbatches", [](const PlanObject& p) { return p.plan.global_microbatches; })
      .def_property_readonly("pipelines",
                             [](const PlanObject& p) -> py::object {
                               const py::object whole = from_json(p.json());
                               return whole["pipelines"];
                             })
      .def_property_readonly("spare_nodes", [](const PlanObject& p) { return p.plan.spare_nodes; })
      .def_property_readonly("profile", [](const PlanObject& p) { return p.profile; })
      .def("to_json", &PlanObject::json)
      .def("to_dict", [](const PlanObject& p) { return from_json(p.json()); })
      .def(
          "save", [](const PlanObject& p, const std::filesystem::path& path) { write_file_atomically(path, p.json()); },
          py::arg("path"), "Writes the plan's JSON (what oobleck-run and oobleck-plan reconfigure read)");
  m.def(
      "instantiate",
      [](const std::shared_ptr<Templates>& templates, const Nodes& nodes, int fault_tolerance,
         int global_microbatches) {
        const auto names = node_names(nodes);
        py::gil_scoped_release unlocked;
        return std::make_shared<PlanObject>(
            PlanObject{templates->profile, templates,
                       instantiate(*templates->cost, templates->set, names, fault_tolerance, global_microbatches)});
      },
      py::arg("templates"), py::arg("nodes"), py::arg("fault_tolerance"), py::arg("global_microbatches"),
      "At least f+1 pipelines over `nodes` (a count, or names), the batch split between them");
  m.def(
      "plan_cluster",
      [](const ProfilePtr& profile, const Nodes& nodes, int fault_tolerance, int global_microbatches, int microbatches,
         const std::string& recompute, const std::string& gradient_sync, double gradient_bucket_mb,
         int tensor_parallel_nodes, int pipelines_per_node, int interleave) {
        const auto names = node_names(nodes);
        const auto policy = recompute_policy_or_throw(recompute);
        const auto sync = gradient_sync_from(gradient_sync);
        const double bucket_bytes = gradient_bucket_mb * (1 << 20);
        py::gil_scoped_release unlocked;
        ClusterPlan cluster = plan_cluster(*profile, names, fault_tolerance, global_microbatches, microbatches, {},
                                           policy, sync, bucket_bytes, tensor_parallel_nodes, pipelines_per_node,
                                           interleave);
        auto cost = std::make_shared<CostModel>(*profile, cluster.templates.microbatches);
        cost->set_recompute(policy);
        cost->set_tensor_parallel_nodes(tensor_parallel_nodes);
        cost->set_pipelines_per_node(cluster.plan.pipelines_per_node);
        cost->set_interleave(cluster.plan.interleave);
        cost->set_gradient_sync(sync);
        cost->set_gradient_bucket_bytes(bucket_bytes);
        auto templates = std::make_shared<Templates>(Templates{profile, cost, std::move(cluster.templates)});
        return std::make_shared<PlanObject>(PlanObject{profile, templates, std::move(cluster.plan)});
      },
      py::arg("profile"), py::arg("nodes"), py::arg("fault_tolerance"), py::arg("global_microbatches"),
      py::arg("microbatches") = 0, py::arg("recompute") = "none", py::arg("gradient_sync") = "per-layer",
      py::arg("gradient_bucket_mb") = kDefaultGradientBucketBytes / (1 << 20), py::arg("tensor_parallel_nodes") = 1,
      py::arg("pipelines_per_node") = 1, py::arg("interleave") = 1,
      "Templates and instantiation together, the template M searched when `microbatches` is 0; "
      "`pipelines_per_node` r > 1 puts r pipelines on every node, 0 chooses r; `interleave` v > 1 lets a "
      "device hold v model chunks (oobleck-plan instantiate)");
  m.def(
      "load_plan",
      [](const std::filesystem::path& path, const ProfilePtr& profile) {
        return std::make_shared<PlanObject>(
            PlanObject{profile, nullptr, parse_plan(read_text_file(path), path.string(), *profile)});
      },
      py::arg("path"), py::arg("profile"), "A plan file, checked against the profile it was made from");

  py::class_<ReconfigurationObject>(m, "Reconfiguration",
                                    "A new plan after nodes left or joined, and the copies it needs")
      .def_readonly("plan", &ReconfigurationObject::plan)
      .def("to_dict", [](const ReconfigurationObject& r) { return from_json(r.json); })
      .def("to_json", [](const ReconfigurationObject& r) { return r.json; });
  m.def(
      "reconfigure",
      [](const PlanObject& plan, const std::vector<std::string>& lost, const std::vector<std::string>& added,
         bool replan_all, const NodeSpeeds& node_speeds) {
        py::gil_scoped_release unlocked;
        return reconfigure_plan(plan, lost, added, replan_all, node_speeds);
      },
      py::arg("plan"), py::arg("lost") = std::vector<std::string>{}, py::arg("added") = std::vector<std::string>{},
      py::arg("replan_all") = false, py::arg("node_speeds") = NodeSpeeds{},
      "Re-plans after `lost` nodes leave and `added` join, at the survivors' `node_speeds` ({name: factor}) where "
      "given (oobleck-plan reconfigure)");

  // ------------------------------------------------------------ simulation
  py::class_<sim::Trace, std::shared_ptr<sim::Trace>>(m, "Trace", "Node losses and joins over time")
      .def_static(
          "from_text",
          [](const std::string& text, const std::string& origin) {
            return std::make_shared<sim::Trace>(sim::parse_trace(text, origin));
          },
          py::arg("text"), py::arg("origin") = "<string>", "A trace from its CSV text (time_ms,action,node)")
      .def("to_csv", [](const sim::Trace& t) { return sim::trace_to_csv(t); })
      .def_property_readonly("events", [](const sim::Trace& t) { return t.events.size(); });
  m.def(
      "load_trace", [](const std::string& path) { return std::make_shared<sim::Trace>(sim::load_trace(path)); },
      py::arg("path"), "A trace file (oobleck-sim trace)");
  m.def(
      "replay",
      [](const ProfilePtr& profile, const std::shared_ptr<sim::Trace>& trace, int fault_tolerance,
         int global_microbatches, const std::string& policies, const py::object& scenario, const std::string& recompute,
         bool timeline, int tensor_parallel_nodes, int interleave, int pipelines_per_node) {
        sim::ReplayOptions options;
        options.fault_tolerance = fault_tolerance;
        options.global_microbatches = global_microbatches;
        options.policies = sim::parse_policies(policies);
        options.recompute = recompute_policy_or_throw(recompute);
        options.tensor_parallel_nodes = tensor_parallel_nodes;
        if (interleave < 1 || interleave > 64) {
          throw InputError("interleave: expected 1 to 64 chunks a device, got " + std::to_string(interleave));
        }
        options.interleave = interleave;
        options.pipelines_per_node = pipelines_per_node;  // (plan_cluster checks it)
        const sim::Scenario parsed = scenario_from(scenario);
        sim::ReplayResult result;
        {
          py::gil_scoped_release unlocked;
          result = sim::replay(*profile, *trace, options, parsed);
        }
        py::object out = from_json(sim::replay_to_json(result));
        if (timeline) {
          // As oobleck-sim replay --timeline writes it: per policy, from each
          // time on, the nodes present, the pipelines training and samples/s.
          py::dict series;
          for (const auto& policy : result.policies) {
            py::list points;
            for (const auto& point : policy.timeline) {
              points.append(py::make_tuple(point.time_ms / 1000.0, point.nodes, point.pipelines, point.samples_per_s));
            }
            series[py::str(std::string(sim::policy_name(policy.policy)))] = points;
          }
          out["timeline"] = series;
        }
        return out;
      },
      py::arg("profile"), py::arg("trace"), py::arg("fault_tolerance") = 1, py::arg("global_microbatches") = 1,
      py::arg("policies") = "all", py::arg("scenario") = py::none(), py::arg("recompute") = "none",
      py::arg("timeline") = false, py::arg("tensor_parallel_nodes") = 1, py::arg("interleave") = 1,
      py::arg("pipelines_per_node") = 1,
      "Replays the trace under each policy (oobleck-sim replay) into its JSON document as a dict; the scenario "
      "is a dict or a file's path. timeline=True adds \"timeline\": {policy: [(time_s, nodes, pipelines, "
      "samples_per_s), ...]}. interleave=V lets the plans give a device 2 to V model chunks, pipelines_per_node=R "
      "puts R pipelines on every node (0 chooses R); with either, mitigating stragglers keeps or drops slow nodes");
  m.def(
      "sweep",
      [](const ProfilePtr& profile, const std::shared_ptr<sim::Trace>& trace, const std::vector<int>& fault_tolerances,
         const std::vector<std::optional<int>>& checkpoint_intervals, int global_microbatches,
         const py::object& scenario) {
        if (fault_tolerances.empty()) throw InputError("fault_tolerances: expected at least one value of f");
        sim::SweepOptions options{fault_tolerances, checkpoint_intervals, global_microbatches};
        sim::TraceSet traces;
        traces.given = trace;
        const sim::Scenario parsed = scenario_from(scenario);
        std::string json;
        {
          py::gil_scoped_release unlocked;
          json = sim::sweep_to_json(sim::sweep(*profile, traces, options, parsed));
        }
        return from_json(json);
      },
      py::arg("profile"), py::arg("trace"), py::arg("fault_tolerances"),
      py::arg("checkpoint_intervals") = std::vector<std::optional<int>>{std::nullopt},
      py::arg("global_microbatches") = 1, py::arg("scenario") = py::none(),
      "oobleck at each f and checkpoint-restart at each interval (None: Young/Daly) over the trace (oobleck-sim "
      "sweep)");
}
