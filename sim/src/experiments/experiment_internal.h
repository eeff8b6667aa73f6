// What the experiments' sources share: running independent jobs on several
// threads, and printf-style formatting into a string.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "oobleck/sim/experiment.h"

namespace oobleck::sim::experiment_internal {

// Runs job(0) .. job(count - 1) on options.threads threads (0: one per
// core). Results come back in job order, so nothing depends on scheduling;
// the first failed job's exception (in job order) is rethrown once all end.
template <typename Result, typename Job>
std::vector<Result> run_jobs(int count, const Job& job, const ExperimentOptions& options, const std::string& what) {
  std::vector<Result> results(static_cast<std::size_t>(count));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count));
  std::atomic<int> next{0}, done{0};
  std::mutex report;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int workers = std::max(1, std::min(count, options.threads > 0 ? options.threads : cores));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        try {
          results[static_cast<std::size_t>(i)] = job(i);
        } catch (...) {
          errors[static_cast<std::size_t>(i)] = std::current_exception();
        }
        const int finished = ++done;
        std::lock_guard lock(report);
        if (options.progress) {
          options.progress(what + " " + std::to_string(finished) + "/" + std::to_string(count) + " done");
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

// snprintf into a string of any length.
[[nodiscard]] std::string formatted(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace oobleck::sim::experiment_internal
