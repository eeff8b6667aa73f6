#include "snapshot_ledger.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace oobleck::executor {

void SnapshotLedger::stored(const std::string& holder, const protocol::SnapshotStored& s) {
  auto& list = held_[{holder, s.owner, s.gpu}];
  std::erase_if(list, [&](const auto& old) { return old.step >= s.step; });
  list.push_back(s);
  // The oldest goes, unless pinned: then the oldest other.
  if (list.size() > kSnapshotsKept - 1) {
    const auto pinned = std::find_if(list.begin(), list.end(), [&](const auto& old) { return old.step == pinned_; });
    list.erase(pinned == list.begin() && list.size() > 1 ? list.begin() + 1 : list.begin());
  }
}

void SnapshotLedger::forget_holder(const std::string& holder) {
  std::erase_if(held_, [&](const auto& entry) { return std::get<0>(entry.first) == holder; });
}

void SnapshotLedger::forget(const std::string& holder, int step) {
  for (auto& [who, list] : held_) {
    if (std::get<0>(who) == holder) std::erase_if(list, [&](const auto& s) { return s.step == step; });
  }
}

void SnapshotLedger::forget_after(int step) {
  for (auto& [who, list] : held_) std::erase_if(list, [&](const auto& s) { return s.step > step; });
}

bool SnapshotLedger::holds(const std::string& holder, const std::string& owner, int gpu, int step) const {
  const auto it = held_.find({holder, owner, gpu});
  return it != held_.end() &&
         std::any_of(it->second.begin(), it->second.end(), [&](const auto& s) { return s.step == step; });
}

std::string SnapshotLedger::owner_of(const std::string& holder, int step, const recovery::PieceSource& piece) const {
  for (const auto& [who, list] : held_) {
    if (std::get<0>(who) != holder) continue;
    for (const auto& s : list) {
      if (s.step == step && s.mirrored == piece.mirrored && s.degree == piece.degree && s.shard == piece.shard &&
          s.layer_begin <= piece.layer && piece.layer < s.layer_end)
        return s.owner;
    }
  }
  throw std::logic_error(holder + " holds no snapshot of layer " + std::to_string(piece.layer) + " after step " +
                         std::to_string(step));
}

std::vector<std::pair<std::string, protocol::SnapshotStored>> SnapshotLedger::entries() const {
  std::vector<std::pair<std::string, protocol::SnapshotStored>> out;
  for (const auto& [who, list] : held_) {
    for (const auto& s : list) out.emplace_back(std::get<0>(who), s);
  }
  return out;
}

std::vector<recovery::Snapshot> SnapshotLedger::complete(int layers) const {
  std::map<int, std::map<std::tuple<int, int, int>, recovery::SnapshotPiece>, std::greater<>> by_step;
  std::set<std::string> holders;
  for (const auto& [who, list] : held_) {
    const std::string& holder = std::get<0>(who);
    holders.insert(holder);
    for (const auto& s : list) {
      for (int l = s.layer_begin; l < s.layer_end; ++l) {
        auto& piece = by_step[s.step][{l, s.degree, s.shard}];
        piece.layer = l;
        piece.degree = s.degree;
        piece.shard = s.shard;
        auto& into = s.mirrored ? piece.mirrors : piece.own;
        if (std::find(into.begin(), into.end(), holder) == into.end()) into.push_back(holder);
      }
    }
  }
  const std::vector<std::string> alive(holders.begin(), holders.end());
  std::vector<recovery::Snapshot> out;
  for (auto& [step, pieces] : by_step) {
    recovery::Snapshot snapshot{step, {}};
    for (auto& [key, piece] : pieces) snapshot.pieces.push_back(std::move(piece));
    if (recovery::choose_pieces(snapshot, layers, alive, true)) out.push_back(std::move(snapshot));
  }
  return out;
}

}  // namespace oobleck::executor
