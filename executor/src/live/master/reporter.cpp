#include "reporter.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "oobleck/common.h"
#include "oobleck/common/files.h"

namespace oobleck::executor {

using nlohmann::ordered_json;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out.empty() ? "-" : out;
}

namespace {

// The metrics a master that died left: whole lines only, ending with the
// last committed step's record.
std::string reconciled(const std::string& text, const std::string& last_step_record) {
  const std::size_t cut = text.rfind('\n');
  const std::string whole = cut == std::string::npos ? std::string() : text.substr(0, cut + 1);
  if (last_step_record.empty()) return whole;
  std::vector<std::string> lines;
  for (std::size_t from = 0; from < whole.size();) {
    const std::size_t next = whole.find('\n', from);
    lines.push_back(whole.substr(from, next - from));
    from = next + 1;
  }
  const int last_step = nlohmann::json::parse(last_step_record).at("step").get<int>();
  for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
    const auto record = nlohmann::json::parse(*line, nullptr, false);
    if (record.is_object() && record.value("kind", "") == "step") {
      if (record.value("step", -1) == last_step) return whole;  // written before the death
      break;
    }
  }
  return whole + last_step_record + "\n";
}

}  // namespace

Reporter::Reporter(const std::string& metrics_path, const std::optional<std::string>& resumed_after) {
  if (metrics_path.empty()) return;
  if (resumed_after) {
    std::string text;
    if (std::filesystem::exists(metrics_path)) text = read_text_file(metrics_path);
    write_file_atomically(metrics_path, reconciled(text, *resumed_after));
    metrics_.open(metrics_path, std::ios::app);
  } else {
    metrics_.open(metrics_path, std::ios::trunc);
  }
  if (!metrics_) throw InputError("--metrics " + metrics_path + ": cannot write");
}

void Reporter::emit(const std::string& line) {
  if (!metrics_.is_open()) return;
  metrics_ << line << "\n";
  metrics_.flush();
}

void Reporter::run_started(const std::string& plan_path, const std::string& profile_path, int steps, std::uint64_t seed,
                           int nodes) {
  emit(ordered_json{{"kind", "run"},
                    {"format", "oobleck.metrics.v1"},
                    {"plan", plan_path},
                    {"profile", profile_path},
                    {"steps", steps},
                    {"seed", seed},
                    {"nodes", nodes}}
           .dump());
}

void Reporter::generation_started(const recovery::Generation& g, Milliseconds elapsed_ms) {
  emit(recovery::generation_record(g, elapsed_ms));
  if (g.rolled_back_from >= 0) {
    // Past f: the steps after the save are trained again.
    emit(ordered_json{{"kind", "rollback"},
                      {"at_ms", elapsed_ms},
                      {"generation", g.number},
                      {"from_step", g.rolled_back_from},
                      {"to_step", g.resume_step - 1},
                      {"source", recovery::source_name(g.source)}}
             .dump());
    const char* where = g.source == recovery::StateSource::memory   ? "snapshot in the agents' memory"
                        : g.source == recovery::StateSource::mirror ? "snapshot in the agents' memory (mirrors)"
                                                                    : "checkpoint";
    std::fprintf(stderr, "oobleck-run: past f: rolling back from step %d to the %s after step %d\n",
                 g.rolled_back_from, where, g.resume_step - 1);
  }
  if (g.number == 1) return;
  std::fprintf(stderr, "oobleck-run: generation %d: lost %s, added %s; pipelines %s; resuming at step %d\n", g.number,
               joined(g.lost).c_str(), joined(g.added).c_str(), recovery::pipeline_shape(g.plan).c_str(),
               g.resume_step);
}

std::string Reporter::step_record(const StepReport& r) {
  ordered_json record{{"kind", "step"},
                      {"step", r.step},
                      {"loss", r.loss},
                      {"samples", r.samples},
                      {"step_samples", r.step_samples},
                      {"iteration_ms", r.iteration_ms},
                      {"elapsed_ms", r.elapsed_ms},
                      {"generation", r.generation}};
  if (!r.node_speeds.empty()) record["node_speeds"] = r.node_speeds;
  if (r.predicted_ms >= 0) record["predicted_ms"] = r.predicted_ms;
  return record.dump();
}

void Reporter::speeds(const recovery::SpeedsWeighed& w, Milliseconds elapsed_ms) {
  emit(recovery::speeds_record(w, elapsed_ms));
}

void Reporter::master_restarted(Milliseconds elapsed_ms, int committed_step, const std::string& state_dir,
                                double unix_ms) {
  emit(ordered_json{{"kind", "master_restart"},
                    {"at_ms", elapsed_ms},
                    {"resumed_after_step", committed_step},
                    {"state_dir", state_dir},
                    {"unix_ms", unix_ms}}
           .dump());
}

