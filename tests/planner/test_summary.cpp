// What reports show about plans and template sets, and the defaults the
// command line derives from them.
#include <doctest/doctest.h>

#include <set>
#include <utility>
#include <vector>

#include "oobleck/planner.h"
#include "reference.h"

using namespace oobleck;

namespace {

Pipeline pipeline(int template_nodes, int microbatches, Milliseconds iteration_ms, const std::string& first_name) {
  Pipeline p;
  p.template_nodes = template_nodes;
  p.microbatches = microbatches;
  p.iteration_ms = iteration_ms;
  for (int i = 0; i < template_nodes; ++i) p.nodes.push_back(first_name + std::to_string(i));
  return p;
}

// Pipelines of 2, 3 and 2 nodes (two alike), one spare node.
Plan small_plan() {
  Plan plan;
  plan.pipelines = {pipeline(2, 4, 10.0, "a"), pipeline(3, 4, 8.0, "b"), pipeline(2, 4, 11.0, "c"),
                    pipeline(2, 3, 9.0, "d")};
  plan.spare_nodes = {"spare"};
  return plan;
}

}  // namespace

TEST_CASE("summary: node counts, template sizes and groups of a plan") {
  const Plan plan = small_plan();
  CHECK(plan_node_count(plan) == 2 + 3 + 2 + 2 + 1);
  CHECK(template_sizes_used(plan) == std::set<int>{2, 3});
  const auto groups = group_pipelines(plan);
  REQUIRE(groups.size() == 3);
  // Largest template first, then the most microbatches; a group's time is
  // its last pipeline's.
  CHECK(groups[0].template_nodes == 3);
  CHECK(groups[0].count == 1);
  CHECK(groups[1].template_nodes == 2);
  CHECK(groups[1].microbatches == 4);
  CHECK(groups[1].count == 2);
  CHECK(groups[1].iteration_ms == 11.0);
  CHECK(groups[2].microbatches == 3);
  CHECK(groups[2].count == 1);
  CHECK(group_pipelines(Plan{}).empty());
}

TEST_CASE("summary: nodes after a change, never fewer than one") {
  const Plan plan = small_plan();
  CHECK(nodes_after(plan, 0, 0) == 10);
  CHECK(nodes_after(plan, 3, 1) == 8);
  CHECK(nodes_after(plan, 12, 0) == 1);
}

TEST_CASE("summary: numbered nodes") {
  CHECK(numbered_nodes(3) == std::vector<std::string>{"node0", "node1", "node2"});
  CHECK(numbered_nodes(0).empty());
}

TEST_CASE("summary: node counts without a template, as ranges") {
  TemplateSet templates;
  templates.max_nodes = 9;
  for (int n : {3, 4, 6}) {
    PipelineTemplate t;
    t.nodes = n;
    templates.templates.push_back(t);
  }
  CHECK(nodes_without_template(templates) == std::vector<std::pair<int, int>>{{1, 2}, {5, 5}, {7, 9}});
  templates.max_nodes = 4;
  CHECK(nodes_without_template(templates) == std::vector<std::pair<int, int>>{{1, 2}});
}

TEST_CASE("summary: the default M and whether a plan was made from a profile") {
  const Profile profile = test::uniform_profile(6, 2, 1.0, 2.0, 400, 10, 1000);
  CHECK(default_template_microbatches(profile, 2) == 4);    // 2 nodes x 2 GPUs
  CHECK(default_template_microbatches(profile, 100) == 6);  // no more stages than layers

  Plan plan;
  CHECK(plan_matches_profile(plan, profile));  // records no fingerprint
  plan.profile_fingerprint = profile_fingerprint(profile);
  CHECK(plan_matches_profile(plan, profile));
  const Profile other = test::uniform_profile(6, 2, 1.0, 3.0, 400, 10, 1000);
  CHECK_FALSE(plan_matches_profile(plan, other));
}
