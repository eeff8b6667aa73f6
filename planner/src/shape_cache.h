// What a play or a memory check needs of a pipeline's shape (devices,
// chunks a device, microbatches), made once per shape and kept per thread.
//
// Why not a few shapes in turn: a template search asks for the shapes of
// every tensor-parallel degree at every node count, one after another,
// and shapes recur across node counts (n nodes at degree t and 2n at 2t
// have the same devices); eight kept in turn made 175B's interleaved
// orders to 256 nodes at K = 4 394 times for 125 shapes. So every shape is
// kept until the shapes kept reach a bound in passes (2 D v M each), and
// then all are dropped at once.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>

namespace oobleck::detail {

template <typename Value>
class ShapeCache {
 public:
  explicit ShapeCache(std::size_t most_passes) : most_passes_(most_passes) {}

  // The value of the shape, made by `make()` where not kept. The reference
  // stays valid until this cache makes another.
  template <typename Make>
  const Value& get(int devices, int chunks, int microbatches, Make&& make) {
    const std::array<int, 3> key{devices, chunks, microbatches};
    if (const auto it = kept_.find(key); it != kept_.end()) return *it->second;
    const std::size_t passes = 2 * static_cast<std::size_t>(std::max(devices, 0)) *
                               static_cast<std::size_t>(std::max(chunks, 0)) *
                               static_cast<std::size_t>(std::max(microbatches, 0));
    if (kept_passes_ + passes > most_passes_) {
      kept_.clear();
      kept_passes_ = 0;
    }
    kept_passes_ += passes;
    return *(kept_[key] = std::make_unique<Value>(make()));
  }

 private:
  std::size_t most_passes_;
  std::size_t kept_passes_ = 0;
  std::map<std::array<int, 3>, std::unique_ptr<Value>> kept_;
};

}  // namespace oobleck::detail
