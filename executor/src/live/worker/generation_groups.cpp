#include "generation_groups.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <thread>

#include "comm/subgroup_over_group.h"
#include "model/train_common.h"

namespace oobleck::executor {

// Where a worker's groups listen on a one-machine run: an address of the
// loopback's own that rises with the worker's rank.
//
// Why: the Gloo of libtorch 1.x connects a group's pairs one peer at a time,
// in rank order, and the side whose address is lower listens and waits for
// the other to come to it. On one address (ports at random) a rank waits at
// some pair for a peer that is itself waiting at an earlier one: chains as
// long as the group, each link a few wake-ups on a loaded machine. With
// addresses that rise with rank, every rank connects at once to the ranks
// below it and then only waits for those above, which come without waiting:
// side by side, a node loss's communicators 66.5 to 53.3 ms (median of 24).
// Every group numbers its members in the generation's rank order, so the
// rule holds in each. (Across hosts the hosts' own addresses decide.)
std::string GenerationGroups::bind_address(const GroupSettings& settings) {
  if (settings.bind_host != "127.0.0.1" || settings.rank < 0 || settings.rank >= 256 * 256) return settings.bind_host;
  return "127.1." + std::to_string(settings.rank / 256) + "." + std::to_string(settings.rank % 256);
}

std::atomic<int> GenerationGroups::makers_{0};

namespace {

// A make counted from before its thread starts (++) until it ends.
struct Counted {
  explicit Counted(std::atomic<int>& count) : count_(count) {}
  ~Counted() { --count_; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  std::atomic<int>& count_;
};

}  // namespace

GenerationGroups::Making::Making() { ++makers_; }
GenerationGroups::Making::~Making() { --makers_; }

void GenerationGroups::start(const GroupSettings& settings, std::vector<int> shard_group,
                             std::set<std::vector<int>> gradient_sets) {
  ++makers_;
  built_ = std::async(std::launch::async, [this, settings, shard_group = std::move(shard_group),
                                           gradient_sets = std::move(gradient_sets)] {
    const Counted counted(makers_);
    build(settings, shard_group, gradient_sets);
  });
}

void GenerationGroups::wait_built() { built_.get(); }

void GenerationGroups::build(const GroupSettings& settings, const std::vector<int>& shard_group,
                             const std::set<std::vector<int>>& gradient_sets) {
  generation_ = settings.generation;
  trainer_count_ = settings.trainers;
  const bool trainer = settings.rank < settings.trainers;
  std::vector<ToMake> now = {{"world", settings.rank, settings.world_size, &world_}};
  if (trainer && settings.trainers < settings.world_size) {
    now.push_back({"trainers", settings.rank, settings.trainers, &trainers_});
  }
  if (shard_group.size() > 1) {
    const auto me = std::find(shard_group.begin(), shard_group.end(), settings.rank);
    now.push_back({"shards:" + std::to_string(shard_group.front()), static_cast<int>(me - shard_group.begin()),
                   static_cast<int>(shard_group.size()), &shards_});
  }
  make(settings, now);
  if (!trainer) return;
  // Every set of trainers sums over the world's connections
  // (comm/subgroup_over_group.h), told apart by its place among the sets.
  int index = 0;
  for (const auto& set : gradient_sets) {
    const int place = index++;
    auto it = std::find(set.begin(), set.end(), settings.rank);
    if (it == set.end() || set.size() < 2) continue;
    if (static_cast<int>(set.size()) == settings.trainers) continue;  // the trainers' own group serves
    gradients_[set] = std::make_unique<SubgroupOverGroup>(*world_, set, static_cast<int>(it - set.begin()), place);
  }
}

void GenerationGroups::make(const GroupSettings& settings, const std::vector<ToMake>& groups) {
  const Making making;
  std::vector<std::exception_ptr> errors(groups.size());
  std::vector<std::thread> makers;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    makers.emplace_back([&, i] {
      try {
        try {
          c10d::TCPStoreOptions options;
          options.port = static_cast<std::uint16_t>(settings.store_port);
          options.isServer = false;
          options.timeout = settings.timeout;
          auto store = c10::make_intrusive<c10d::TCPStore>(settings.store_host, options);
          const ToMake& g = groups[i];
          const std::string name = std::string("g").append(std::to_string(settings.generation)).append("/") + g.name;
          *g.slot = make_gloo_communicator(store, name, g.rank, g.size, bind_address(settings), settings.timeout);
          inbox_.watch(settings.generation, g.slot->get());
        } catch (const CommunicationError&) {
          throw;
        } catch (const std::exception& e) {  // the store: also communication
          throw CommunicationError(e.what());
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& m : makers) m.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

Communicator& GenerationGroups::gradient_group(const std::vector<int>& set) {
  return static_cast<int>(set.size()) == trainer_count_ ? trainers() : *gradients_.at(set);
}

void GenerationGroups::release(bool interrupted) {
  if (built_.valid()) {
    try {
      built_.get();  // (abandoned by now, or done)
    } catch (const std::exception&) {
    }
  }
  inbox_.unwatch(generation_);
  std::vector<std::unique_ptr<Communicator>> old;
  for (auto& [set, c] : gradients_) old.push_back(std::move(c));
  gradients_.clear();
  old.push_back(std::move(trainers_));
  old.push_back(std::move(shards_));
  old.push_back(std::move(world_));
  std::erase(old, nullptr);
  if (!interrupted || old.empty()) return;
  std::thread([old = std::move(old)]() mutable { old.clear(); }).detach();
}

}  // namespace oobleck::executor
