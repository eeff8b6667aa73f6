#include "kept_sums.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace oobleck::executor {
namespace {

// Kept sums travel on the world group beside the layer copies (tags 2l, 2l + 1).
constexpr int kSumCopyTag = 1 << 20;

// The copy that brings the worker of `rank` layer l's kept sums, if one does.
const protocol::SumCopy* received_sums(const protocol::NewGeneration& g, int rank, int l) {
  for (const auto& c : g.sum_copies) {
    if (c.to == rank && c.from != rank && c.layer == l) return &c;
  }
  return nullptr;
}

// Whether `slots` are exactly the seat's layers.
bool slots_of_seat(const std::vector<GradientSlot>& slots, const recovery::WorkerSeat& seat) {
  std::set<int> layers;
  for (const auto& slot : slots) layers.insert(slot.layer);
  return !layers.empty() && *layers.begin() == seat.layer_begin && *layers.rbegin() == seat.layer_end - 1 &&
         static_cast<int>(layers.size()) == seat.layer_end - seat.layer_begin;
}

}  // namespace

void KeptSums::set_aside(const protocol::NewGeneration& g, const SumsPlace& place, std::vector<GradientSlot>& slots,
                         PassedSums& passed) {
  old_slots_.clear();
  old_loss_ = 0;
  const int me = place.rank;
  const bool sends = std::any_of(g.sum_copies.begin(), g.sum_copies.end(),
                                 [&](const protocol::SumCopy& c) { return c.from == me && c.to != me; });
  const bool keeps = place.seat != nullptr && !g.kept_microbatches.empty();
  bool keeps_own = false, receives = false;
  if (keeps) {
    for (int l = place.seat->layer_begin; l < place.seat->layer_end; ++l) {
      (received_sums(g, me, l) ? receives : keeps_own) = true;
    }
  }
  if (!sends && !keeps_own) {
    passed = {};
  } else {
    auto held = passed.microbatches, kept = g.kept_microbatches;
    std::sort(held.begin(), held.end());
    std::sort(kept.begin(), kept.end());
    if (passed.step != g.resume_step || held != kept) {
      // It had begun training again when this generation was decided.
      passed = {};
      throw KeptSumsChanged("generation " + std::to_string(place.generation) + " lets " + place.node +
                            " keep the sums of step " + std::to_string(g.resume_step) + ", which changed since");
    }
  }
  moving_ = sends || receives || (keeps_own && !slots_of_seat(slots, *place.seat));
  if (moving_) {
    old_slots_ = std::move(slots);
    old_loss_ = passed.loss;
    passed = {};
  }
}

SumSends KeptSums::post_sends(const protocol::NewGeneration& g, const SumsPlace& place, Communicator& world,
                              const ModelConfig& model) {
  SumSends out;
  const int last = pipeline_layers(model) - 1;
  for (const auto& c : g.sum_copies) {
    if (c.from != place.rank || c.to == place.rank) continue;
    std::vector<torch::Tensor> parts;
    for (auto& slot : old_slots_) {
      if (slot.layer == c.layer) parts.push_back(slot.sum.reshape({-1}));
    }
    if (parts.empty()) {
      throw std::logic_error(place.node + " is to send the kept sums of layer " + std::to_string(c.layer) +
                             " but holds none");
    }
    parts.push_back(torch::full({1}, c.layer == last ? old_loss_ : 0.0, parts.front().options()));
    out.buffers.push_back(torch::cat(parts));
    out.ops.push_back(world.send(out.buffers.back(), c.to, kSumCopyTag + c.layer));
  }
  return out;
}

std::int64_t KeptSums::take(const protocol::NewGeneration& g, const SumsPlace& place, Communicator& world,
                            const std::map<int, HeldLayer>& held, const ModelConfig& model,
                            std::vector<GradientSlot>& slots, PassedSums& passed) {
  std::int64_t received = 0;
  const int last = pipeline_layers(model) - 1;
  if (moving_ && place.seat != nullptr && !g.kept_microbatches.empty()) {
    std::vector<GradientSlot> fresh;
    double loss = 0;
    for (int l = place.seat->layer_begin; l < place.seat->layer_end; ++l) {
      if (!held.count(l)) {
        throw std::logic_error("generation " + std::to_string(place.generation) + " gives " + place.node + " layer " +
                               std::to_string(l) + " without a copy");
      }
      std::vector<GradientSlot> layer = gradient_slots(held, l, l + 1, model);
      if (const protocol::SumCopy* copy = received_sums(g, place.rank, l)) {
        std::int64_t n = 0;
        for (const auto& slot : layer) n += slot.sum.numel();
        auto buffer = torch::empty({n + 1}, layer.front().sum.options());
        world.recv(buffer, copy->from, kSumCopyTag + l);
        received += buffer.numel() * static_cast<std::int64_t>(buffer.element_size());
        std::int64_t at = 0;
        for (auto& slot : layer) {
          slot.sum.copy_(buffer.narrow(0, at, slot.sum.numel()).view_as(slot.sum));
          at += slot.sum.numel();
        }
        if (l == last) loss += buffer[n].item<double>();
      } else {
        auto own = old_slots_.begin();
        for (auto& slot : layer) {
          own = std::find_if(own, old_slots_.end(), [&](const GradientSlot& o) { return o.layer == l; });
          if (own == old_slots_.end() || !own->sum.sizes().equals(slot.sum.sizes())) {
            throw std::logic_error(place.node + " keeps the sums of layer " + std::to_string(l) +
                                   " but did not hold its shard");
          }
          slot.sum = std::move(own->sum);
          ++own;
        }
        if (l == last) loss += old_loss_;
      }
      for (auto& slot : layer) slot.summed = true;
      std::move(layer.begin(), layer.end(), std::back_inserter(fresh));
    }
    slots = std::move(fresh);
    passed = {g.resume_step, loss, g.kept_microbatches};
  }
  old_slots_.clear();
  return received;
}

}  // namespace oobleck::executor
