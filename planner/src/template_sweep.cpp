// The template search's sweep of one row (m, U): every kind of first
// stage that may end on its GPUs, each a sliding-window minimum over the
// successor row (template_search.cpp derives it), lowering a copy of the
// row that stays in the cache; then the row written to the table once.
#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

#include "template_search.h"

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

}  // namespace

void TemplateSearch::set_window_ends(int m) {
  // Past M microbatches in flight the memory limits stay those of M.
  const int in_flight = std::min(m, microbatches_);
  if (window_ends_in_flight_ == in_flight) return;
  // Within a solve a variant's ends mostly stay as they were from one
  // stage count to the next (the reach cuts them before memory does), and
  // then so do the runs that its ends and its cheaper kinds' set.
  const bool fresh = window_ends_in_flight_ == 0;  // (a new solve: new reaches and runs)
  window_ends_in_flight_ = in_flight;
  ends_changed_.assign(variants_.size(), 0);
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    if (!holds_layer_[d]) continue;  // (not swept)
    const std::size_t base = d * static_cast<std::size_t>(layers_ + 1);
    const int* memory = hi_memory_.data() + window_index(d, m, 0);
    bool changed = fresh;
    for (int l = 0; l <= layers_; ++l) {
      const int end = std::min(reach_[base + l], memory[l]);
      changed |= window_end_[base + l] != end;
      window_end_[base + l] = end;
    }
    ends_changed_[d] = changed;
  }
  // A recomputing stage [l, e) that a cheaper kind's window also holds
  // costs at least that kind's: the same links after it, the same rows to
  // follow, more compute. So such a variant is swept only from the layers
  // where its window reaches further than every cheaper kind's (where
  // memory stops those first).
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    if (cheaper_kinds_[d].empty() || !holds_layer_[d]) continue;
    bool stale = ends_changed_[d];
    for (const std::size_t p : cheaper_kinds_[d]) stale |= ends_changed_[p] != 0;
    if (!stale) continue;  // (its runs as the last stage count's)
    auto& runs = reaching_runs_[d];
    runs.clear();
    const int* own = window_end_.data() + d * static_cast<std::size_t>(layers_ + 1);
    for (const auto& [run_lo, run_hi] : fitting_runs_[d]) {
      for (int l = run_hi; l >= run_lo; --l) {
        bool reaches = true;
        for (const std::size_t p : cheaper_kinds_[d]) {
          // (A cheaper kind holds a layer wherever this one does; one
          // that holds none has no window ends set.)
          if (holds_layer_[p] && own[l] <= window_end_[p * static_cast<std::size_t>(layers_ + 1) + l]) reaches = false;
        }
        if (reaches) add_below(runs, l);
      }
    }
  }
  swept_bits_ = 0;
  if (!variant_bits_) return;
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    if (holds_layer_[d] && !swept_runs(d).empty()) swept_bits_ |= std::uint64_t{1} << d;
  }
}