void Reporter::step(const StepReport& r) {
  emit(step_record(r));
  std::printf("step %3d  loss %.6f  samples %lld  %.1f ms\n", r.step, r.loss, static_cast<long long>(r.samples),
              r.iteration_ms);
  std::fflush(stdout);
}

void Reporter::reconfiguration(const RecoveryTiming& t, bool superseded, Milliseconds now) {
  const double resume_ms =
      superseded ? 0.0 : std::max(0.0, now - t.planned_ms - t.held_ms - t.rebuild_ms - t.copy_ms);
  const double detect_ms = t.failure_ms >= 0 ? t.detected_ms - t.failure_ms : 0.0;
  const double recovery_ms = t.failure_ms >= 0 ? now - t.failure_ms : now - t.planned_ms;
  emit(ordered_json{{"kind", "reconfiguration"},
                    {"generation", t.generation},
                    {"lost", t.lost},
                    {"added", t.added},
                    {"reasons", t.reasons},
                    {"resume_step", t.resume_step},
                    {"pipelines", t.pipelines},
                    {"detect_ms", detect_ms},
                    {"plan_ms", t.plan_ms},
                    {"held_ms", t.held_ms},
                    {"communicators_ms", t.rebuild_ms},
                    {"copy_ms", t.copy_ms},
                    {"copy_bytes", t.copy_bytes},
                    {"resume_ms", resume_ms},
                    {"recovery_ms", recovery_ms},
                    {"kept_microbatches", t.kept_microbatches},
                    {"held_timed_out", t.held_timed_out},
                    {"superseded", superseded}}
           .dump());
  if (superseded) {
    std::printf("generation %d superseded before it trained (lost %s, added %s)\n", t.generation,
                joined(t.lost).c_str(), joined(t.added).c_str());
  } else {
    std::printf(
        "reconfigured (generation %d): lost %s, added %s -> pipelines %s; detect %.1f ms, plan %.1f ms, "
        "passes kept %d microbatches (waited %.1f ms), communicators %.1f ms, copy %.1f ms (%lld bytes), "
        "resume %.1f ms; recovery %.1f ms\n",
        t.generation, joined(t.lost).c_str(), joined(t.added).c_str(), t.pipelines.c_str(), detect_ms, t.plan_ms,
        t.kept_microbatches, t.held_ms, t.rebuild_ms, t.copy_ms, static_cast<long long>(t.copy_bytes), resume_ms,
        recovery_ms);
  }
  std::fflush(stdout);
}

void Reporter::restart(const RestartTiming& t, Milliseconds now) {
  const Milliseconds from = t.crash_ms >= 0 ? t.crash_ms : t.detected_ms;
  emit(ordered_json{{"kind", "restart"},
                    {"generation", t.generation},
                    {"node", t.node},
                    {"gpu", t.gpu},
                    {"resume_step", t.resume_step},
                    {"detect_ms", t.detected_ms - from},
                    {"restore_ms", t.restored_ms - t.detected_ms},
                    {"standby", t.standby},
                    {"process_ms", std::max(0.0, t.hello_ms - t.detected_ms)},
                    {"communicators_ms", t.communicators_ms},
                    {"read_ms", t.read_ms},
                    {"recovery_ms", now - from}}
           .dump());
  std::fprintf(stderr,
               "oobleck-run: %s GPU %d restarted in place (%s): detected in %.0f ms, state and communicators back "
               "%.0f ms later, step %d done %.0f ms after the crash\n",
               t.node.c_str(), t.gpu, t.standby ? "forked from its node's zygote" : "a new process", t.detected_ms - from,
               t.restored_ms - t.detected_ms, t.resume_step, now - from);
}

std::string Reporter::no_plan(int generation, const recovery::GiveUp& g, int layers, std::int64_t state_bytes,
                              std::uint64_t seed) {
  const int committed = g.committed_step;
  const std::string message =
      g.why + ". The layers' training state after step " + std::to_string(committed) +
      " is gone. To go on, a checkpoint must hold the state after step " + std::to_string(committed) +
      ": the weights and AdamW state (both moments, step count) of all " + std::to_string(layers) + " layers (" +
      std::to_string(state_bytes) + " bytes in the profile's accounting), and the step to resume at (" +
      std::to_string(committed + 1) + ") with the seed (" + std::to_string(seed) +
      "): the data order depends on nothing else";
  emit(ordered_json{{"kind", "no_plan"},
                    {"generation", generation},
                    {"lost", g.lost},
                    {"added", g.added},
                    {"resume_step", committed + 1},
                    {"checkpoint_bytes", state_bytes},
                    {"message", message}}
           .dump());
  return message;
}

}  // namespace oobleck::executor
