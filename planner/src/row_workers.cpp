#include "row_workers.h"

#include <algorithm>
#include <atomic>

#include "oobleck/planner.h"

namespace oobleck {
namespace {

std::atomic<int> chosen_threads{0};    // -1: the machine's cores
std::atomic<int> chosen_finishing{0};  // 0: as chosen_threads; -1: the machine's cores

// The machine's cores, at most 8.
int machine_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }
constexpr int kSpins = 20000;

// A spinning thread's hint to the core (x86's PAUSE): it leaves the core's
// other hardware thread, which may be the one it waits for, room to run.
inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One turn of a spin: a pause, and every 64th a yield to the scheduler.
inline void spin_turn(int spin) {
  if (spin % 64 == 63) {
    std::this_thread::yield();
  } else {
    pause();
  }
}

}  // namespace

void set_search_threads(int threads) {
  if (threads < 0 || threads > 256) {
    throw InputError("threads: expected 0 (the machine's cores, up to 8) to 256, got " + std::to_string(threads));
  }
  chosen_threads = threads == 0 ? -1 : threads;
}

void set_finishing_threads(int threads) {
  if (threads < -1 || threads > 256) {
    throw InputError("finishing threads: expected -1 (as the search's), 0 (the machine's cores, up to 8) to 256, got " +
                     std::to_string(threads));
  }
  chosen_finishing = threads == -1 ? 0 : threads == 0 ? -1 : threads;
}

namespace detail {

// One by default: the threads hand each other work tens of thousands of
// times a search, microseconds apart, which pays only on cores of their
// own (175B to 256 nodes, 2 threads on 2 idle cores: 1.6x faster; with
// another program busy on one of them, 1.6x slower).
int search_threads() {
  const int chosen = chosen_threads.load();
  if (chosen > 0) return chosen;
  if (chosen == 0) return 1;
  return machine_threads();
}

int finishing_threads() {
  const int chosen = chosen_finishing.load();
  if (chosen > 0) return chosen;
  return chosen == 0 ? search_threads() : machine_threads();
}

RowWorkers::RowWorkers(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { serve(i); });
}

RowWorkers::~RowWorkers() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    ++round_;
    round_seen_.store(round_, std::memory_order_release);
  }
  start_.notify_all();
  for (auto& w : workers_) w.join();
}

void RowWorkers::run(const std::function<void(int)>& job) {
  job_ = &job;
  running_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    const std::lock_guard lock(mutex_);
    ++round_;
    round_seen_.store(round_, std::memory_order_release);
  }
  start_.notify_all();
  job(0);
  // (Sleeping instead would cost a wake-up per stage count, tens of
  // thousands of them a search.)
  for (int spin = 0; running_.load(std::memory_order_acquire) != 0; ++spin) spin_turn(spin);
  job_ = nullptr;
}

void RowWorkers::serve(int index) {
  std::uint64_t seen = 0;
  while (true) {
    std::uint64_t now = seen;
    // Rounds follow each other within microseconds while a solve runs:
    // look for the next one a while (giving way to others) before sleeping.
    for (int spin = 0; spin < kSpins && (now = round_seen_.load(std::memory_order_acquire)) == seen; ++spin) {
      spin_turn(spin);
    }
    if (now == seen) {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return round_ != seen; });
      now = round_;
    }
    seen = now;
    if (stopping_) return;
    (*job_)(index);
    running_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace detail
}  // namespace oobleck
