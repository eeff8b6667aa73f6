#include "parsers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "oobleck/common.h"
#include "oobleck/common/host_list.h"
#include "oobleck/executor/analytic.h"
#include "oobleck/executor/live.h"
#include "oobleck/executor/model_config.h"
#include "oobleck/planner.h"
#include "oobleck/sim/replay.h"
#include "oobleck/sim/trace.h"
#include "oobleck/validation.h"
#include "live/master/checkpoint_manifest.h"
#include "live/master/master_state.h"

#ifndef OOBLECK_SOURCE_DIR
#error "OOBLECK_SOURCE_DIR must name the repository: plans are checked against a profile from it"
#endif

namespace oobleck::fuzz {
namespace {

// The parsers name their input in messages; a fixed origin keeps them short.
const std::string kOrigin = "input";

template <typename Function>
void expecting_input_error(Function&& parse) {
  try {
    parse();
  } catch (const InputError&) {
  }
}

void parse_profile_text(std::string_view input) {
  expecting_input_error([&] { (void)parse_profile(input, kOrigin); });
}

// Plans only make sense against a profile: a small fixed one with 8 GPUs
// per node, so that stages of several GPUs are valid too.
const Profile& plan_profile() {
  static const Profile profile =
      load_profile(std::filesystem::path(OOBLECK_SOURCE_DIR) / "profiles" / "gpt3-1.3b-a100.handwritten.json");
  return profile;
}

void parse_plan_text(std::string_view input) {
  const Profile& profile = plan_profile();
  try {
    (void)parse_plan(input, kOrigin, profile);
  } catch (const InputError&) {
  } catch (const NoPlanError&) {
  }
}

void parse_trace_events(std::string_view input) {
  expecting_input_error([&] { (void)sim::parse_trace(input, kOrigin); });
}

void parse_trace_counts(std::string_view input) {
  expecting_input_error([&] { (void)sim::parse_count_series(input, kOrigin); });
}

void parse_scenario_text(std::string_view input) {
  expecting_input_error([&] {
    const sim::Scenario scenario = sim::parse_scenario(input, kOrigin);
    // What a replay asks of a scenario it took: every policy's overrides and
    // their iteration times, at node counts in and around any table.
    for (const sim::Policy policy : sim::kAllPolicies) {
      const sim::Overrides o = scenario.overrides_for(policy);
      for (const int nodes : {1, 2, 7, 1000, 1'000'000}) {
        if (const auto ms = sim::overridden_iteration_ms(o, nodes); ms && !(*ms > 0)) std::abort();
      }
    }
  });
}

// Both lists of hosts: a hostfile, and Slurm's compact list (SLURM_JOB_NODELIST).
void parse_hostfile_text(std::string_view input) {
  expecting_input_error([&] { (void)parse_hostfile(input, kOrigin, 8); });
  expecting_input_error([&] { (void)expand_host_list(input, kOrigin, 4096); });
}

void parse_injections_text(std::string_view input) {
  expecting_input_error([&] { (void)executor::parse_injections(input, kOrigin); });
}

// A validation dataset: vTrain's CSV, or JSON when it starts as an object.
void parse_validation_data(std::string_view input) {
  expecting_input_error([&] {
    const bool csv = input.empty() || input.front() != '{';
    for (const auto& run : validation::parse_dataset(input, kOrigin, csv, "fuzz")) {
      (void)validation::unsupported(run);
      (void)validation::padded_vocab(run.model.vocab, run.tensor);
    }
  });
}

void parse_model_config_text(std::string_view input) {
  expecting_input_error([&] {
    const executor::ModelConfig config = executor::parse_model_config(input, kOrigin);
    // What every user of a config computes next.
    (void)executor::model_parameters(config);
  });
}

void parse_torchscript_manifest_text(std::string_view input) {
  expecting_input_error([&] {
    const executor::ModelConfig config = executor::parse_scripted_manifest(input, "/nonexistent/manifest.json");
    executor::validate(config, kOrigin);
    (void)executor::model_parameters(config);
    for (int i = 0; i < executor::pipeline_layers(config); ++i) (void)executor::layer_name(config, i);
  });
}

// load_hardware reads a file whose name ends in .json: a link of that name
// to an in-memory file, rewritten for every input, keeps the disk out of it.
class HardwareFile {
 public:
  HardwareFile() {
    descriptor_ = memfd_create("oobleck-fuzz-hardware", MFD_CLOEXEC);
    std::string folder_template = (std::filesystem::temp_directory_path() / "oobleck-fuzz-XXXXXX").string();
    if (descriptor_ < 0 || !mkdtemp(folder_template.data())) fail("cannot make an in-memory file");
    folder_ = folder_template;
    path_ = (folder_ / "hardware.json").string();
    std::filesystem::create_symlink("/proc/self/fd/" + std::to_string(descriptor_), path_);
  }
  ~HardwareFile() {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
    close(descriptor_);
  }
  HardwareFile(const HardwareFile&) = delete;
  HardwareFile& operator=(const HardwareFile&) = delete;

  const std::string& write(std::string_view input) {
    if (ftruncate(descriptor_, 0) != 0) fail("cannot empty the in-memory file");
    std::size_t written = 0;
    while (written < input.size()) {
      const ssize_t n = pwrite(descriptor_, input.data() + written, input.size() - written,
                               static_cast<off_t>(written));
      if (n <= 0) fail("cannot write the in-memory file");
      written += static_cast<std::size_t>(n);
    }
    return path_;
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::perror(what);
    std::abort();
  }
  int descriptor_ = -1;
  std::filesystem::path folder_;
  std::string path_;
};

void parse_hardware_file(std::string_view input) {
  static HardwareFile file;
  const std::string& path = file.write(input);
  expecting_input_error([&] { (void)executor::load_hardware(path); });
}

void parse_checkpoint_manifest_text(std::string_view input) {
  expecting_input_error([&] { (void)executor::parse_checkpoint_manifest(input, kOrigin); });
}

// The state a master keeps for its restart; its plans against the fixed
// profile, whatever profile path it names.
void parse_master_state_text(std::string_view input) {
  expecting_input_error([&] {
    (void)executor::parse_master_state(input, kOrigin, [](const std::string&) { return plan_profile(); });
  });
}

constexpr std::array kTargets = {
    ParserTarget{"profile", parse_profile_text},
    ParserTarget{"plan", parse_plan_text},
    ParserTarget{"trace_events", parse_trace_events},
    ParserTarget{"trace_counts", parse_trace_counts},
    ParserTarget{"scenario", parse_scenario_text},
    ParserTarget{"hostfile", parse_hostfile_text},
    ParserTarget{"injections", parse_injections_text},
    ParserTarget{"model_config", parse_model_config_text},
    ParserTarget{"hardware", parse_hardware_file},
    ParserTarget{"checkpoint_manifest", parse_checkpoint_manifest_text},
    ParserTarget{"master_state", parse_master_state_text},
    ParserTarget{"validation_data", parse_validation_data},
    ParserTarget{"torchscript_manifest", parse_torchscript_manifest_text},
};

}  // namespace

std::span<const ParserTarget> parser_targets() { return kTargets; }

const ParserTarget* find_parser_target(std::string_view name) {
  for (const auto& target : kTargets) {
    if (target.name == name) return &target;
  }
  return nullptr;
}

}  // namespace oobleck::fuzz
