#include "state_copies.h"

#include <cstring>

#include "oobleck/common/files.h"

namespace oobleck::executor {
namespace {

std::string layer_file(const std::string& folder, int layer) {
  return folder + "/layer-" + std::to_string(layer) + ".pt";
}

}  // namespace

std::int64_t copy_layers(Communicator& world, const std::vector<protocol::LayerCopy>& copies,
                         std::map<int, HeldLayer>& held, const TrainOptions& options) {
  const int rank = world.rank();
  std::vector<std::unique_ptr<PendingOp>> sends;
  for (const auto& c : copies) {
    if (c.from != rank) continue;
    const std::string bytes = serialize_layer(held.at(c.layer));
    auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
    auto payload = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
    sends.push_back(world.send(size, c.to, 2 * c.layer));
    sends.push_back(world.send(payload, c.to, 2 * c.layer + 1));
  }
  std::int64_t received = 0;
  for (const auto& c : copies) {
    if (c.to != rank) continue;
    auto size = torch::zeros({1}, torch::kLong);
    world.recv(size, c.from, 2 * c.layer);
    auto payload = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
    world.recv(payload, c.from, 2 * c.layer + 1);
    HeldLayer incoming = initial_layer(options, c.layer);
    deserialize_layer(
        incoming, std::string(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel())));
    held[c.layer] = std::move(incoming);
    received += payload.numel();
  }
  for (auto& s : sends) s->wait();
  return received;
}

void load_checkpoint_layers(const std::string& folder, int begin, int end, std::map<int, HeldLayer>& held,
                            const TrainOptions& options) {
  for (int l = begin; l < end; ++l) {
    HeldLayer layer = initial_layer(options, l);
    deserialize_layer(layer, read_text_file(layer_file(folder, l)));
    held[l] = std::move(layer);
  }
}

void save_checkpoint_layers(const std::string& folder, const std::vector<recovery::Seat>& seats, int rank,
                            const std::map<int, HeldLayer>& held) {
  const recovery::Seat& seat = seats.at(rank);
  for (int l = seat.layer_begin; l < seat.layer_end; ++l) {
    bool first_holder = true;
    for (int r = 0; r < rank; ++r)
      first_holder = first_holder && !(seats[r].layer_begin <= l && l < seats[r].layer_end);
    if (first_holder) write_file_atomically(layer_file(folder, l), serialize_layer(held.at(l)));
  }
}

}  // namespace oobleck::executor
