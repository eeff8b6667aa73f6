// What a master keeps in its state folder (--state-dir) so that a master
// started after it dies (--resume-master DIR) goes on with the same job:
// the options it was started with, where agents and workers reach it, the
// recovery controller's state (the plan, the generation, the last committed
// step, the members), the nodes it started, where the snapshots are, and
// the last committed step's metrics record. Written atomically, before the master acts on it: a
// commit is kept before any worker hears of it, a generation's wire number
// before any worker sees it, so a restarted master never promises less
// than its predecessor did.
//
// DIR/state.json (format oobleck.master-state.v1) and DIR/token, the job's
// token (mode 0600; the folder is 0700).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/executor/live.h"
#include "oobleck/planner.h"
#include "oobleck/recovery/controller.h"

namespace oobleck::executor {

struct KeptNode {
  std::string name;
  bool alive = true;  // false: lost, and never started again
  bool local = true;
  std::int64_t agent_pid = 0;  // a local agent's
};

// A worker's snapshot sealed in an agent's memory, as the master's ledger
// names it: who holds it, whose it is, its step, layers and shard.
struct KeptSnapshot {
  std::string holder, owner;
  int gpu = 0, step = 0, layer_begin = 0, layer_end = 0, degree = 1, shard = 0;
  bool mirrored = false;
};

struct MasterState {
  // The job's options, paths absolute; a restarted master's own injections
  // and chaos are none (they were its predecessor's).
  MasterOptions options;
  std::string token;
  std::string master_addr;
  int control_port = 0;
  int wire = 0;       // the last wire number sent
  int rollbacks = 0;  // generations started that rolled back
  double training_start_unix_ms = 0;  // metrics' at_ms and elapsed_ms go on from it
  std::vector<KeptNode> nodes;
  recovery::ControllerState controller;
  std::vector<KeptSnapshot> snapshots;  // where the snapshots are (the agents say so again when they reconnect)
  std::optional<int> snapshot_pin;      // a rollback's step, until its generation trains
  std::string last_step_record;     // the metrics line of the last committed step ("" before the first)
  bool finished = false;            // training ended: nothing to resume
};

// Creates `dir` (0700) when missing. Throws InputError naming the file.
void write_master_state(const std::string& dir, const MasterState& state, const Profile& profile,
                        const TemplateSet& templates);
// InputError naming the file and field when it is not a master's state of
// this format.
[[nodiscard]] MasterState read_master_state(const std::string& dir);
// state.json's text alone (no token); its plans are checked against the
// profile `profile_of` returns for the options' profile path.
[[nodiscard]] MasterState parse_master_state(std::string_view text, const std::string& origin,
                                             const std::function<Profile(const std::string&)>& profile_of);

// The options with every path made absolute (a restarted master may run
// elsewhere).
[[nodiscard]] MasterOptions with_absolute_paths(MasterOptions options);

}  // namespace oobleck::executor
