#include "snapshot_ledger.h"

#include <algorithm>

namespace oobleck::sim::detail {
namespace {

// The newest two multiples of `every` in (from, to], oldest first.
std::vector<std::int64_t> newest_two(std::int64_t from, std::int64_t to, int every) {
  std::vector<std::int64_t> out;
  if (every <= 0 || to <= from) return out;
  const std::int64_t last = to / every * every;
  for (std::int64_t s = last - every; s <= last; s += every) {
    if (s > from && s > 0) out.push_back(s);
  }
  return out;
}

}  // namespace

int SnapshotLedger::id(const std::string& node) {
  const auto [it, fresh] = ids_.try_emplace(node, static_cast<int>(names_.size()));
  if (fresh) names_.push_back(node);
  return it->second;
}

void SnapshotLedger::store(int holder, int owner, const Held& held) {
  NewestTwo& two = held_[key(holder, owner)];
  // As an agent's memory: a snapshot supersedes those of its step and later.
  while (two.count > 0 && two.held[two.count - 1].step >= held.step) --two.count;
  if (two.count == 2) {
    two.held[0] = two.held[1];
    two.count = 1;
  }
  two.held[two.count++] = held;
}

void SnapshotLedger::lay_out(const std::map<std::string, std::pair<int, int>>& layers) {
  layers_.clear();
  for (const auto& [node, range] : layers) layers_.push_back({id(node), range});
}

void SnapshotLedger::assign_mirrors(const std::vector<std::string>& ranked) {
  std::unordered_map<int, int> next;
  for (std::size_t i = 0; i < ranked.size() && ranked.size() > 1; ++i) {
    next[id(ranked[i])] = id(ranked[(i + 1) % ranked.size()]);
  }
  if (snapshot_every_ > 0 && mirror_every_ > 0) {
    for (const auto& [node, mirror] : next) {
      const auto old = mirror_of_.find(node);
      if (old != mirror_of_.end() && old->second == mirror) continue;
      // The new mirror gets the node's newest own snapshot at once.
      const auto own = held_.find(key(node, node));
      if (own != held_.end() && own->second.count > 0) store(mirror, node, own->second.held[own->second.count - 1]);
    }
  }
  mirror_of_ = std::move(next);
}

void SnapshotLedger::trained(std::int64_t from, std::int64_t to) {
  if (snapshot_every_ <= 0) return;
  for (const std::int64_t step : newest_two(from, to, snapshot_every_)) {
    for (const auto& [node, range] : layers_) store(node, node, {step, range.first, range.second});
  }
  for (const std::int64_t step : newest_two(from, to, mirror_every_)) {
    for (const auto& [node, range] : layers_) {
      const auto mirror = mirror_of_.find(node);
      if (mirror != mirror_of_.end()) store(mirror->second, node, {step, range.first, range.second});
    }
  }
}

void SnapshotLedger::forget_holder(const std::string& node) {
  const auto it = ids_.find(node);
  if (it == ids_.end()) return;
  std::erase_if(held_, [&](const auto& entry) { return entry.first >> 32 == static_cast<std::uint32_t>(it->second); });
}

void SnapshotLedger::forget_after(std::int64_t iterations) {
  for (auto& [who, two] : held_) {
    while (two.count > 0 && two.held[two.count - 1].step > iterations) --two.count;
  }
}

std::vector<recovery::Snapshot> SnapshotLedger::complete(int layers) const {
  // step -> layer -> (own holders, mirror holders)
  using Holders = std::pair<std::vector<int>, std::vector<int>>;
  std::map<std::int64_t, std::vector<Holders>, std::greater<>> by_step;
  for (const auto& [who, two] : held_) {
    const int holder = static_cast<int>(who >> 32), owner = static_cast<int>(who & 0xffffffffu);
    for (int i = 0; i < two.count; ++i) {
      const Held& h = two.held[i];
      auto& pieces = by_step[h.step];
      pieces.resize(static_cast<std::size_t>(layers));
      for (int l = std::max(0, h.begin); l < std::min(h.end, layers); ++l) {
        auto& holders = pieces[static_cast<std::size_t>(l)];
        (holder == owner ? holders.first : holders.second).push_back(holder);
      }
    }
  }
  std::vector<recovery::Snapshot> out;
  for (auto& [step, pieces] : by_step) {
    // Every holder is alive (lost ones are forgotten): a layer with a piece
    // can be read.
    const bool whole = std::all_of(pieces.begin(), pieces.end(),
                                   [](const Holders& h) { return !h.first.empty() || !h.second.empty(); });
    if (!whole) continue;
    recovery::Snapshot snapshot{static_cast<int>(step), {}};
    snapshot.pieces.reserve(pieces.size());
    for (int l = 0; l < layers; ++l) {
      recovery::SnapshotPiece piece;
      piece.layer = l;
      const auto names = [&](std::vector<int>& ids, std::vector<std::string>& into) {
        // A holder keeps one snapshot of a step per owner, but may hold a
        // layer of a step from two owners (an old and a new mirror).
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        into.reserve(ids.size());
        for (int i : ids) into.push_back(names_[static_cast<std::size_t>(i)]);
      };
      names(pieces[static_cast<std::size_t>(l)].first, piece.own);
      names(pieces[static_cast<std::size_t>(l)].second, piece.mirrors);
      snapshot.pieces.push_back(std::move(piece));
    }
    out.push_back(std::move(snapshot));
  }
  return out;
}

}  // namespace oobleck::sim::detail
