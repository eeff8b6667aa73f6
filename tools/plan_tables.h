// oobleck-plan's readable tables: the profile, the templates, a plan, a
// reconfiguration and the microbatch sizes tried.
#pragma once

#include <set>

#include "oobleck/planner.h"

namespace oobleck::plan_tables {

void print_profile_header(const Profile& profile);
// Only the templates of `only`'s node counts, when given.
void print_templates(const TemplateSet& templates, const std::set<int>& only = {});
void print_plan(const Plan& plan);
void print_reconfiguration(const Reconfiguration& result, const TemplateSet& templates);
void print_sizes(const SizedClusterPlan& result);

}  // namespace oobleck::plan_tables
