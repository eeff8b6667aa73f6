#include "job_inputs.h"

#include <algorithm>
#include <set>

#include "oobleck/common/files.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/train.h"
#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {
namespace {

// What the workers cannot run is refused before anything starts: a stage
// whose degree does not divide the blocks' heads (nor, then, the hidden
// size), or a node whose stages do not cover its GPUs.
void check_runnable(const Plan& plan, const Profile& profile, const std::string& origin) {
  const ModelConfig model = model_of_profile(profile);
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const auto& stages = plan.pipelines[p].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const Stage& st = stages[s];
      const bool has_block = st.layer_begin <= model.layers && st.layer_end > 1;
      const std::string where = origin + ": pipeline " + std::to_string(p) + ", stage " + std::to_string(s) +
                                ": gpus (tensor-parallel degree) " + std::to_string(st.gpus);
      if (!has_block || st.gpus == 1) continue;
      if (model.heads % st.gpus != 0) {
        throw InputError(where + " does not divide the model's " + std::to_string(model.heads) + " attention heads");
      }
      if (model.hidden % st.gpus != 0) {
        throw InputError(where + " does not divide the model's hidden size " + std::to_string(model.hidden));
      }
    }
  }
  (void)recovery::seats_of(plan);  // every node holds a stage
  (void)recovery::worker_seats(plan, profile.hardware.gpus_per_node);  // and its stages fill its GPUs
}

// Injections name nodes of the plan or nodes an earlier line adds (on the
// hostfile's hosts, when there is one).
void check_injections(const MasterOptions& o, const JobInputs& in) {
  const auto ranked = recovery::ranked_nodes(in.initial_plan);
  std::set<std::string> known(ranked.begin(), ranked.end());
  for (const auto& e : o.injections) {
    const std::string where = "--inject line " + std::to_string(e.line) + ": node " + e.node;
    if (e.action == Injection::Action::Add) {
      known.insert(e.node);
      if (!in.hosts.empty() && std::find(in.hosts.begin(), in.hosts.end(), e.node) == in.hosts.end()) {
        throw InputError(where + " is not in " + o.hostfile);
      }
    } else if (!known.count(e.node)) {
      throw InputError(where + " is neither in the plan nor added by an earlier line");
    }
  }
}

}  // namespace

JobInputs load_job_inputs(const MasterOptions& o) {
  for (const auto& [flag, value] :
       {std::pair{"--plan", o.plan_path}, std::pair{"--profile", o.profile_path}, std::pair{"--data", o.data_path}}) {
    if (value.empty()) throw InputError(std::string(flag) + ": required");
  }
  JobInputs in;
  in.profile = load_profile(o.profile_path);
  {
    TrainOptions device_check;
    apply_profile(device_check, in.profile, o.device);  // refuses a device the workers cannot train on
  }
  in.initial_plan = parse_plan(read_text_file(o.plan_path), o.plan_path, in.profile);
  check_runnable(in.initial_plan, in.profile, o.plan_path);
  check_tokens(read_tokens(o.data_path), model_of_profile(in.profile), o.seed, o.data_path);
  require_output_path("--metrics", o.metrics_path);
  require_output_path("--chrome-trace", o.chrome_trace_path);
  if (!o.hostfile.empty()) {
    in.hosts = parse_hostfile(read_text_file(o.hostfile), o.hostfile, in.profile.hardware.gpus_per_node);
    for (const auto& n : recovery::ranked_nodes(in.initial_plan)) {
      if (std::find(in.hosts.begin(), in.hosts.end(), n) == in.hosts.end()) {
        throw InputError(o.hostfile + ": the plan's node " + n + " is not listed");
      }
    }
  }
  check_injections(o, in);
  if (!o.checkpoint_dir.empty() && o.checkpoint_every == 0) {
    throw InputError("--checkpoint " + o.checkpoint_dir + ": needs --checkpoint-every K");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) throw InputError("--checkpoint-every needs --checkpoint DIR");
  if (o.snapshot_every > 0 && (o.mirror_every < 1 || o.mirror_every % o.snapshot_every != 0)) {
    throw InputError("--mirror-every " + std::to_string(o.mirror_every) + ": expected a multiple of --snapshot-every " +
                     std::to_string(o.snapshot_every));
  }
  const ChaosOptions& chaos = o.chaos;
  if (chaos.enabled && chaos.crash_share + chaos.past_f_share > 1) {
    throw InputError("--chaos-crashes and --chaos-past-f: expected shares adding up to at most 1");
  }
  if (chaos.enabled && chaos.crash_share > 0 && o.snapshot_every == 0) {
    throw InputError("--chaos-crashes: a crashed worker restarts from its snapshot; needs --snapshot-every > 0");
  }
  if (chaos.enabled && chaos.past_f_share > 0 && o.snapshot_every == 0 && o.checkpoint_every == 0) {
    throw InputError("--chaos-past-f: a rollback needs snapshots (--snapshot-every > 0) or --checkpoint-every");
  }
  if (!o.resume_dir.empty()) in.resume = read_latest_checkpoint(o.resume_dir, in.profile, o.seed);
  const int first_step = in.resume ? in.resume->step + 1 : 0;
  if (first_step >= o.steps) throw InputError("--steps " + std::to_string(o.steps) + ": nothing left to train");
  return in;
}

}  // namespace oobleck::executor
