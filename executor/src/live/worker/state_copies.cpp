#include "state_copies.h"

#include <filesystem>

#include "live/snapshots/snapshot_wire.h"
#include "oobleck/common/files.h"

namespace oobleck::executor {
namespace {

// layer-L.pt holds a whole layer; layer-L.shard-K-of-T.pt shard K of T.
std::string layer_file(const std::string& folder, int layer, TensorShard shard) {
  std::string name = folder + "/layer-" + std::to_string(layer);
  if (shard.degree > 1) name += ".shard-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.degree);
  return name + ".pt";
}

// Packed bytes (copies, snapshots) or libtorch's archive (checkpoints).
HeldLayer received_layer(const TrainOptions& options, int layer, TensorShard shard, const std::string& bytes) {
  HeldLayer out = initial_layer(options, layer, shard);
  if (is_packed_layer(bytes)) {
    unpack_layer(out, bytes);
  } else {
    deserialize_layer(out, bytes);
  }
  return out;
}

}  // namespace

std::int64_t copy_layers(Communicator& world, const std::vector<protocol::LayerCopy>& copies, TensorShard shard,
                         std::map<int, HeldLayer>& held, const TrainOptions& options) {
  const int rank = world.rank();
  std::vector<std::unique_ptr<PendingOp>> sends;
  for (const auto& c : copies) {
    if (c.from != rank || c.to == rank) continue;
    const auto bytes = static_cast<std::int64_t>(packed_layer_bytes(held.at(c.layer)));
    auto size = torch::tensor({bytes}, torch::kLong);
    auto payload = torch::empty({bytes}, torch::kUInt8);
    pack_layer_into(held.at(c.layer), static_cast<char*>(payload.data_ptr()));
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
      incoming = received_layer(options, c.layer, from, pack_layer(held.at(c.layer)));
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

namespace {

// Shard `shard` of layers [begin, end), each cut from (or gathered across)
// the `degree(l)` shards that `bytes_of(l, shard)` reads.
template <typename Degree, typename Bytes>
void load_stored_layers(int begin, int end, TensorShard shard, std::map<int, HeldLayer>& held,
                        const TrainOptions& options, Degree degree_of, Bytes bytes_of) {
  for (int l = begin; l < end; ++l) {
    const int degree = degree_of(l);
    HeldLayer layer = initial_layer(options, l, shard);
    for (int k = 0; k < degree; ++k) {
      const TensorShard from{degree, k};
      if (!recovery::shards_overlap(degree, k, shard.degree, shard.index)) continue;
      const HeldLayer stored = received_layer(options, l, from, bytes_of(l, from));
      copy_layer_overlap(stored, layer, options.model, l);
    }
    held[l] = std::move(layer);
  }
}

}  // namespace

void load_checkpoint_layers(const std::string& folder, int begin, int end, TensorShard shard,
                            std::map<int, HeldLayer>& held, const TrainOptions& options, int gpus_per_node) {
  // Written at a degree of one node's GPUs, or of up to
  // kMaxTensorParallelNodes nodes' (a stage over several).
  const int most = gpus_per_node * kMaxTensorParallelNodes;
  const auto degree_of = [&](int l) {
    for (int t = 1; t <= most; ++t) {
      if (std::filesystem::exists(layer_file(folder, l, {t, 0}))) return t;
    }
    throw CheckpointUnreadable(layer_file(folder, l, {}) + ": missing (nor a shard of it at a degree up to " +
                               std::to_string(most) + ")");
  };
  std::string reading;  // the file whose bytes are being restored, and its layer
  int reading_layer = begin;
  const auto bytes_of = [&](int l, TensorShard from) {
    reading = layer_file(folder, l, from);
    reading_layer = l;
    if (!std::filesystem::exists(reading)) throw CheckpointUnreadable(reading + ": missing");
    return read_text_file(reading);
  };
  try {
    load_stored_layers(begin, end, shard, held, options, degree_of, bytes_of);
  } catch (const CheckpointUnreadable&) {
    throw;
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));  // libtorch appends its backtrace
    throw CheckpointUnreadable(reading + ": does not read back into layer " + std::to_string(reading_layer) + ": " +
                               why.substr(0, 200));
  }
}

void load_snapshot_layers(const std::vector<protocol::SnapshotSource>& sources, int step, int begin, int end,
                          TensorShard shard, std::map<int, HeldLayer>& held, const TrainOptions& options,
                          const std::string& token) {
  std::map<std::pair<std::string, int>, std::unique_ptr<SnapshotClient>> clients;
  const auto source_of = [&](int l, int k) -> const protocol::SnapshotSource& {
    for (const auto& s : sources) {
      if (s.layer == l && s.shard == k) return s;
    }
    throw std::runtime_error("the snapshot of step " + std::to_string(step) + " has no source of layer " +
                             std::to_string(l));
  };
  const auto degree_of = [&](int l) { return source_of(l, 0).degree; };
  const auto bytes_of = [&](int l, TensorShard from) {
    const auto& s = source_of(l, from.index);
    auto& client = clients[{s.host, s.port}];
    if (!client) client = std::make_unique<SnapshotClient>(s.host, s.port, token, "reader");
    auto bytes = client->get({s.owner, step, l, from.degree, from.index});
    if (!bytes) {
      throw SnapshotMissing("the snapshot of step " + std::to_string(step) + " at " + s.host + ":" +
                                std::to_string(s.port) + " lost layer " + std::to_string(l),
                            step, s.port);
    }
    return std::move(*bytes);
  };
  load_stored_layers(begin, end, shard, held, options, degree_of, bytes_of);
}

std::vector<int> layers_saved_by(const std::vector<recovery::WorkerSeat>& seats, int rank) {
  const recovery::WorkerSeat& seat = seats.at(static_cast<std::size_t>(rank));
  std::vector<int> out;
  for (int l = seat.layer_begin; l < seat.layer_end; ++l) {
    const auto first = std::find_if(seats.begin(), seats.end(), [&](const auto& s) { return s.holds(l); });
    if (first->first_rank == seat.first_rank) out.push_back(l);
  }
  return out;
}

void save_layer_file(const std::string& folder, int layer, TensorShard shard, const std::string& bytes) {
  write_file_atomically(layer_file(folder, layer, shard), bytes);
}

}  // namespace oobleck::executor
