// A generation's communicators, started as it arrives: on the inbox's
// reader thread (Inbox::on_newer_generation), while the training thread
// may still be unwinding the step in hand, so that every member's groups
// connect meanwhile instead of after the slowest member's unwinding. Not
// while groups of an older generation are still being made
// (GenerationGroups::making_any): the abandon that cuts their sockets must
// be free to come again. Not after the master restarted (a store port the
// worker has not reached yet): the training thread makes those groups.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "generation_groups.h"
#include "inbox.h"
#include "oobleck/planner.h"
#include "oobleck/recovery/worker_seats.h"
#include "protocol/protocol.h"

namespace oobleck::executor {

// A generation's plan and this worker's place in it, before they are its own.
struct NextGeneration {
  Plan plan;
  std::vector<recovery::WorkerSeat> seats;
  GroupSettings settings;
};

// The worker's tensor-parallel group, by rank (a trainer's stage's GPUs).
[[nodiscard]] std::vector<int> shard_group(const NextGeneration& next);

class EarlyGroups {
 public:
  // How the worker reads a generation against base settings, and the sets
  // of trainers that sum gradients together in it (on the reader thread:
  // they may read only what does not change after the worker's start).
  using Read = std::function<NextGeneration(const protocol::NewGeneration&, const GroupSettings&)>;
  using GradientSets = std::function<std::set<std::vector<int>>(const NextGeneration&)>;
  EarlyGroups(Inbox& inbox, Read read, GradientSets gradient_sets);
  // Stops the inbox offering generations; groups still being made are cut
  // and waited for.
  ~EarlyGroups();
  EarlyGroups(const EarlyGroups&) = delete;
  EarlyGroups& operator=(const EarlyGroups&) = delete;

  // The settings groups start from, and the master's store port they reach
  // (the worker's, as they change).
  void set_base(const GroupSettings& base, int store_port);
  // Inbox::EarlyStart.
  bool start(const protocol::NewGeneration& g);

  // Generation `number`'s, which inbox.begin() said started; Superseded
  // when a newer one replaced it meanwhile.
  struct Started {
    NextGeneration next;
    std::unique_ptr<GenerationGroups> groups;
  };
  [[nodiscard]] Started take(int number);

 private:
  // Started, never taken: its makers end once the abandon has cut their
  // sockets; it goes then.
  void discard(std::unique_ptr<GenerationGroups> groups);

  Inbox& inbox_;
  Read read_;
  GradientSets gradient_sets_;
  std::mutex mutex_;  // the reader thread's start against the training thread
  GroupSettings base_;
  int store_port_ = 0;
  int number_ = 0;
  std::optional<Started> started_;
  std::vector<std::future<void>> discarded_;
};

}  // namespace oobleck::executor
