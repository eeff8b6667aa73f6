// What a play or a memory check needs of a pipeline's shape (devices,
// chunks a device, microbatches), made once per shape and kept per thread.
//
// Why not a few shapes in turn: a template search asks for the shapes of
// every tensor-parallel degree at every node count, one after another,
// and shapes recur across node counts (n nodes at degree t and 2n at 2t
// have the same devices); eight kept in turn made 175B's interleaved
// orders to 256 nodes at K = 4 394 times for 125 shapes. So every shape is
// kept until what is kept reaches a bound (in the caller's units: passes),
// and then all are dropped at once.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>

namespace oobleck::detail {

template <typename Value>
class ShapeCache {
 public:
  explicit ShapeCache(std::size_t most_units) : most_units_(most_units) {}

  // The value of the shape, made by `make()` (whose size is `units`) where
  // not kept. The reference stays valid until this cache makes another.
  template <typename Make>
  const Value& get(int devices, int chunks, int microbatches, std::size_t units, Make&& make) {
    const std::array<int, 3> key{devices, chunks, microbatches};
    if (const auto it = kept_.find(key); it != kept_.end()) return *it->second;
    if (kept_units_ + units > most_units_) {
      kept_.clear();
      kept_units_ = 0;
    }
    kept_units_ += units;
    return *(kept_[key] = std::make_unique<Value>(make()));
  }

 private:
  std::size_t most_units_;
  std::size_t kept_units_ = 0;
  std::map<std::array<int, 3>, std::unique_ptr<Value>> kept_;
};

}  // namespace oobleck::detail
