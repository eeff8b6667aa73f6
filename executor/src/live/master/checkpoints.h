// Durable checkpoints of a live run: the layers' state after a committed
// step, written by the workers into a folder per step, made a checkpoint by
// the master's manifest once every layer is on disk, and pointed at by
// latest.json (format oobleck.checkpoint.v1). Older ones go.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "protocol/protocol.h"
#include "oobleck/planner.h"

namespace oobleck::executor {

// Where a run resumes from: the step the checkpoint holds the state after.
struct ResumePoint {
  int step = -1;
  std::string folder;
};

// latest.json in `dir`; InputError naming it when it is not a checkpoint of
// this model and seed.
[[nodiscard]] ResumePoint read_latest_checkpoint(const std::string& dir, const Profile& profile, std::uint64_t seed);

class CheckpointWriter {
 public:
  // `every` 0: none. Creates `dir`.
  CheckpointWriter(std::string dir, int every, const Profile& profile, std::uint64_t seed);

  // What the commit of `step` asks the workers to save, if anything; the
  // checkpoint is complete once each of `savers` said it saved.
  std::optional<protocol::Save> save_for(int step, bool finish, const std::vector<std::string>& savers);
  // True when this made the checkpoint of `step` complete.
  bool saved(int step, const std::string& node);
  // The folder of the checkpoint after `step`.
  [[nodiscard]] std::string folder(int step) const;
  // A rollback to the state after `step`: saves of later steps in the
  // making will not complete (their steps are trained again).
  void forget_after(int step);
  // `node` was lost: checkpoints still waiting for one of its workers
  // ("<node> GPU <g>") will never be complete.
  void saver_lost(const std::string& node);
  // True while the checkpoint of a step before `step` waits for a saver.
  [[nodiscard]] bool saving_before(int step) const {
    return !pending_.empty() && pending_.begin()->first < step;
  }
  // The last step whose checkpoint is complete (-1: none).
  [[nodiscard]] int last_complete() const { return last_complete_; }
  [[nodiscard]] bool enabled() const { return every_ > 0; }

 private:
  void finish(int step);

  std::string dir_;
  int every_;
  const Profile& profile_;
  std::uint64_t seed_;
  std::map<int, std::set<std::string>> pending_;  // step -> nodes yet to write their layers
  int last_complete_ = -1;
};

}  // namespace oobleck::executor
