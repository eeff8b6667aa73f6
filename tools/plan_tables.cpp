// oobleck-plan's readable tables (plan_tables.h).
#include "plan_tables.h"

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

namespace oobleck::plan_tables {
namespace {

const char* recompute_mark(Recompute recompute) {
  return recompute == Recompute::full ? "r" : recompute == Recompute::selective ? "s" : "";
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, ms >= 100 ? "%.1f" : ms >= 1 ? "%.2f" : "%.4f", ms);
  return text;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", bytes, units[unit]);
  return text;
}

// "n0 [0,13)x4 [13,20)x4 | n1 [20,26)x8"; a stage over several nodes:
// "n2-n3 [26,32)x16". Long pipelines compress runs of nodes laid out
// alike: "n2-n40 [9,48) 1x8 each" (layers x GPUs per stage; "each 2
// nodes" where a stage spans two). A stage that recomputes its activations
// is marked "r" (its attention cores alone: "s").
std::string layout(const std::vector<Stage>& stages) {
  std::ostringstream out;
  const int nodes = stages.empty() ? 0 : stages.back().node + stages.back().node_span;
  if (nodes <= 8) {
    int node = -1;
    for (const auto& s : stages) {
      if (s.node != node) {
        out << (node < 0 ? "" : " | ") << "n" << s.node;
        if (s.node_span > 1) out << "-n" << s.node + s.node_span - 1;
        node = s.node;
      }
      out << " [" << s.layer_begin << "," << s.layer_end << ")x" << s.gpus << recompute_mark(s.recompute);
    }
    return out.str();
  }
  // Units: a node, or the nodes of one stage over several.
  struct UnitShape {
    int first_node = 0, span = 1;
    int first_layer = 0, end_layer = 0;
    std::string shape;  // "2x4+3x4"
  };
  std::vector<UnitShape> units;
  for (const auto& s : stages) {
    if (units.empty() || units.back().first_node != s.node) {
      units.push_back({s.node, s.node_span, s.layer_begin, s.layer_end, ""});
    }
    auto& n = units.back();
    n.end_layer = s.layer_end;
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "+" + to_string(...).
    if (!n.shape.empty()) n.shape += '+';
    n.shape.append(std::to_string(s.layer_end - s.layer_begin)).append("x").append(std::to_string(s.gpus));
    n.shape += recompute_mark(s.recompute);
  }
  const auto count = units.size();
  for (std::size_t a = 0; a < count;) {
    std::size_t b = a;
    while (b + 1 < count && units[b + 1].shape == units[a].shape && units[b + 1].span == units[a].span) ++b;
    const int last_node = units[b].first_node + units[b].span - 1;
    out << (a ? " | " : "") << "n" << units[a].first_node;
    if (last_node > units[a].first_node) out << "-n" << last_node;
    out << " [" << units[a].first_layer << "," << units[b].end_layer << ") " << units[a].shape;
    if (b > a) out << " each";
    if (b > a && units[a].span > 1) out << " " << units[a].span << " nodes";
    a = b + 1;
  }
  return out.str();
}

// An interleaved template: "3 chunks a device: n0-n15, 16 devices of 8
// GPUs, 48 chunks of 2-3 layers".
std::string interleaved_layout(const PipelineTemplate& t) {
  const std::size_t devices = t.stages.size() / static_cast<std::size_t>(t.interleave);
  int fewest = 1 << 30, most = 0;
  for (const auto& s : t.stages) {
    fewest = std::min(fewest, s.layer_end - s.layer_begin);
    most = std::max(most, s.layer_end - s.layer_begin);
  }
  std::ostringstream out;
  out << t.interleave << " chunks a device: n0";
  if (t.nodes > 1) out << "-n" << t.nodes - 1;
  out << ", " << devices << " devices of " << t.stages.front().gpus << " GPUs, " << t.stages.size()
      << " chunks of " << fewest;
  if (most > fewest) out << "-" << most;
  out << " layers" << recompute_mark(t.stages.front().recompute);
  return out.str();
}

}  // namespace

void print_profile_header(const Profile& profile) {
  std::cout << "Profile   " << profile.origin << ": " << (profile.model_name.empty() ? "model" : profile.model_name)
            << ", " << profile.layers.size() << " layers, microbatch size " << profile.microbatch_size << "\n"
            << "Hardware  " << profile.hardware.name << ": " << profile.hardware.gpus_per_node << " GPUs per node, "
            << format_bytes(static_cast<double>(profile.hardware.gpu_memory_bytes)) << " per GPU\n";
}

// All templates, or only those with the given node counts.
void print_templates(const TemplateSet& templates, const std::set<int>& only) {
  std::printf("\nTemplates (optimised for M = %d microbatches; T(m) = T(1) + (m-1) x slowest stage)\n",
              templates.microbatches);
  if (!only.empty()) {
    std::printf("%zu computed for %d to %d nodes; those the plan uses:\n", templates.templates.size(),
                templates.min_nodes(), templates.templates.back().nodes);
  }
  std::printf("%6s %7s %12s %12s %12s %8s  %s\n", "nodes", "stages", "T(M) ms", "T(1) ms", "slowest ms", "max m",
              "layout (node: [layers) x GPUs; r: recomputes; s: its attention)");
  for (const auto& t : templates.templates) {
    if (!only.empty() && !only.count(t.nodes)) continue;
    std::printf("%6d %7zu %12s %12s %12s %8s  %s\n", t.nodes, t.stages.size(), format_ms(t.iteration_ms).c_str(),
                format_ms(t.first_microbatch_ms).c_str(), format_ms(t.bottleneck_ms).c_str(),
                t.max_microbatches > 0 ? std::to_string(t.max_microbatches).c_str() : "-",
                (t.interleave > 1 ? interleaved_layout(t) : layout(t.stages)).c_str());
  }
  const auto missing = nodes_without_template(templates);
  if (!missing.empty() && only.empty()) {
    std::ostringstream out;
    for (std::size_t i = 0; i < missing.size(); ++i) {
      const auto [first, last] = missing[i];
      out << (i ? ", " : "") << first;
      if (last > first) out << "-" << last;
    }
    std::printf("No template for %s nodes (memory, or more nodes than layers).\n", out.str().c_str());
  }
}

