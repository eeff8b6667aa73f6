#include "oobleck/sim/engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace oobleck::sim {

EventId Engine::schedule_at(TimeMs when, Handler handler) {
  if (!(when >= now_) || std::isinf(when)) {
    throw std::logic_error("event scheduled at " + std::to_string(when) + " ms, before now (" +
                           std::to_string(now_) + " ms) or at no finite time");
  }
  std::uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& s = slots_[slot];
  s.handler = std::move(handler);
  s.live = true;
  if (slot > kSlotMask || next_sequence_ >> (64 - kSlotBits)) {
    throw std::length_error("event engine: more than 2^24 pending events or 2^40 events in one run");
  }
  push({std::bit_cast<std::uint64_t>(when + 0.0), (next_sequence_++ << kSlotBits) | slot});  // + 0.0: no -0
  ++pending_;
  return {slot, s.generation};
}

bool Engine::cancel(EventId id) {
  if (id.slot >= slots_.size()) return false;
  Slot& s = slots_[id.slot];
  if (!s.live || s.generation != id.generation) return false;
  // The heap entry stays and is skipped when it surfaces; the slot is
  // reused only then, so the entry cannot be mistaken for a new event.
  s.live = false;
  s.handler.reset();
  --pending_;
  return true;
}

void Engine::release(std::uint32_t slot) {
  Slot& s = slots_[slot];
  s.live = false;
  ++s.generation;
  free_slots_.push_back(slot);
}

// A 4-ary heap: half the depth of a binary one, and the four children of a
// node share a cache line or two.
void Engine::push(Entry entry) {
  std::size_t hole = heap_.size();
  heap_.push_back(entry);
  const Order order = entry.order();
  while (hole > 0) {
    const std::size_t parent = (hole - 1) / 4;
    if (heap_[parent].order() <= order) break;
    heap_[hole] = heap_[parent];
    hole = parent;
  }
  heap_[hole] = entry;
}

void Engine::pop_front() {
  const Entry last = heap_.back();
  heap_.pop_back();
  const std::size_t size = heap_.size();
  if (size == 0) return;
  const Order last_order = last.order();
  std::size_t hole = 0;
  while (true) {
    const std::size_t first = 4 * hole + 1;
    if (first >= size) break;
    // The earliest child, chosen without branches (the keys are random to
    // the branch predictor).
    std::size_t best = first;
    Order best_order = heap_[first].order();
    const std::size_t end = std::min(first + 4, size);
    for (std::size_t c = first + 1; c < end; ++c) {
      const Order o = heap_[c].order();
      const bool earlier = o < best_order;
      best = earlier ? c : best;
      best_order = earlier ? o : best_order;
    }
    if (last_order <= best_order) break;
    heap_[hole] = heap_[best];
    hole = best;
  }
  heap_[hole] = last;
}

bool Engine::step() {
  while (!heap_.empty()) {
    const Entry front = heap_.front();
    pop_front();
    Slot& s = slots_[front.slot()];
    if (!s.live) {  // cancelled
      release(front.slot());
      continue;
    }
    // Run in place (slots never move: a deque), then free the slot; marked
    // dead first so that cancelling the running event is a no-op.
    s.live = false;
    --pending_;
    now_ = front.time();
    ++executed_;
    s.handler();
    s.handler.reset();
    release(front.slot());
    return true;
  }
  return false;
}

void Engine::run_through(TimeMs until, bool inclusive) {
  while (!heap_.empty()) {
    const Entry& front = heap_.front();
    if (!slots_[front.slot()].live) {
      const std::uint32_t slot = front.slot();
      pop_front();
      release(slot);
      continue;
    }
    if (front.time() > until || (!inclusive && front.time() == until)) break;
    step();
  }
  now_ = std::max(now_, until);
}

}  // namespace oobleck::sim
