#include "early_groups.h"

#include <chrono>

namespace oobleck::executor {

std::vector<int> shard_group(const NextGeneration& next) {
  std::vector<int> out;
  if (next.settings.rank < next.settings.trainers) {
    const recovery::WorkerSeat& own = next.seats.at(static_cast<std::size_t>(next.settings.rank));
    for (int k = 0; k < own.degree; ++k) out.push_back(own.first_rank + k);
  }
  return out;
}

EarlyGroups::EarlyGroups(Inbox& inbox, Read read, GradientSets gradient_sets)
    : inbox_(inbox), read_(std::move(read)), gradient_sets_(std::move(gradient_sets)) {}

EarlyGroups::~EarlyGroups() {
  inbox_.on_newer_generation(nullptr);  // (the reader does not call it again)
  std::optional<Started> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(started_);
  }
  if (left) {
    inbox_.abandon_all();  // this worker leaves: its groups' peers wait for nothing
    left->groups->release(true);
  }
  for (auto& d : discarded_) d.wait();
}

void EarlyGroups::set_base(const GroupSettings& base, int store_port) {
  std::lock_guard lock(mutex_);
  base_ = base;
  store_port_ = store_port;
}

bool EarlyGroups::start(const protocol::NewGeneration& g) {
  if (GenerationGroups::making_any()) return false;
  std::lock_guard lock(mutex_);
  if (inbox_.store_port() != store_port_) return false;  // a restarted master's store: the worker reaches it first
  NextGeneration next;
  try {
    next = read_(g, base_);
  } catch (const std::exception&) {
    return false;  // the training thread says what is wrong with it
  }
  auto groups = std::make_unique<GenerationGroups>(inbox_);
  groups->start(next.settings, shard_group(next), gradient_sets_(next));
  if (started_) discard(std::move(started_->groups));  // superseded
  number_ = g.generation;
  started_ = Started{std::move(next), std::move(groups)};
  return true;
}

EarlyGroups::Started EarlyGroups::take(int number) {
  std::lock_guard lock(mutex_);
  if (!started_ || number_ != number) throw Superseded();
  Started out = std::move(*started_);
  started_.reset();
  return out;
}

void EarlyGroups::discard(std::unique_ptr<GenerationGroups> groups) {
  std::erase_if(discarded_, [](const std::future<void>& d) {
    return d.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  discarded_.push_back(std::async(std::launch::async, [g = std::move(groups)]() mutable { g->release(true); }));
}

}  // namespace oobleck::executor