void print_plan(const Plan& plan) {
  std::printf("\nPlan: %zu pipelines on %d nodes, fault tolerance f = %d, %d microbatches per iteration\n",
              plan.pipelines.size(), plan_node_count(plan), plan.fault_tolerance, plan.global_microbatches);
  if (plan.pipelines.size() > 16) {
    // Large plans: one row per kind of pipeline.
    std::printf("%10s %6s %13s %13s\n", "pipelines", "nodes", "microbatches", "iteration ms");
    for (const auto& group : group_pipelines(plan)) {
      std::printf("%10d %6d %13d %13s\n", group.count, group.template_nodes, group.microbatches,
                  format_ms(group.iteration_ms).c_str());
    }
  }
  if (plan.pipelines.size() <= 16) {
    std::printf("%9s %6s %13s %13s  %s\n", "pipeline", "nodes", "microbatches", "iteration ms", "node names");
  }
  for (std::size_t i = 0; i < plan.pipelines.size() && plan.pipelines.size() <= 16; ++i) {
    const auto& p = plan.pipelines[i];
    std::string names;
    for (std::size_t n = 0; n < p.nodes.size(); ++n) {
      if (n == 6 && p.nodes.size() > 8) {
        names += " ... " + p.nodes.back();
        break;
      }
      names += (n ? " " : "") + p.nodes[n];
    }
    std::printf("%9zu %6d %13d %13s  %s\n", i, p.template_nodes, p.microbatches, format_ms(p.iteration_ms).c_str(),
                names.c_str());
  }
  if (plan.pipelines_per_node > 1 && !plan.pipelines.empty()) {
    int gpus = 0;
    for (const auto& st : plan.pipelines.front().stages) gpus += st.gpus;
    std::printf("Pipelines share nodes: %d on each node, each on %d of its GPUs\n", plan.pipelines_per_node, gpus);
  }
  if (!plan.spare_nodes.empty()) {
    std::printf("Spare (no template combination uses them): %zu nodes\n", plan.spare_nodes.size());
  }
  std::printf("Iteration %s ms = slowest pipeline %s ms + gradient synchronisation and optimizer steps %s ms\n",
              format_ms(plan.iteration_ms).c_str(), format_ms(plan.pipelines_ms).c_str(),
              format_ms(plan.sync_ms).c_str());
  if (plan.pipelines_per_node > 1) {
    const int nodes = plan_node_count(plan) - static_cast<int>(plan.spare_nodes.size());
    if (nodes < plan.fault_tolerance + 1) {
      std::printf("Warning: pipelines on only %d nodes: the plan survives %d more node failures, not f = %d\n", nodes,
                  nodes - 1, plan.fault_tolerance);
    }
  } else if (static_cast<int>(plan.pipelines.size()) < plan.fault_tolerance + 1) {
    std::printf("Warning: only %zu pipelines: the plan survives %zu more node failures, not f = %d\n",
                plan.pipelines.size(), plan.pipelines.size() - 1, plan.fault_tolerance);
  }
}

void print_reconfiguration(const Reconfiguration& result, const TemplateSet& templates) {
  print_templates(templates, template_sizes_used(result.plan));
  print_plan(result.plan);
  std::printf("\nState copies: %zu layer copies, %s, predicted %s ms\n", result.transfers.size(),
              format_bytes(static_cast<double>(result.copy_bytes)).c_str(), format_ms(result.copy_ms).c_str());
  const std::size_t shown = std::min<std::size_t>(result.transfers.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& t = result.transfers[i];
    std::printf("  layer %4d  %s -> %s  %s\n", t.layer, t.from_node.c_str(), t.to_node.c_str(),
                format_bytes(static_cast<double>(t.bytes)).c_str());
  }
  if (shown < result.transfers.size()) std::printf("  ... %zu more (see --json)\n", result.transfers.size() - shown);
}

// The sizes tried, each with its batch in microbatches and its plan's
// iteration or why it has none.
void print_sizes(const SizedClusterPlan& result) {
  std::printf("\nMicrobatch sizes (the same samples per iteration)\n");
  std::printf("  size  microbatches  iteration ms\n");
  for (std::size_t i = 0; i < result.choices.size(); ++i) {
    const auto& c = result.choices[i];
    if (c.planned) {
      std::printf("%6d  %12d  %12.1f%s\n", c.microbatch_size, c.global_microbatches, c.iteration_ms,
                  i == result.chosen ? "  chosen" : "");
    } else {
      std::printf("%6d  %12s  no plan: %s\n", c.microbatch_size,
                  c.global_microbatches > 0 ? std::to_string(c.global_microbatches).c_str() : "-", c.problem.c_str());
    }
  }
}

}  // namespace oobleck::plan_tables
