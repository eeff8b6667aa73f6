#include "snapshot_slots.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace oobleck::executor {

struct SnapshotSlots::Mapping {
  int fd = -1;
  std::size_t bytes = 0;
  void* address = MAP_FAILED;

  explicit Mapping(std::size_t size) : bytes(size) {
    fd = ::memfd_create("oobleck-snapshot-slot", MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot make a memory file for a snapshot");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        (address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      ::close(fd);
      throw std::runtime_error("cannot map a memory file of " + std::to_string(bytes) + " bytes for a snapshot");
    }
  }
  ~Mapping() {
    ::munmap(address, bytes);
    ::close(fd);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

struct SnapshotSlots::Lease {
  std::shared_ptr<Mapping> mapping;
  std::vector<std::string_view> layers;
};

SnapshotSlots::~SnapshotSlots() = default;

SnapshotSlots::Claimed SnapshotSlots::claim(const std::string& owner, int gpu, std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  auto& slots = slots_[{owner, gpu}];
  for (auto& s : slots) s.claimed = false;  // a worker writes one snapshot at a time
  const auto free = [](const Slot& s) { return s.lease.expired(); };
  auto it = std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return free(s) && s.mapping->bytes >= bytes; });
  if (it == slots.end()) {
    // Free slots too small for this worker's layers (a new plan) go.
    std::erase_if(slots, free);
    slots.push_back({next_id_++, std::make_shared<Mapping>(std::max<std::size_t>(bytes, 1)), {}, false});
    it = std::prev(slots.end());
  }
  it->claimed = true;
  return {it->id, it->mapping->fd, it->mapping->bytes, static_cast<char*>(it->mapping->address)};
}

std::vector<SnapshotSlots::Blob> SnapshotSlots::adopt(const std::string& owner, int gpu, int id,
                                                      const std::vector<std::size_t>& sizes) {
  const std::lock_guard lock(mutex_);
  auto& slots = slots_[{owner, gpu}];
  const auto it = std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return s.id == id && s.claimed; });
  if (it == slots.end()) throw std::runtime_error("slot " + std::to_string(id) + " is not claimed by this worker");
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  if (total > it->mapping->bytes) throw std::runtime_error("the layers overrun slot " + std::to_string(id));
  auto lease = std::make_shared<Lease>();
  lease->mapping = it->mapping;
  const char* at = static_cast<const char*>(it->mapping->address);
  for (std::size_t s : sizes) {
    lease->layers.emplace_back(at, s);
    at += s;
  }
  it->claimed = false;
  it->lease = lease;
  std::vector<Blob> out;
  for (const auto& view : lease->layers) out.emplace_back(lease, &view);
  return out;
}

}  // namespace oobleck::executor
