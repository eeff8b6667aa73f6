// The communicators of one generation, as one worker holds them: the world
// (every worker of the generation: state copies), the trainers (the
// pipelines: activations and the gradient norm), the worker's
// tensor-parallel group (its stage's GPUs) and, over the world's
// connections, one subgroup per set of trainers that sum some gradient
// together (gradient_sync.h, comm/subgroup_over_group.h).
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "inbox.h"


namespace oobleck::executor {

struct GroupSettings {
  int generation = 0;
  int rank = 0, world_size = 0, trainers = 0;
  std::string store_host, bind_host;  // the store: the master's, or this worker's tunnel to it
  int store_port = 0;
  std::chrono::milliseconds timeout{120000};
};

class GenerationGroups {
 public:
  explicit GenerationGroups(Inbox& inbox) : inbox_(inbox) {}
  ~GenerationGroups() { release(true); }
  GenerationGroups(const GenerationGroups&) = delete;
  GenerationGroups& operator=(const GenerationGroups&) = delete;

  // The world, the trainers and the tensor-parallel group (`shard_group`,
  // ranks; none when it has one member), then the gradient subgroups over
  // the world (nothing to connect). Every Gloo group is made on its own
  // thread with its own store client (a client serves one thread); every
  // member of a group makes it, so no order among them can deadlock, and a
  // recovery waits for the slowest group, not their sum. Each is watched by
  // the inbox.
  void build(const GroupSettings& settings, const std::vector<int>& shard_group,
             const std::set<std::vector<int>>& gradient_sets);
  // The same on a thread of its own; wait_built() waits for what build()
  // would have (and rethrows what failed).
  void start(const GroupSettings& settings, std::vector<int> shard_group, std::set<std::vector<int>> gradient_sets);
  void wait_built();

  // Whether any groups of this process are being made now (sockets still
  // to be opened, which only an abandon after them would cut), or are about
  // to be (a Making in scope).
  [[nodiscard]] static bool making_any() { return makers_.load() > 0; }
  class Making {
   public:
    Making();
    ~Making();
    Making(const Making&) = delete;
    Making& operator=(const Making&) = delete;
  };

  [[nodiscard]] Communicator& world() { return *world_; }
  [[nodiscard]] Communicator& trainers() { return trainers_ ? *trainers_ : *world_; }
  [[nodiscard]] Communicator& shards() { return *shards_; }
  // The group of `set`: the trainers, or its subgroup over the world.
  [[nodiscard]] Communicator& gradient_group(const std::vector<int>& set);

  // After an interruption a collective may still be running on a group's
  // own threads until Gloo gives up on it: those groups are destroyed on a
  // thread of their own, so that the next generation starts at once.
  void release(bool interrupted);

  // The address this worker's groups bind to: on a one-machine run
  // (`bind_host` 127.0.0.1) one of the loopback's that rises with the rank.
  [[nodiscard]] static std::string bind_address(const GroupSettings& settings);

 private:
  struct ToMake {
    std::string name;
    int rank, size;
    std::unique_ptr<Communicator>* slot;
  };
  void make(const GroupSettings& settings, const std::vector<ToMake>& groups);

  Inbox& inbox_;
  int generation_ = 0;
  int trainer_count_ = 0;
  std::unique_ptr<Communicator> world_, trainers_, shards_;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> gradients_;
  std::future<void> built_;           // start()'s build
  static std::atomic<int> makers_;    // make() calls under way, in this process
};

}  // namespace oobleck::executor
