#include "live/cpu_quota.h"
#include "job_inputs.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "live/launch.h"
#include "oobleck/common/files.h"
#include "oobleck/common/host_list.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/gpt.h"
#include "oobleck/executor/train.h"
#include "oobleck/recovery/seats.h"
#include "oobleck/recovery/worker_seats.h"

namespace oobleck::executor {
namespace {

// What the workers cannot run is refused before anything starts: a stage
// whose degree does not divide the blocks' heads (nor, then, the hidden
// size), or a node whose stages do not cover its GPUs.
void check_runnable(const Plan& plan, const Profile& profile, const std::string& origin) {
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    if (plan.pipelines[p].interleave > 1) {
      throw InputError(origin + ": pipeline " + std::to_string(p) + ": interleave " +
                       std::to_string(plan.pipelines[p].interleave) +
                       ": interleaved pipelines are planned and simulated but not run live; plan without --interleave");
    }
  }
  const ModelConfig model = model_of_profile(profile);
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const auto& stages = plan.pipelines[p].stages;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const Stage& st = stages[s];
      const bool has_block = st.layer_begin <= model.layers && st.layer_end > 1;
      const std::string where = origin + ": pipeline " + std::to_string(p) + ", stage " + std::to_string(s) +
                                ": gpus (tensor-parallel degree) " + std::to_string(st.gpus);
      if (!has_block || st.gpus == 1) continue;
      if (profile.sequence_parallel) {
        throw InputError(where + ": the profile prices tensor parallelism with sequence parallelism "
                                 "(sequence_parallel: true), which oobleck-run does not run; plan from a profile "
                                 "without it (oobleck-profile measure, or analytic without --sequence-parallel)");
      }
      if (!tensor_parallel_fits(model, st.gpus)) {
        throw InputError(where + " does not divide the model's " + tensor_parallel_limit(model));
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
void check_injections(const MasterOptions& o, const JobInputs& in, const std::string& hosts_origin) {
  const auto ranked = recovery::ranked_nodes(in.initial_plan);
  std::set<std::string> known(ranked.begin(), ranked.end());
  for (const auto& e : o.injections) {
    if (e.action == Injection::Action::KillMaster) continue;
    const std::string where = "--inject line " + std::to_string(e.line) + ": node " + e.node;
    if (e.action == Injection::Action::Add) {
      known.insert(e.node);
      if (!in.hosts.empty() && std::find(in.hosts.begin(), in.hosts.end(), e.node) == in.hosts.end()) {
        throw InputError(where + " is not in " + hosts_origin);
      }
    } else if (!known.count(e.node)) {
      throw InputError(where + " is neither in the plan nor added by an earlier line");
    }
  }
}

// Where the nodes are: the hostfile's hosts (reached over SSH), the Slurm
// allocation's nodes (srun), or this machine; and where they reach the
// master. Returns what names the hosts, for messages.
std::string locate_nodes(const MasterOptions& o, JobInputs& in) {
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  const bool in_allocation = nodelist != nullptr && *nodelist != '\0' && std::getenv("SLURM_JOB_ID") != nullptr;
  const auto allocated = in_allocation ? expand_host_list(nodelist, "SLURM_JOB_NODELIST") : std::vector<std::string>{};
  const auto planned = recovery::ranked_nodes(in.initial_plan);
  const auto listed = [](const std::vector<std::string>& hosts, const std::string& node) {
    return std::find(hosts.begin(), hosts.end(), node) != hosts.end();
  };
  std::string launcher = o.launcher;
  if (launcher == "auto") {
    // Inside an allocation, a plan of other node names (node0.. of a local
    // test, say) runs locally.
    const bool plan_in_allocation =
        in_allocation && std::all_of(planned.begin(), planned.end(), [&](const auto& n) { return listed(allocated, n); });
    launcher = !o.hostfile.empty() ? "ssh" : plan_in_allocation ? "slurm" : "local";
  }
  if (launcher == "ssh" && o.hostfile.empty()) throw InputError("--launcher ssh: needs --hostfile");
  if (launcher != "ssh" && !o.hostfile.empty()) {
    throw InputError("--hostfile " + o.hostfile + ": its hosts are reached over SSH, not with --launcher " + launcher);
  }
  if (launcher == "slurm" && !in_allocation) {
    throw InputError("--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID or SLURM_JOB_NODELIST unset): "
                     "run it under salloc or sbatch");
  }
  in.launcher = launcher;
  std::string origin;
  if (launcher == "ssh") {
    in.hosts = parse_hostfile(read_text_file(o.hostfile), o.hostfile, in.profile.hardware.gpus_per_node);
    origin = o.hostfile;
  } else if (launcher == "slurm") {
    in.hosts = allocated;
    in.slurm = true;
    origin = "the Slurm allocation (SLURM_JOB_NODELIST=" + std::string(nodelist).substr(0, 200) + ")";
  }
  for (const auto& n : planned) {
    if (!in.hosts.empty() && !listed(in.hosts, n)) throw InputError(origin + ": the plan's node " + n + " is not listed");
  }
  const bool remote = std::any_of(in.hosts.begin(), in.hosts.end(), [](const auto& h) { return !is_local_host(h); });
  in.master_addr = !o.master_addr.empty() ? o.master_addr : remote ? this_host_address() : "127.0.0.1";
  return origin;
}

}  // namespace

JobInputs load_job_inputs(const MasterOptions& o) {
  for (const auto& [flag, value] :
       {std::pair{"--plan", o.plan_path}, std::pair{"--profile", o.profile_path}, std::pair{"--data", o.data_path}}) {
    if (value.empty()) throw InputError(std::string(flag) + ": required");
  }
  if (o.node_cpus > 0) {
    if (const std::string why = CpuQuota::unavailable_reason(); !why.empty()) {
      throw InputError("--node-cpus: a node's CPU quota cannot be set here: " + why);
    }
  }
  JobInputs in;
  in.profile = load_profile(o.profile_path);
  {
    TrainOptions device_check;
    apply_profile(device_check, in.profile, o.device);  // refuses a device the workers cannot train on
  }
  in.initial_plan = parse_plan(read_text_file(o.plan_path), o.plan_path, in.profile);
  check_runnable(in.initial_plan, in.profile, o.plan_path);
  const ModelConfig model = model_of_profile(in.profile);
  check_scripted_model(model);
  check_tokens(read_tokens(o.data_path), model, o.seed, o.data_path);
  require_output_path("--metrics", o.metrics_path);
  require_output_path("--chrome-trace", o.chrome_trace_path);
  const std::string hosts_origin = locate_nodes(o, in);
  check_injections(o, in, hosts_origin);
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
