#include "checkpoints.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "checkpoint_manifest.h"
#include "oobleck/common/files.h"

namespace oobleck::executor {
namespace {

using Json = nlohmann::json;

std::string folder_of(int step) { return "step-" + std::to_string(step); }

}  // namespace

ResumePoint read_latest_checkpoint(const std::string& dir, const Profile& profile, std::uint64_t seed) {
  const std::string latest = dir + "/latest.json";
  const CheckpointManifest manifest = parse_checkpoint_manifest(read_text_file(latest), latest);
  if (manifest.layers != static_cast<int>(profile.layers.size()) || manifest.seed != seed) {
    throw InputError(latest + ": saved for another model or seed (layers " + std::to_string(manifest.layers) +
                     ", seed " + std::to_string(manifest.seed) + "; this run: layers " +
                     std::to_string(profile.layers.size()) + ", seed " + std::to_string(seed) + ")");
  }
  return {manifest.step, (std::filesystem::path(dir) / manifest.folder).string()};
}

CheckpointWriter::CheckpointWriter(std::string dir, int every, const Profile& profile, std::uint64_t seed)
    : dir_(std::move(dir)), every_(every), profile_(profile), seed_(seed) {
  if (every_ > 0) std::filesystem::create_directories(dir_);
}

std::optional<protocol::Save> CheckpointWriter::save_for(int step, bool finish,
                                                         const std::vector<std::string>& savers) {
  if (every_ <= 0 || ((step + 1) % every_ != 0 && !finish)) return std::nullopt;
  protocol::Save save{folder(step), step};
  std::filesystem::create_directories(save.folder);
  pending_[step] = std::set<std::string>(savers.begin(), savers.end());
  return save;
}

bool CheckpointWriter::saved(int step, const std::string& node) {
  auto pending = pending_.find(step);
  if (pending == pending_.end()) return false;
  pending->second.erase(node);
  if (!pending->second.empty()) return false;
  pending_.erase(pending);
  finish(step);
  return true;
}

void CheckpointWriter::saver_lost(const std::string& node) {
  const std::string prefix = node + " GPU ";
  std::erase_if(pending_, [&](const auto& step_savers) {
    return std::any_of(step_savers.second.begin(), step_savers.second.end(),
                       [&](const std::string& saver) { return saver.rfind(prefix, 0) == 0; });
  });
}

std::string CheckpointWriter::folder(int step) const {
  return std::filesystem::absolute(std::filesystem::path(dir_) / folder_of(step)).string();
}

void CheckpointWriter::forget_after(int step) {
  for (auto it = pending_.upper_bound(step); it != pending_.end();) {
    remove_tree(std::filesystem::path(dir_) / folder_of(it->first));
    it = pending_.erase(it);
  }
}

// Every layer of the state after `step` is on disk: the manifest makes it a
// checkpoint, latest.json points at it, and older ones go.
void CheckpointWriter::finish(int step) {
  const std::string folder = folder_of(step);
  const Json manifest = {
      {"format", "oobleck.checkpoint.v1"}, {"step", step},  {"folder", folder},
      {"layers", profile_.layers.size()},  {"seed", seed_}, {"profile_fingerprint", profile_fingerprint(profile_)}};
  sync_folder(std::filesystem::path(dir_) / folder);
  write_file_atomically(std::filesystem::path(dir_) / folder / "manifest.json", manifest.dump(2) + "\n");
  write_file_atomically(std::filesystem::path(dir_) / "latest.json", manifest.dump(2) + "\n");
  last_complete_ = step;
  std::vector<std::filesystem::path> older;  // (a later one may be in the making: it stays)
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step-", 0) == 0 && std::atoi(n.c_str() + 5) < step) {
      older.push_back(entry.path());
    }
  }
  for (const auto& path : older) remove_tree(path);
}

}  // namespace oobleck::executor
