// Snapshot copies from a GPU (live/worker/gpu_snapshot_copies.h): on a
// stream of their own into page-locked shared memory, the same bytes as
// libtorch's copy; on the CPU, nothing changes.
#include "torch_doctest.h"

#include <sys/mman.h>
#include <unistd.h>

#include <torch/cuda.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "live/worker/gpu_snapshot_copies.h"
#include "model/layer_state.h"
#include "skip.h"

using namespace oobleck::executor;

namespace {

// Memory shared the way an agent lends its snapshot slots (a memfd, mapped
// shared).
struct SharedRegion {
  char* address = nullptr;
  std::size_t bytes = 0;
  explicit SharedRegion(std::size_t size) : bytes(size) {
    const int fd = ::memfd_create("oobleck-test-slot", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd");
    void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (at == MAP_FAILED) throw std::runtime_error("mmap");
    address = static_cast<char*>(at);
  }
  ~SharedRegion() { ::munmap(address, bytes); }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
};

// Three layers of a small GPT on `device`, after two AdamW steps (weights
// and both moments set).
std::map<int, HeldLayer> trained_layers(const std::string& device) {
  TrainOptions options;
  options.model = {"test", 3, 32, 4, 97, 16};
  options.device = device;
  std::map<int, HeldLayer> held;
  for (int l = 0; l < 3; ++l) held.emplace(l, initial_layer(options, l));
  for (int step = 0; step < 2; ++step) {
    for (auto& [l, layer] : held) {
      for (auto& p : layer.module->parameters()) {
        torch::manual_seed(100 * step + l);
        p.mutable_grad() = torch::randn_like(p);
      }
    }
    step_optimizers(held, 0, 3);
  }
  return held;
}

std::size_t total_bytes(const std::map<int, HeldLayer>& held) {
  std::size_t total = 0;
  for (const auto& [l, layer] : held) total += packed_layer_bytes(layer);
  return total;
}

// Every layer packed into `region`, one after another.
void pack_all(const std::map<int, HeldLayer>& held, char* region, const DeviceToHost& device_to_host) {
  for (const auto& [l, layer] : held) {
    pack_layer_into(layer, region, device_to_host);
    region += packed_layer_bytes(layer);
  }
}

// Each layer's bytes in `region` equal pack_layer's (libtorch's copy).
void check_packed_as_libtorch(const std::map<int, HeldLayer>& held, const char* region) {
  for (const auto& [l, layer] : held) {
    const std::string expected = pack_layer(layer);
    CHECK(std::memcmp(region, expected.data(), expected.size()) == 0);
    region += expected.size();
  }
}

}  // namespace

TEST_CASE("snapshot copies: layers on the CPU have no GPU copier and pack as before") {
  const auto held = trained_layers("cpu");
  GpuSnapshotCopies copies;
  CHECK_FALSE(copies.mark_step_end(held));
  const DeviceToHost device_to_host = copies.begin();
  CHECK_FALSE(device_to_host);
  SharedRegion region(total_bytes(held));
  pack_all(held, region.address, device_to_host);
  copies.finish();
  check_packed_as_libtorch(held, region.address);
}

TEST_CASE("snapshot copies: on a GPU, copies on a stream of their own into page-locked shared memory equal "
          "libtorch's, bit for bit") {
  if (!torch::cuda::is_available()) OOBLECK_SKIP("no CUDA GPU");
  auto held = trained_layers("cuda");
  // Queued on the training stream before the mark: the copies wait for it.
  {
    torch::NoGradGuard no_grad;
    for (auto& [l, layer] : held) {
      for (auto& p : layer.module->parameters()) p.mul_(1.5).add_(0.25);
    }
  }
  SharedRegion region(total_bytes(held));
  const PageLock lock(region.address, region.bytes);
  CHECK(lock.locked());
  GpuSnapshotCopies copies;
  REQUIRE(copies.mark_step_end(held));
  const DeviceToHost device_to_host = copies.begin();
  REQUIRE(device_to_host);
  pack_all(held, region.address, device_to_host);
  copies.finish();
  check_packed_as_libtorch(held, region.address);
  // Again, as the next step's snapshot reuses the stream and the event.
  REQUIRE(copies.mark_step_end(held));
  std::memset(region.address, 0, region.bytes);
  pack_all(held, region.address, copies.begin());
  copies.finish();
  check_packed_as_libtorch(held, region.address);
}
