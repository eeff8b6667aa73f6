#include "finishing_pool.h"

#include <utility>

namespace oobleck::detail {

FinishingPool::FinishingPool(std::function<void(int)> finish, int early_helpers) : finish_(std::move(finish)) {
  for (int i = 0; i < early_helpers; ++i) threads_.emplace_back([this] { serve(); });
}

FinishingPool::~FinishingPool() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    waiting_ = {};
  }
  ready_.notify_all();
  join();
}

void FinishingPool::hand_over(int n) {
  {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    waiting_.push(n);
  }
  ready_.notify_one();
}

void FinishingPool::finish_all(int threads) {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
  for (int i = static_cast<int>(threads_.size()) + 1; i < threads; ++i) threads_.emplace_back([this] { serve(); });
  serve();
  join();
  if (failed_) std::rethrow_exception(failed_);
}

void FinishingPool::serve() {
  while (true) {
    int n = 0;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return !waiting_.empty() || closed_; });
      if (waiting_.empty()) return;
      n = waiting_.top();
      waiting_.pop();
    }
    try {
      finish_(n);
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        if (!failed_) failed_ = std::current_exception();
        waiting_ = {};
      }
      return;
    }
  }
}

void FinishingPool::join() {
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace oobleck::detail