void TemplateSearch::sweep_row(int m, int u, Sweeper& sweeper, const Alive* slot) {
  // The layers the prefix can leave to the suffix (sweep()).
  const int l_max = std::min(layers_ - m, covered_[gpu_limit_ - u]);
  if (l_max < 0) return;
  // Each variant lowers the row's values in the sweeper's own copy, which
  // stays in the cache; the table's row is written once, at the end. (The
  // copy is infinite between rows: each row's end resets what it touched.)
  double* least = sweeper.least.data();
  sweeper.touched_lo = l_max + 1;
  sweeper.touched_hi = -1;
  // The rows of m - 1 stages a first stage may lead to (none for m = 1).
  const int next_lo = m > 1 ? u_lo_[m - 1] : 1, next_hi = m > 1 ? u_hi_[m - 1] : 0;
  const std::size_t next_base = m > 1 ? row_base_[m - 1] : 0;
  // (checked: whether the variant holds a layer and has runs to sweep is
  // known, as where the bits chose it for m > 1)
  const auto visit = [&](std::size_t d, bool checked) {
    const int t = degree(d);
    if (!checked) {
      if (!holds_layer_[d]) return;  // no stage of this kind holds a layer under the bound
      if (swept_runs(d).empty() && !terminal_allowed(m, u, t)) return;  // (a cheaper kind's stages are as good)
    }
    const int u_next = u - t;
    std::ptrdiff_t next = -1;  // the successor row, if live
    if (u_next >= next_lo && u_next <= next_hi) {
      next = static_cast<std::ptrdiff_t>(next_base + static_cast<std::size_t>(u_next - next_lo));
      if (alive_[next].lo > alive_[next].hi) next = -1;
    }
    if (!terminal_allowed(m, u, t)) {  // then only through a live row of m - 1 stages
      if (next < 0) return;
      // ... that a stage from l_max or below reaches (its reach grows with l).
      if (window_end_[d * static_cast<std::size_t>(layers_ + 1) + static_cast<std::size_t>(l_max)] < alive_[next].lo) {
        return;
      }
    }
    sweep(m, u, d, l_max, next, sweeper);
  };
  if (variant_bits_) {
    // (A single stage may end a layout without runs to sweep: m = 1 visits
    // every variant holding a layer.)
    for (std::uint64_t bits = fitting_bits_[static_cast<std::size_t>(u)] & (m == 1 ? holding_bits_ : swept_bits_);
         bits != 0; bits &= bits - 1) {
      visit(static_cast<std::size_t>(std::countr_zero(bits)), m > 1);
    }
  } else {
    for (std::size_t k = fitting_start_[u]; k < fitting_start_[u + 1]; ++k) visit(fitting_[k], false);
  }
  // The row holds the values under the suffix's round-trip limit (its sum
  // over m stages below the bound), live from the first to the last, and
  // its largest finite value, which the next solve's round trips check.
  const double round_trip_limit = bound_ * m;
  const int touched_lo = sweeper.touched_lo, touched_hi = sweeper.touched_hi;
  const auto reset = [&] {
    if (touched_lo <= touched_hi) std::fill(least + touched_lo, least + touched_hi + 1, kInfinity);
  };
  int lo = touched_lo, hi = touched_hi;
  while (lo <= hi && !(least[lo] < round_trip_limit)) ++lo;
  if (lo > hi) {
    reset();
    return;
  }
  while (!(least[hi] < round_trip_limit)) --hi;
  const auto r = static_cast<std::size_t>(row_index(m, u));
  if (slot) {
    if (lo < slot->lo || hi > slot->hi) throw std::logic_error("template search: an update widened a row");
  } else {
    const auto length = static_cast<std::size_t>(hi - lo + 1);
    std::size_t start;
    if (sweepers_.size() > 1) {
      start = slots_end_.fetch_add(length, std::memory_order_relaxed);
    } else {  // (no other thread: no locked add)
      start = slots_end_.load(std::memory_order_relaxed);
      slots_end_.store(start + length, std::memory_order_relaxed);
    }
    row_start_[r] = start - static_cast<std::size_t>(lo);
  }
  double* row = value_.get() + row_start_[r];
  double largest = 0;
  for (int l = lo; l <= hi; ++l) {
    const bool finite = least[l] < round_trip_limit;
    row[l] = finite ? least[l] : kInfinity;
    largest = std::max(largest, finite ? least[l] : 0.0);  // (values are sums of times: none below 0)
  }
  reset();
  row_max_[r] = largest;
  sweeper.live_rows.push_back(r);
  alive_[r].lo = lo;
  alive_[r].hi = hi;
}

void TemplateSearch::sweep_rows(int m, int lo, int hi, Sweeper& sweeper) {
  for (int u = lo; u <= hi; ++u) {
    sweep_row(m, u, sweeper);
    const auto r = row_index(m, u);
    if (alive_[r].lo <= alive_[r].hi) {
      sweeper.live_lo = std::min(sweeper.live_lo, u);
      sweeper.live_hi = std::max(sweeper.live_hi, u);
    }
  }
}

