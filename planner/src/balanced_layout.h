// A quick, balanced template layout (balanced_layout.cpp).
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

// The splits of layers over lists of devices that balanced_layout found,
// kept from one search to the next at another M: a split depends on M only
// through the microbatches each stage keeps in flight, min(M, the stages
// from it on), the same for every M at or above the list's length.
class BalancedSplits {
 public:
  // Without `keep`, no split is kept (a single search: each list of
  // devices is split once), only the breakpoints.
  explicit BalancedSplits(bool keep = true) : keep_(keep) {}

  // Readies the splits for searches with `cost`: drops them when they were
  // found on another profile.
  void serve(const CostModel& cost);

  // Every stage [begin, end) at `degree`: its compute (stage_compute_ms)
  // and the most microbatches it keeps in flight (stage_max_in_flight),
  // looked up instead of recomputed: the splits' bisections ask for the
  // same stages many times over.
  class Stages {
   public:
    Stages(const CostModel& cost, int degree, Recompute r);
    [[nodiscard]] double compute_ms(int begin, int end) const { return compute_[index(begin, end)]; }
    [[nodiscard]] int max_in_flight(int begin, int end) const { return max_in_flight_[index(begin, end)]; }
    // Every stage's compute, sorted and distinct: where the splits'
    // bisections may stop.
    [[nodiscard]] const std::vector<double>& breakpoints() const { return breakpoints_; }

   private:
    [[nodiscard]] std::size_t index(int begin, int end) const {
      return row_start_[static_cast<std::size_t>(begin)] + static_cast<std::size_t>(end - begin - 1);
    }
    std::vector<std::size_t> row_start_;  // per begin: where its stages [begin, begin + 1 ..] start
    std::vector<double> compute_;
    std::vector<int> max_in_flight_;
    std::vector<double> breakpoints_;
  };
  [[nodiscard]] const Stages& stages(const CostModel& cost, int degree, Recompute r);

  // (A list of devices: per stage, its degree and first node.)
  using Devices = std::vector<std::pair<int, int>>;
  struct Key {
    Devices devices;
    Recompute recompute;
    int in_flight_cap;  // min(M, stages)
    friend auto operator<=>(const Key&, const Key&) = default;
  };
  std::map<Key, std::optional<std::vector<Stage>>> kept;
  [[nodiscard]] bool keeps() const { return keep_; }

 private:
  bool keep_;
  std::string profile_;
  std::map<std::pair<int, Recompute>, Stages> stages_;
};

// j stages of G/j GPUs on every one of `nodes` nodes (or one on every k
// nodes), layers split evenly by compute within memory; the best such
// layout over j, or where none fills the nodes with at most a stage a layer,
// the fewest stages over k nodes beside one a node; nullopt when none fits.
// The layer splits are taken from `splits` where they were found before,
// and kept there (serve() it first).
[[nodiscard]] std::optional<std::vector<Stage>> balanced_layout(const CostModel& cost, int nodes,
                                                                BalancedSplits& splits);

}  // namespace oobleck::detail
