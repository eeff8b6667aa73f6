#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "composition.h"
#include "plan_building.h"
#include "solve_memo.h"

namespace oobleck {
namespace detail {

void check_node_names(const std::vector<std::string>& names, std::string_view what) {
  std::set<std::string> seen;
  for (const auto& name : names) {
    if (name.empty() || name.find_first_of(", \t\r\n") != std::string::npos) {
      throw InputError(std::string(what) + ": node name \"" + name +
                       "\" is empty or contains a comma or white space");
    }
    if (!seen.insert(name).second) throw InputError(std::string(what) + ": node \"" + name + "\" appears twice");
  }
}

Plan plan_from(const CostModel& cost, const TemplateSet& templates, const Composition& composition,
               const std::vector<std::vector<std::string>>& pipeline_nodes, std::vector<std::string> spare,
               int fault_tolerance) {
  Plan plan;
  plan.recompute = cost.recompute_policy();
  plan.gradient_sync = cost.gradient_sync();
  plan.tensor_parallel_nodes = cost.tensor_parallel_nodes();
  plan.interleave = cost.interleave();
  plan.gradient_bucket_bytes = cost.gradient_bucket_bytes();
  plan.fault_tolerance = fault_tolerance;
  int total = 0;
  for (int m : composition.microbatches) total += m;
  plan.global_microbatches = total;
  plan.template_microbatches = templates.microbatches;
  plan.pipelines_ms = composition.pipelines_ms;
  plan.sync_ms = composition.sync_ms;
  plan.iteration_ms = composition.iteration_ms;
  plan.composition_steps = composition.steps;
  plan.spare_nodes = std::move(spare);
  plan.profile_fingerprint = profile_fingerprint(cost.profile());
  for (std::size_t i = 0; i < composition.template_nodes.size(); ++i) {
    const PipelineTemplate* t = templates.find(composition.template_nodes[i]);
    Pipeline pipeline;
    pipeline.template_nodes = t->nodes;
    pipeline.nodes = pipeline_nodes[i];
    pipeline.microbatches = composition.microbatches[i];
    pipeline.iteration_ms = composition.pipeline_ms[i];
    pipeline.stages = t->stages;
    pipeline.interleave = t->interleave;
    plan.pipelines.push_back(std::move(pipeline));
  }
  return plan;
}

std::string describe_sizes(const TemplateSet& templates) {
  std::ostringstream out;
  for (std::size_t i = 0; i < templates.templates.size(); ++i) {
    if (i > 0) out << ", ";
    if (i == 8) {
      out << "...";
      break;
    }
    out << templates.templates[i].nodes;
  }
  return out.str();
}

}  // namespace detail

namespace {

// Where a layer alone needs more nodes' GPUs than stages may span: how many
// the widest such layer needs, as a hint (empty otherwise, or where some
// layer fits on no number of nodes).
std::string wider_stages_hint(const CostModel& cost) {
  const int gpus = cost.gpus_per_node();
  int needed = 1, widest = 0;
  for (int l = 0; l < cost.layers(); ++l) {
    const auto fits_on = [&](int degree) {
      for (Recompute r : cost.recompute_choices()) {
        if (cost.stage_max_in_flight(l, l + 1, degree, r) > 0) return true;
      }
      return false;
    };
    int k = 1;
    while (k <= kMaxTensorParallelNodes && !fits_on(k * gpus)) ++k;
    if (k > kMaxTensorParallelNodes) return "";
    if (k > needed) needed = k, widest = l;
  }
  if (needed <= cost.tensor_parallel_nodes()) return "";
  return "; layer " + std::to_string(widest) + " (" + cost.profile().layers[widest].name +
         ") alone needs the GPUs of " + std::to_string(needed) + " nodes: let a stage span them (--tensor-parallel-nodes " +
         std::to_string(needed) + ")";
}

}  // namespace

namespace {

// instantiate, its compositions' tails taken from and kept in `tails`.
Plan instantiate_remembering(const CostModel& cost, const TemplateSet& templates, const std::vector<std::string>& nodes,
                             int fault_tolerance, int global_microbatches, detail::TailMemo* tails) {
  detail::check_node_names(nodes, "nodes");
  const int count = static_cast<int>(nodes.size());
  if (count < 1) throw InputError("nodes: expected at least one node");
  if (fault_tolerance < 0) throw InputError("fault-tolerance: expected 0 or more, got " + std::to_string(fault_tolerance));
  if (global_microbatches < fault_tolerance + 1) {
    throw InputError("global-microbatches: " + std::to_string(global_microbatches) +
                     " cannot feed f+1 = " + std::to_string(fault_tolerance + 1) +
                     " pipelines (each needs at least one microbatch)");
  }
  if (templates.templates.empty()) {
    throw NoPlanError("no pipeline template fits in memory on up to " + std::to_string(templates.max_nodes) +
                      " nodes, so no plan exists" + wider_stages_hint(cost));
  }
  const int needed = fault_tolerance + 1;
  const auto composition =
      detail::best_composition_on_most_nodes(cost, templates, count, needed, global_microbatches, tails);
  if (!composition) {
    const int smallest = templates.min_nodes();
    std::ostringstream why;
    if (count < needed * smallest) {
      why << count << " nodes cannot form f+1 = " << needed << " pipelines: the smallest template needs " << smallest
          << " nodes, so at least " << needed * smallest << " nodes are required";
    } else if (detail::usable_nodes(templates, count, needed, global_microbatches) == 0) {
      why << "no combination of templates (node counts " << detail::describe_sizes(templates) << ") forms at least "
          << needed << " pipelines from " << count << " nodes";
    } else {
      why << "no composition of templates can take " << global_microbatches
          << " microbatches within the memory limits of its pipelines";
    }
    throw NoPlanError(why.str());
  }
  std::vector<std::vector<std::string>> groups;
  std::size_t next = 0;
  for (int size : composition->template_nodes) {
    groups.emplace_back(nodes.begin() + static_cast<std::ptrdiff_t>(next),
                        nodes.begin() + static_cast<std::ptrdiff_t>(next + size));
    next += static_cast<std::size_t>(size);
  }
  std::vector<std::string> spare(nodes.begin() + static_cast<std::ptrdiff_t>(next), nodes.end());
  return detail::plan_from(cost, templates, *composition, groups, std::move(spare), fault_tolerance);
}

}  // namespace

Plan instantiate(const CostModel& cost, const TemplateSet& templates, const std::vector<std::string>& nodes,
                 int fault_tolerance, int global_microbatches) {
  return instantiate_remembering(cost, templates, nodes, fault_tolerance, global_microbatches, nullptr);
}

namespace {

// plan_cluster with r > 1 pipelines on every node.
ClusterPlan plan_sharing_nodes(const Profile& profile, const std::vector<std::string>& nodes, int fault_tolerance,
                               int global_microbatches, int microbatches, RecomputePolicy recompute,
                               GradientSync gradient_sync, double gradient_bucket_bytes, int pipelines_per_node) {
  const int r = pipelines_per_node;
  const int used = std::min(static_cast<int>(nodes.size()), global_microbatches / r);
  // Each pipeline runs ceil(B / pipelines) microbatches at most.
  const int m = microbatches > 0 ? microbatches : (used < 1 ? 1 : (global_microbatches + used * r - 1) / (used * r));
  CostModel cost(profile, m);
  cost.set_recompute(recompute);
  cost.set_gradient_sync(gradient_sync);
  cost.set_gradient_bucket_bytes(gradient_bucket_bytes);
  cost.set_pipelines_per_node(r);
  const int gpus = cost.gpus_per_node() / r;
  ClusterPlan out;
  out.template_searches = 1;
  out.templates.microbatches = m;
  out.templates.max_nodes = 1;
  auto shared = build_shared_node_template(cost, gpus);
  if (!shared) {
    throw NoPlanError("no pipeline template fits in memory on " + std::to_string(gpus) + " GPU" +
                      (gpus == 1 ? "" : "s") + " (" + std::to_string(r) + " pipelines a node)");
  }
  out.templates.templates = {*shared};
  out.plan = instantiate_sharing_nodes(cost, *shared, nodes, fault_tolerance, global_microbatches);
  return out;
}

// plan_cluster on whole nodes, templates interleaving up to `interleave`.
ClusterPlan plan_whole_nodes(const Profile& profile, const std::vector<std::string>& nodes, int fault_tolerance,
                             int global_microbatches, int microbatches, const Progress& progress,
                             RecomputePolicy recompute, GradientSync gradient_sync, double gradient_bucket_bytes,
                             int tensor_parallel_nodes, int interleave) {
  const int max_nodes = static_cast<int>(nodes.size());
  int searches = 0;
  std::int64_t states = 0;
  // Each search at another M starts from the templates of the one before,
  // and takes its programme's answers where they hold.
  std::optional<TemplateSet> earlier;
  detail::SolveMemo memo;
  detail::SearchScratch scratch;
  detail::TailMemo tails;  // (the rounds share the profile and the synchronisation)
  auto plan_for = [&](int m) {
    CostModel cost(profile, m);
    cost.set_recompute(recompute);
    cost.set_gradient_sync(gradient_sync);
    cost.set_gradient_bucket_bytes(gradient_bucket_bytes);
    cost.set_tensor_parallel_nodes(tensor_parallel_nodes);
    cost.set_interleave(interleave);
    ClusterPlan out;
    out.templates = detail::build_templates_remembering(cost, max_nodes, progress, earlier ? &*earlier : nullptr, memo,
                                                         &scratch);
    earlier = out.templates;
    ++searches;
    states += out.templates.search_states;
    out.plan = instantiate_remembering(cost, out.templates, nodes, fault_tolerance, global_microbatches, &tails);
    return out;
  };
  auto counted = [&](ClusterPlan out) {
    out.template_searches = searches;
    out.template_states = states;
    return out;
  };
  if (microbatches > 0) return counted(plan_for(microbatches));
  // A large M keeps many microbatches in flight and can rule out templates
  // that a plan with more pipelines, each running fewer, could use: halve M
  // until some plan exists.
  int m = std::max(1, (global_microbatches + fault_tolerance) / (fault_tolerance + 1));
  std::optional<ClusterPlan> best;
  std::optional<NoPlanError> first_failure;  // the reason worth reporting
  while (!best) {
    try {
      best = plan_for(m);
    } catch (const NoPlanError& e) {
      if (!first_failure) first_failure = e;
      if (m == 1) throw *first_failure;
      m = std::max(1, m / 2);
    }
  }
  for (int round = 1; round < 4; ++round) {
    int largest = 0;
    for (const auto& p : best->plan.pipelines) largest = std::max(largest, p.microbatches);
    if (largest == m) break;
    m = largest;
    std::optional<ClusterPlan> next;
    try {
      next = plan_for(m);
    } catch (const NoPlanError&) {
      break;  // that M rules out templates the current plan uses
    }
    if (!(next->plan.iteration_ms < best->plan.iteration_ms * (1 - 1e-12))) break;
    best = std::move(next);
  }
  return counted(std::move(*best));
}

}  // namespace

ClusterPlan plan_cluster(const Profile& profile, const std::vector<std::string>& nodes, int fault_tolerance,
                         int global_microbatches, int microbatches, const Progress& progress,
                         RecomputePolicy recompute, GradientSync gradient_sync, double gradient_bucket_bytes,
                         int tensor_parallel_nodes, int pipelines_per_node, int interleave) {
  if (fault_tolerance < 0) throw InputError("fault-tolerance: expected 0 or more, got " + std::to_string(fault_tolerance));
  const int per_node = profile.hardware.gpus_per_node;
  if (pipelines_per_node < 0 || (pipelines_per_node > 0 && per_node % pipelines_per_node != 0)) {
    throw InputError("pipelines per node: expected a divisor of the " + std::to_string(per_node) +
                     " GPUs per node, or 0 to choose, got " + std::to_string(pipelines_per_node));
  }
  if (interleave < 1 || interleave > 64) {
    throw InputError("interleave: expected 1 to 64 chunks a device, got " + std::to_string(interleave));
  }
  if (pipelines_per_node > 1) {
    return plan_sharing_nodes(profile, nodes, fault_tolerance, global_microbatches, microbatches, recompute,
                              gradient_sync, gradient_bucket_bytes, pipelines_per_node);
  }
  if (pipelines_per_node == 0) {
    // Every r, whole-node pipelines first: the fastest plan, the smallest r on a tie.
    std::optional<ClusterPlan> best;
    std::optional<NoPlanError> whole_nodes_failure;
    for (int r = 1; r <= per_node; ++r) {
      if (per_node % r != 0) continue;
      try {
        ClusterPlan candidate = plan_cluster(profile, nodes, fault_tolerance, global_microbatches, microbatches,
                                             progress, recompute, gradient_sync, gradient_bucket_bytes,
                                             tensor_parallel_nodes, r, interleave);
        if (!best || candidate.plan.iteration_ms < best->plan.iteration_ms * (1 - 1e-12)) {
          best = std::move(candidate);
        }
      } catch (const NoPlanError& e) {
        if (r == 1) whole_nodes_failure = e;
      }
    }
    if (!best) throw *whole_nodes_failure;
    return std::move(*best);
  }
  // The searches weigh T(q) as a line, which for interleaved templates is
  // exact at M only: the plan without interleaving can play faster, and
  // then it is the one kept.
  std::optional<ClusterPlan> plain, chosen;
  std::optional<NoPlanError> plain_failure;
  try {
    plain = plan_whole_nodes(profile, nodes, fault_tolerance, global_microbatches, microbatches, progress, recompute,
                             gradient_sync, gradient_bucket_bytes, tensor_parallel_nodes, 1);
  } catch (const NoPlanError& e) {
    if (interleave == 1) throw;
    plain_failure = e;
  }
  if (interleave > 1) {
    try {
      chosen = plan_whole_nodes(profile, nodes, fault_tolerance, global_microbatches, microbatches, progress,
                                recompute, gradient_sync, gradient_bucket_bytes, tensor_parallel_nodes, interleave);
    } catch (const NoPlanError&) {
      if (!plain) throw *plain_failure;
    }
  }
  if (!chosen || (plain && !(chosen->plan.iteration_ms < plain->plan.iteration_ms * (1 - 1e-12)))) {
    return std::move(*plain);
  }
  return std::move(*chosen);
}

}  // namespace oobleck