void TemplateSearch::sweep(int m, int u, std::size_t d, int l_max, std::ptrdiff_t next, Sweeper& sweeper) {
  const int t = degree(d);
  const int u_next = u - t;
  sweeper.states += l_max + 1;
  double* least = sweeper.least.data();
  const double* prefix = prefix_[d].data();
  // The window's end: the bound on compute, and memory. (A successor's
  // m - 1 layers need no term: its row is infinite past last_boundary(m).)
  const int* window_end = window_end_.data() + d * static_cast<std::size_t>(layers_ + 1);
  const auto hi = [window_end](int l) { return window_end[l]; };
  const auto improve = [least](int l, double v) { least[l] = std::min(least[l], v); };
  if (terminal_allowed(m, u, t)) {
    for (int l = 0; l <= l_max; ++l) {
      if (hi(l) >= layers_) improve(l, prefix[layers_] - prefix[l]);
    }
    sweeper.touched_lo = 0;
    sweeper.touched_hi = std::max(sweeper.touched_hi, l_max);
  }
  // Exactly m-1 stages follow, on the row `next`, where it lives.
  if (next >= 0) {
    const int succ_lo = alive_[next].lo, succ_hi = alive_[next].hi;
    const double* rest = row_values(next);
    // Sliding-window minimum of through(e) over e in [l+1, hi[l]], l
    // descending: candidates enter at the front (smallest e), expired ones
    // leave at the back; values decrease from front to back. Successors
    // exist only for e in [succ_lo, succ_hi].
    const double* entry = entries(u_next, d);
    double* through = sweeper.through.data();
    int* window = sweeper.window.data();
    // (Locals: the stores through `through` and `least` could alias a member.)
    int head = layers_ + 1, tail = layers_ + 1;  // window[head, tail)
    // The window holds each candidate's value beside it (through[], by
    // position), and its back (its least value) apart from the arrays:
    // loading an index and then its value was the sweep's longest chain of
    // dependent loads.
    int back = 0;
    double back_through = kInfinity;
    const auto enter = [&](int e) {  // (e >= succ_lo)
      const double value = entry[e] + rest[e];
      if (value < kInfinity) {
        while (through[head] >= value) ++head;  // (through[tail]: the sentinel)
        window[--head] = e;
        through[head] = value;
        if (head + 1 == tail) {  // it emptied the window: it is the back too
          back = e;
          back_through = value;
        }
      }
    };
    // Layer l takes the window's least value once those past hi(l) left;
    // false where none is left and none can come (l below succ_lo: lower
    // l have no candidate either, as hi only shrinks).
    const auto take = [&](int l) {
      if (head < tail && back > hi(l)) {
        --tail;
        while (head < tail && window[tail - 1] > hi(l)) --tail;
        through[tail] = -kInfinity;
        if (head < tail) {
          back = window[tail - 1];
          back_through = through[tail - 1];
        }
      }
      if (head < tail) {
        improve(l, back_through - prefix[l]);
        return true;
      }
      return l >= succ_lo;
    };
    const int last = std::min(last_boundary(m), succ_hi);
    const int top = std::min(l_max, last - 1);
    // Only where a stage of this variant can hold a layer under the bound
    // (its runs of l): elsewhere the window is empty. Each run starts with
    // the window the layers above it would have left, [b + 1, hi(b)].
    bool done = false;  // no candidate left, none to come
    for (const auto& [run_lo, run_hi] : swept_runs(d)) {
      if (done) break;
      if (run_lo > top) continue;
      const int b = std::min(run_hi, top);
      const int reach_b = std::min(hi(b), last);
      if (reach_b < succ_lo) break;  // no successor in reach, here or below (hi grows with l)
      head = tail = layers_ + 1;
      through[tail] = -kInfinity;  // below every value: entering stops there
      for (int e = reach_b; e >= std::max(b + 2, succ_lo); --e) enter(e);
      // Down to succ_lo - 1 each layer's next boundary enters; below, none.
      int l = b;
      for (const int entering_to = std::max(run_lo, succ_lo - 1); l >= entering_to && !done; --l) {
        enter(l + 1);
        done = !take(l);
      }
      for (; l >= run_lo && !done; --l) done = !take(l);
      if (done) ++l;  // (l did not take a value)
      if (l < b) {  // layers (l, b] may have taken a value
        sweeper.touched_lo = std::min(sweeper.touched_lo, l + 1);
        sweeper.touched_hi = std::max(sweeper.touched_hi, b);
      }
    }
  }
}

}  // namespace oobleck::detail
