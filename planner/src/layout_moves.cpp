// The template search is exact for the suffixes' period (templates.cpp):
// among layouts of equal sigma and suffix period it returns whichever its
// programme met first, and some of those have a run of costly stages inside
// (a full period above the suffixes'), where a layout one move away has
// none: two nodes of stages of degree 4 side by side among nodes of one
// stage of degree 8, say, or a boundary a layer off. A move changes a few
// neighbouring stages and the transfers around them, so each is priced from
// the last layout's costs in O(S) (the steady period's passes), and kept
// only if strictly faster, so the walk ends.
#include "layout_moves.h"

#include <algorithm>
#include <cstddef>

#include "steady_period.h"

namespace oobleck::detail {
namespace {

class LocalMoves {
 public:
  LocalMoves(const CostModel& cost, std::vector<Stage>& stages)
      : cost_(cost), stages_(stages), count_(stages.size()), compute_(count_), transfers_(count_ - 1) {
    for (std::size_t s = 0; s < count_; ++s) compute_[s] = compute_of(s);
    for (std::size_t b = 0; b + 1 < count_; ++b) transfers_[b] = transfer_of(b);
    current_ = price();
  }

  void run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t b = 0; b + 1 < count_; ++b) {
        moved |= move_boundary(b, -1);  // both directions tried, whatever the first did
        moved |= move_boundary(b, 1);
      }
      for (std::size_t s = 0; s + 1 < count_; ++s) moved |= exchange_blocks(s);
    }
  }

 private:
  // Boundary b (between stages b and b + 1) by `step` layers.
  bool move_boundary(std::size_t b, int step) {
    Stage& x = stages_[b];
    Stage& y = stages_[b + 1];
    if (x.layer_end + step <= x.layer_begin || y.layer_begin + step >= y.layer_end) return false;
    save(b, b + 2);
    x.layer_end += step;
    y.layer_begin += step;
    return keep_if_faster(b, b + 2);
  }

  // The block of stages starting at s (the stages of one node, or one
  // stage over whole nodes) and the block after it trade places: the
  // stages keep their layers, the degrees (with recomputation and nodes)
  // follow their block.
  bool exchange_blocks(std::size_t s) {
    if (s > 0 && stages_[s - 1].node == stages_[s].node) return false;  // not a block's first stage
    const std::size_t mid = block_end(s);
    if (mid >= count_) return false;
    const std::size_t end = block_end(mid);
    const int first_node = stages_[s].node;
    const int second_span = stages_[end - 1].node + stages_[end - 1].node_span - stages_[mid].node;
    save(s, end);
    std::vector<Stage> shapes(saved_.begin() + static_cast<std::ptrdiff_t>(mid - s), saved_.end());
    shapes.insert(shapes.end(), saved_.begin(), saved_.begin() + static_cast<std::ptrdiff_t>(mid - s));
    bool same = true;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      Stage& st = stages_[s + i];
      const Stage& shape = shapes[i];
      same &= st.gpus == shape.gpus && st.recompute == shape.recompute;
      st.gpus = shape.gpus;
      st.recompute = shape.recompute;
      st.node_span = shape.node_span;
      st.node = (i < end - mid ? first_node : first_node + second_span) + (shape.node - shapes[i < end - mid ? 0 : end - mid].node);
    }
    if (same) {
      restore(s);
      return false;
    }
    return keep_if_faster(s, end);
  }

  [[nodiscard]] std::size_t block_end(std::size_t s) const {
    std::size_t e = s + 1;
    while (e < count_ && stages_[e].node == stages_[s].node) ++e;
    return e;
  }

  void save(std::size_t lo, std::size_t hi) {
    saved_.assign(stages_.begin() + static_cast<std::ptrdiff_t>(lo), stages_.begin() + static_cast<std::ptrdiff_t>(hi));
    saved_compute_.assign(compute_.begin() + static_cast<std::ptrdiff_t>(lo), compute_.begin() + static_cast<std::ptrdiff_t>(hi));
    const std::size_t t_lo = lo > 0 ? lo - 1 : 0, t_hi = std::min(hi, count_ - 1);
    saved_transfers_.assign(transfers_.begin() + static_cast<std::ptrdiff_t>(t_lo),
                            transfers_.begin() + static_cast<std::ptrdiff_t>(t_hi));
  }
  void restore(std::size_t lo) {
    std::copy(saved_.begin(), saved_.end(), stages_.begin() + static_cast<std::ptrdiff_t>(lo));
    std::copy(saved_compute_.begin(), saved_compute_.end(), compute_.begin() + static_cast<std::ptrdiff_t>(lo));
    const std::size_t t_lo = lo > 0 ? lo - 1 : 0;
    std::copy(saved_transfers_.begin(), saved_transfers_.end(), transfers_.begin() + static_cast<std::ptrdiff_t>(t_lo));
  }

  // Stages [lo, hi) changed: reprice them and the transfers around them;
  // keep the change if every stage still fits and it is faster, else undo.
  // Most moves are not faster, and most of those are told so without the
  // period's passes: the period is at least every stage's compute (the
  // passes start from the largest) and the mean of every run, so at least
  // the changed stages' and the new mean of the run (or link) that set the
  // period before the move, summed as steady_period sums it. A move whose
  // T(M) by that floor is not below the current one is not kept. (The
  // walk keeps the moves it kept when it priced every one in full: the
  // same templates, byte for byte, over the plans compared in the README.)
  bool keep_if_faster(std::size_t lo, std::size_t hi) {
    bool fit = true;
    Milliseconds widest = 0;
    for (std::size_t s = lo; s < hi; ++s) {
      compute_[s] = compute_of(s);
      fit &= fits(s);
      widest = std::max(widest, compute_[s]);
    }
    for (std::size_t b = lo > 0 ? lo - 1 : 0; b < std::min(hi, count_ - 1); ++b) transfers_[b] = transfer_of(b);
    if (fit) {
      const Milliseconds first = first_microbatch();
      const Milliseconds floor =
          std::max(widest, critical_.link ? transfers_[critical_.first]
                                          : run_mean_ms(compute_, transfers_, critical_.first, critical_.last));
      if (first + (cost_.microbatches() - 1) * floor < current_) {
        const SteadyPeriod period = steady_period(compute_, transfers_);
        const Milliseconds moved = first + (cost_.microbatches() - 1) * period.ms;
        if (moved < current_) {
          current_ = moved;
          critical_ = period;
          return true;
        }
      }
    }
    restore(lo);
    return false;
  }

  [[nodiscard]] Milliseconds compute_of(std::size_t s) const {
    const Stage& st = stages_[s];
    return cost_.stage_compute_ms(st.layer_begin, st.layer_end, st.gpus, st.recompute);
  }
  [[nodiscard]] Milliseconds transfer_of(std::size_t b) const {
    return cost_.transfer_ms(stages_[b].layer_end, stages_[b].node == stages_[b + 1].node, stages_[b].gpus);
  }
  [[nodiscard]] bool fits(std::size_t s) const {
    const Stage& st = stages_[s];
    const int in_flight = std::min(cost_.microbatches(), static_cast<int>(count_ - s));
    return cost_.stage_fits(st.layer_begin, st.layer_end, st.gpus, in_flight, st.recompute);
  }
  [[nodiscard]] Milliseconds first_microbatch() const {
    Milliseconds first = 0;
    for (std::size_t s = 0; s < count_; ++s) first += compute_[s] + (s + 1 < count_ ? 2 * transfers_[s] : 0.0);
    return first;
  }
  [[nodiscard]] Milliseconds price() {
    critical_ = steady_period(compute_, transfers_);
    return first_microbatch() + (cost_.microbatches() - 1) * critical_.ms;
  }

  const CostModel& cost_;
  std::vector<Stage>& stages_;
  std::size_t count_;
  std::vector<Milliseconds> compute_, transfers_;
  Milliseconds current_ = 0;
  SteadyPeriod critical_;  // what sets the current layout's period
  std::vector<Stage> saved_;
  std::vector<Milliseconds> saved_compute_, saved_transfers_;
};

}  // namespace

void move_to_local_optimum(const CostModel& cost, std::vector<Stage>& stages) {
  if (stages.size() < 2) return;
  LocalMoves(cost, stages).run();
}

}  // namespace oobleck::detail
