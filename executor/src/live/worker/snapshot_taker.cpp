#include "snapshot_taker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include "state_copies.h"

namespace oobleck::executor {

// A slot of the agent's memory, mapped for writing while the worker lives;
// page-locked when the layers copied into it live on a GPU.
struct SnapshotTaker::MappedSlot {
  void* address = MAP_FAILED;
  std::size_t bytes = 0;
  std::unique_ptr<PageLock> lock;

  MappedSlot(const std::string& path, std::size_t size, bool from_gpu) : bytes(size) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open the agent's memory " + path);
    // Populated now, on this background thread: a copy from a GPU into pages
    // that fault in as it goes ran at 1 GB/s on an H200, against 10 GB/s into
    // pages already there, and such a copy holds the GPU's stream throughout.
    address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (address == MAP_FAILED) throw std::runtime_error("cannot map the agent's memory " + path);
    if (from_gpu) lock = std::make_unique<PageLock>(address, bytes);
  }
  ~MappedSlot() {
    lock.reset();  // unlocked before it is unmapped
    ::munmap(address, bytes);
  }
  MappedSlot(const MappedSlot&) = delete;
  MappedSlot& operator=(const MappedSlot&) = delete;
};

SnapshotTaker::SnapshotTaker(std::string token, int port) : token_(std::move(token)), port_(port) {}

SnapshotTaker::~SnapshotTaker() {
  wait();
  try {
    gpu_copies_.use_device();  // the slots are let go on their GPU
  } catch (const std::exception&) {
  }
}

void SnapshotTaker::start(SnapshotJob job, const std::map<int, HeldLayer>& held) {
  wait();
  sealed_ = false;
  // Marked here, on the training thread, right after the optimizer step was
  // queued: the copies wait for it and not for the next step's passes.
  from_gpu_ = job.to_memory && port_ > 0 && gpu_copies_.mark_step_end(held);
  thread_ = std::thread([this, job = std::move(job), &held] { run(job, held); });
}

double SnapshotTaker::wait() {
  if (!thread_.joinable()) return 0;
  const auto start = std::chrono::steady_clock::now();
  thread_.join();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void SnapshotTaker::run(const SnapshotJob& job, const std::map<int, HeldLayer>& held) {
  const SnapshotSeal& s = job.seal;
  run_this_thread_when_idle();
  if (job.to_memory && port_ > 0) {
    try {
      sealed_ = to_memory(s, held);
    } catch (const std::exception& e) {
      // Abandoned by a new generation, or the agent is going: this snapshot
      // stays incomplete and is never read.
      std::fprintf(stderr, "oobleck-run worker %s GPU %d: the snapshot of step %d is incomplete: %s\n",
                   s.owner.c_str(), s.gpu, s.step, e.what());
      client_.reset();
    }
  }
  if (!job.save) return;
  // The checkpoint, in its durable format, whatever became of the snapshot.
  try {
    for (int l : job.saved_layers) save_layer_file(*job.save, l, {s.degree, s.shard}, serialize_layer(held.at(l)));
  } catch (const std::exception& e) {
    // Its folder removed by a rollback to an earlier step, or the disk
    // failing: this checkpoint stays incomplete and is never read.
    std::fprintf(stderr, "oobleck-run worker %s GPU %d: the checkpoint of step %d is incomplete: %s\n",
                 s.owner.c_str(), s.gpu, s.step, e.what());
    return;
  }
  if (job.on_saved) job.on_saved();
}

bool SnapshotTaker::to_memory(const SnapshotSeal& s, const std::map<int, HeldLayer>& held) {
  if (!client_) client_ = std::make_unique<SnapshotClient>("127.0.0.1", port_, token_, "worker");
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (int l = s.layer_begin; l < s.layer_end; ++l) total += sizes.emplace_back(packed_layer_bytes(held.at(l)));
  const auto size_of = [&](int l) { return sizes[static_cast<std::size_t>(l - s.layer_begin)]; };
  if (use_slots_) {
    if (from_gpu_) gpu_copies_.use_device();  // before slots are page-locked or let go
    if (const auto slot = client_->claim(s.owner, s.gpu, total)) {
      // Slots the agent has let go of are never claimed again: the oldest
      // others go.
      for (auto it = mapped_.begin(); mapped_.size() > kSnapshotsKept + 1 && it != mapped_.end();) {
        it = it->first == slot->id ? std::next(it) : mapped_.erase(it);
      }
      auto& mapped = mapped_[slot->id];
      if (!mapped) {
        mapped = std::make_unique<MappedSlot>(slot->path, slot->bytes, from_gpu_);
        if (mapped->lock && !mapped->lock->locked() && !warned_unlocked_) {
          warned_unlocked_ = true;
          std::fprintf(stderr, "oobleck-run worker %s GPU %d: snapshot slots could not be page-locked: copies from "
                       "the GPU run at pageable memory's speed\n", s.owner.c_str(), s.gpu);
        }
      }
      char* at = static_cast<char*>(mapped->address);
      {
        // Every copy queued lands before the slot is handed over, or
        // unmapped, or the optimizer changes what it copies.
        const DeviceToHost device_to_host = from_gpu_ ? gpu_copies_.begin() : DeviceToHost{};
        struct Landed {
          GpuSnapshotCopies& copies;
          bool active;
          ~Landed() {
            if (!active) return;
            try {
              copies.finish();
            } catch (const std::exception&) {
              // A failed copy: the snapshot is incomplete and never sealed.
            }
          }
        } landed{gpu_copies_, from_gpu_};
        for (int l = s.layer_begin; l < s.layer_end; ++l) {
          pack_layer_into(held.at(l), at, device_to_host);
          at += size_of(l);
        }
        landed.active = false;
        if (from_gpu_) gpu_copies_.finish();
      }
      return client_->adopt(slot->id, s, sizes);
    }
    use_slots_ = false;  // the agent has no memory to lend: send the bytes from now on
  }
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    client_->put({s.owner, s.step, l, s.degree, s.shard}, pack_layer(held.at(l)));
  }
  return client_->seal(s);
}

}  // namespace oobleck::executor
