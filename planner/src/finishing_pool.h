// Threads that finish node counts' templates (templates.cpp: local moves
// and, with interleaving, the interleaved layouts) while the search still
// sweeps rows for the others: a node count's walk, once ended, is final,
// so its finishing need not wait for the rest. Each node count is finished
// on its own, so the templates do not depend on the threads or the order.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace oobleck::detail {

class FinishingPool {
 public:
  // Starts `early_helpers` threads at once, for the node counts handed
  // over while the caller searches on (0: none until finish_all).
  FinishingPool(std::function<void(int)> finish, int early_helpers);
  ~FinishingPool();  // (on unwinding: drops what is left and joins)
  FinishingPool(const FinishingPool&) = delete;
  FinishingPool& operator=(const FinishingPool&) = delete;

  // Node count n's walk has ended: finish(n) may run now.
  void hand_over(int n);
  // Finishes what is left on `threads` threads in all (the caller's and
  // those already started among them), the largest node counts first (they
  // take longest), and returns once every one is done; rethrows the first
  // failure.
  void finish_all(int threads);

 private:
  void serve();
  void join();

  std::function<void(int)> finish_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::priority_queue<int> waiting_;  // under mutex_: the largest first
  bool closed_ = false;               // under mutex_: nothing more comes
  std::exception_ptr failed_;         // under mutex_
  std::vector<std::thread> threads_;
};

}  // namespace oobleck::detail
