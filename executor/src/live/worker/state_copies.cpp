#include "state_copies.h"

#include <cstring>
#include <filesystem>

#include "oobleck/common/files.h"

namespace oobleck::executor {
namespace {

// layer-L.pt holds a whole layer; layer-L.shard-K-of-T.pt shard K of T.
std::string layer_file(const std::string& folder, int layer, TensorShard shard) {
  std::string name = folder + "/layer-" + std::to_string(layer);
  if (shard.degree > 1) name += ".shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.degree);
  return name + ".pt";
}

HeldLayer received_layer(const TrainOptions& options, int layer, TensorShard shard, const std::string& bytes) {
  HeldLayer out = initial_layer(options, layer, shard);
  deserialize_layer(out, bytes);
  return out;
}

}  // namespace

std::int64_t copy_layers(Communicator& world, const std::vector<protocol::LayerCopy>& copies, TensorShard shard,
                         std::map<int, HeldLayer>& held, const TrainOptions& options) {
  const int rank = world.rank();
  std::vector<std::unique_ptr<PendingOp>> sends;
  for (const auto& c : copies) {
    if (c.from != rank || c.to == rank) continue;
    const std::string bytes = serialize_layer(held.at(c.layer));
    auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
    auto payload = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
    sends.push_back(world.send(size, c.to, 2 * c.layer));
    sends.push_back(world.send(payload, c.to, 2 * c.layer + 1));
  }
  std::int64_t received = 0;
  std::map<int, HeldLayer> made;  // replaces `held`'s once every send is posted
  for (const auto& c : copies) {
    if (c.to != rank) continue;
    const TensorShard from{c.from_degree, c.from_shard};
    HeldLayer incoming;
    if (c.from == rank) {
      incoming = received_layer(options, c.layer, from, serialize_layer(held.at(c.layer)));
    } else {
      auto size = torch::zeros({1}, torch::kLong);
      world.recv(size, c.from, 2 * c.layer);
      auto payload = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
      world.recv(payload, c.from, 2 * c.layer + 1);
      incoming = received_layer(
          options, c.layer, from,
          std::string(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel())));
      received += payload.numel();
    }
    if (from == shard) {
      made[c.layer] = std::move(incoming);
      continue;
    }
    if (!made.count(c.layer)) made.emplace(c.layer, initial_layer(options, c.layer, shard));
    copy_layer_overlap(incoming, made.at(c.layer), options.model, c.layer);
  }
  for (auto& s : sends) s->wait();
  for (auto& [layer, state] : made) held[layer] = std::move(state);
  return received;
}

void load_checkpoint_layers(const std::string& folder, int begin, int end, TensorShard shard,
                            std::map<int, HeldLayer>& held, const TrainOptions& options, int gpus_per_node) {
  for (int l = begin; l < end; ++l) {
    int degree = 0;
    for (int t = 1; t <= gpus_per_node && degree == 0; ++t) {
      if (std::filesystem::exists(layer_file(folder, l, {t, 0}))) degree = t;
    }
    if (degree == 0) throw std::runtime_error(folder + ": no file of layer " + std::to_string(l));
    HeldLayer layer = initial_layer(options, l, shard);
    for (int k = 0; k < degree; ++k) {
      const TensorShard from{degree, k};
      if (!recovery::shards_overlap(degree, k, shard.degree, shard.index)) continue;
      const HeldLayer stored = received_layer(options, l, from, read_text_file(layer_file(folder, l, from)));
      copy_layer_overlap(stored, layer, options.model, l);
    }
    held[l] = std::move(layer);
  }
}

void save_checkpoint_layers(const std::string& folder, const std::vector<recovery::WorkerSeat>& seats, int rank,
                            const std::map<int, HeldLayer>& held) {
  const recovery::WorkerSeat& seat = seats.at(static_cast<std::size_t>(rank));
  for (int l = seat.layer_begin; l < seat.layer_end; ++l) {
    const auto first = std::find_if(seats.begin(), seats.end(), [&](const auto& s) { return s.holds(l); });
    if (first->first_rank == seat.first_rank) {
      write_file_atomically(layer_file(folder, l, {seat.degree, seat.shard}), serialize_layer(held.at(l)));
    }
  }
}

}  // namespace oobleck::executor
