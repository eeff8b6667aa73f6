// A few threads that the template search's dynamic programme hands the rows
// of one stage count to (template_search.cpp): the rows of m stages depend
// only on those of m - 1, so they may be computed in any order, each by
// one thread, and the values do not depend on how many threads there are.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace oobleck::detail {

class RowWorkers {
 public:
  // `threads` in all, the caller's included (1: no thread is started).
  explicit RowWorkers(int threads);
  ~RowWorkers();
  RowWorkers(const RowWorkers&) = delete;
  RowWorkers& operator=(const RowWorkers&) = delete;

  [[nodiscard]] int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs job(i) for i = 0..threads()-1, i = 0 on the calling thread, and
  // returns once every one has returned. A job must not throw. The
  // workers spin between rounds (a solve's rounds are microseconds
  // apart), yielding as they go, before they sleep.
  void run(const std::function<void(int)>& job);

 private:
  void serve(int index);

  std::vector<std::thread> workers_;
  // A round is one run(): workers look for the next a while, then sleep
  // on start_ until round_ moves.
  std::mutex mutex_;
  std::condition_variable start_;
  std::uint64_t round_ = 0;  // under mutex_
  std::atomic<std::uint64_t> round_seen_{0};  // round_, for the spinning workers
  std::atomic<int> running_{0};  // workers not done with this round's job
  const std::function<void(int)>* job_ = nullptr;
  bool stopping_ = false;
};

// The threads the template search uses: set_search_threads(n) (0: the
// machine's cores, at most 8); 1 until it is called.
[[nodiscard]] int search_threads();

// The threads that finish node counts' templates (local moves,
// interleaved layouts): set_finishing_threads(n); as search_threads()
// until it is called.
[[nodiscard]] int finishing_threads();

}  // namespace oobleck::detail
