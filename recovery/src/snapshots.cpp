#include "oobleck/recovery/snapshots.h"

#include <algorithm>
#include <map>

namespace oobleck::recovery {
namespace {

const std::string* first_alive(const std::vector<std::string>& nodes, const std::vector<std::string>& alive) {
  for (const auto& n : nodes) {
    if (std::find(alive.begin(), alive.end(), n) != alive.end()) return &n;
  }
  return nullptr;
}

}  // namespace

std::optional<std::vector<PieceSource>> choose_pieces(const Snapshot& snapshot, int layers,
                                                      const std::vector<std::string>& alive, bool with_mirrors) {
  // layer -> degree -> shard -> piece
  std::map<int, std::map<int, std::map<int, const SnapshotPiece*>>> by_layer;
  for (const auto& p : snapshot.pieces) by_layer[p.layer][p.degree][p.shard] = &p;
  std::vector<PieceSource> out;
  for (int l = 0; l < layers; ++l) {
    std::optional<std::vector<PieceSource>> best;
    int best_mirrored = 0;
    for (const auto& [degree, shards] : by_layer[l]) {
      std::vector<PieceSource> chosen;
      int mirrored = 0;
      for (int k = 0; k < degree; ++k) {
        const auto it = shards.find(k);
        if (it == shards.end()) break;
        if (const auto* own = first_alive(it->second->own, alive)) {
          chosen.push_back({l, degree, k, *own, false});
        } else if (const auto* mirror = with_mirrors ? first_alive(it->second->mirrors, alive) : nullptr) {
          chosen.push_back({l, degree, k, *mirror, true});
          ++mirrored;
        } else {
          break;
        }
      }
      if (static_cast<int>(chosen.size()) != degree) continue;
      if (!best || mirrored < best_mirrored) {
        best = std::move(chosen);
        best_mirrored = mirrored;
      }
    }
    if (!best) return std::nullopt;
    out.insert(out.end(), best->begin(), best->end());
  }
  return out;
}

}  // namespace oobleck::recovery
