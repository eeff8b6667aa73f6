// What one solve of the template search (template_search.cpp) leaves to
// others: where its answers hold at a lower cap on the microbatches in
// flight (a later round of instantiation at a lower M, solve_memo.h), and
// its table, which the next solve just under its bound may update instead
// of sweeping anew.
//
// Layouts whose sigma differs only in its last bits (the same stages summed
// in another order) are not ties, and a walk still steps through them one
// solve at a time, each bound just under the last answer's period. Often no
// stage's compute and no transfer lies between the two bounds: then only
// the suffixes' round-trip limits tighten (a state of m stages keeps its
// sigma under the bound times m), values only rise, and the last table is
// updated instead of swept anew (tighten_round_trips): a row whose values
// all still lie under the new limit, none of whose successor rows changed,
// keeps them. Such an update needs the last table to span its GPUs, so a
// walk's full solve sweeps further ahead (templates.cpp), and an update
// asked for fewer keeps the table on all of them: the rows past its GPUs
// wait, marked, for the first update asked for theirs. (GPT-3 175B to 256
// nodes over up to 8 nodes: 354 of 563 solves so.)
#include <algorithm>
#include <vector>

#include "template_search.h"

namespace oobleck::detail {

void TemplateSearch::prepare_reuse(std::size_t rows) {
  const std::size_t degree_count = variants_.size();
  // The memory limit only tightens with m; from settled_from_ on it is the last.
  settled_from_.assign(degree_count * (layers_ + 1), 1);
  for (std::size_t d = 0; d < degree_count; ++d) {
    for (int l = 0; l < layers_; ++l) {
      const int last = hi_memory_[window_index(d, max_stages_, l)];
      int m = max_stages_;
      while (m > 1 && hi_memory_[window_index(d, m - 1, l)] == last) --m;
      settled_from_[d * static_cast<std::size_t>(layers_ + 1) + l] = m;
    }
  }
  // Every value at which a stage's compute or a transfer one way (2 C
  // passes where C lies under the bound) stops passing.
  for (std::size_t d = 0; d < degree_count; ++d) {
    for (int l = 0; l < layers_; ++l) {
      for (int e = l + 1; e <= layers_; ++e) edges_.push_back(prefix_[d][e] - prefix_[d][l]);
    }
  }
  for (int e = 1; e < layers_; ++e) {
    edges_.push_back(transfer_same_[e] / 2);
    for (const auto& cross : transfer_cross_) edges_.push_back(cross[e] / 2);
  }
  std::sort(edges_.begin(), edges_.end());
  edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
  changed_.assign(rows, 0);
  deferred_.assign(rows, 0);
  row_max_.assign(rows, 0.0);
  level_rows_.assign(static_cast<std::size_t>(max_stages_) + 2, 0);
}

// Every window end is min(reach, the limit of m's in-flight count). A lower
// cap c raises the limits of the rows past c to row c's: the same ends
// wherever the last row's limit already lies at or past the reach, or row
// c's limit is already the last one's. And rows past c start at layers
// below L - c only (each of m stages holds a layer).
int TemplateSearch::same_down_to_for(std::size_t d, const int* reach) const {
  const std::size_t base = d * static_cast<std::size_t>(layers_ + 1);
  const int* tightest = hi_memory_.data() + window_index(d, max_stages_, 0);
  int cap = 1;
  for (int l = 0; l < layers_; ++l) {
    if (tightest[l] < reach[l]) cap = std::max(cap, std::min(settled_from_[base + l], layers_ - l));
  }
  return cap;
}

int TemplateSearch::same_down_to_in_flight_at(double bound) const {
  std::vector<int> reach(static_cast<std::size_t>(layers_ + 1));
  int cap = 1;
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    compute_reach(d, bound, reach.data());
    cap = std::max(cap, same_down_to_for(d, reach.data()));
  }
  return cap;
}

double TemplateSearch::last_change_below(double bound) const {
  const auto it = std::lower_bound(edges_.begin(), edges_.end(), bound);
  return it == edges_.begin() ? 0.0 : *std::prev(it);
}

// The last solve's table, its bound lowered to bound_ where only the
// round-trip limits (a state of m stages: sigma under bound x m) move.
// Values only rise when the bound falls. A row keeps its values where all
// of them still lie under the new limit and no row it reads (m - 1 stages)
// changed: each of its values was the least of candidates that are all
// still there or, above the limit, were not the least. Other rows are
// swept again, as a full solve would sweep them, and count as changed only
// where their layers or values differ. Rows that were dead stay dead.
// (A row kept whole may hold layers past what this solve's GPU limit
// leaves to its prefix: no layout within the limit passes through them.)
// Rows past the GPUs this solve was asked for are left as they were, and
// marked (deferred_).
void TemplateSearch::tighten_round_trips() {
  std::vector<std::size_t> stale;  // rows of this m to sweep again
  for (int m = 1; m <= max_stages_; ++m) {
    const double limit = bound_ * m;
    bool any_live = false;
    stale.clear();
    // (Rows other than those the last full sweep made live stay dead.)
    for (std::size_t i = level_rows_[m]; i < level_rows_[m + 1]; ++i) {
      const std::size_t r = live_rows_[i];
      if (alive_[r].lo > alive_[r].hi) continue;
      const int u = row_gpus(m, r);
      any_live = true;
      // Past the GPUs asked for, no answer reads the row (nor any row it
      // feeds: those lie on more GPUs still): it waits for an update that
      // needs it, which sweeps it whatever its values.
      auto& deferred = deferred_[r];  // bit 0: deferred; bit 1: listed
      if (u > asked_limit_) {
        if (!(deferred & 2)) deferred_rows_.push_back(r);
        deferred = 3;
        continue;
      }
      const bool is_stale = (deferred & 1) || !(row_max_[r] < limit) || (changed_[r] & kReadsChanged);
      deferred &= 2;
      if (is_stale) stale.push_back(r);
    }
    if (!any_live) break;
    if (!stale.empty()) set_window_ends(m);
    // Rows of one m read only rows of m - 1 (and the marks of those that
    // changed): swept again in any order, by as many threads as there are.
    const auto sweep_again = [&](std::size_t i, Sweeper& sweeper) {
      const std::size_t r = stale[i];
      const int u = row_gpus(m, r);
      const Alive slot = alive_[r];
      const int lo = slot.lo, hi = slot.hi;
      const double* row = row_values(static_cast<std::ptrdiff_t>(r));
      sweeper.before.assign(row + lo, row + hi + 1);
      alive_[r].lo = layers_ + 1;
      alive_[r].hi = -1;
      sweep_row(m, u, sweeper, &slot);
      bool differs = alive_[r].lo != lo || alive_[r].hi != hi;
      for (int l = lo; l <= hi && !differs; ++l) differs = row[l] != sweeper.before[static_cast<std::size_t>(l - lo)];
      if (differs) changed_[r] |= kChanged;
    };
    const std::int64_t work = static_cast<std::int64_t>(stale.size()) * (layers_ - m + 1);
    if (sweepers_.size() > 1 && work >= kRowsWorthThreads) {
      ++shared_update_levels_;
      share_among_threads(stale.size(), 2, [&](std::size_t first, std::size_t end, Sweeper& sweeper) {
        for (std::size_t i = first; i < end; ++i) sweep_again(i, sweeper);
      });
    } else {
      for (std::size_t i = 0; i < stale.size(); ++i) sweep_again(i, sweepers_.front());
    }
    // The rows of m + 1 stages that read a row that changed are stale.
    for (const std::size_t r : stale) {
      if (!(changed_[r] & kChanged)) continue;
      const int u = row_gpus(m, r);
      if (!(changed_[r] & kReadsChanged)) changed_rows_.push_back(r);  // (else listed already)
      for (const int t : degrees_) {
        const auto reader = fits_in_node(u + t, t) ? row_index(m + 1, u + t) : -1;
        if (reader < 0 || changed_[static_cast<std::size_t>(reader)]) continue;
        changed_[static_cast<std::size_t>(reader)] = kReadsChanged;
        changed_rows_.push_back(static_cast<std::size_t>(reader));
      }
    }
  }
  for (auto& sweeper : sweepers_) {
    sweeper.live_rows.clear();  // (rows swept again were live already: live_rows_ holds them)
    states_ += sweeper.states;
    sweeper.states = 0;
  }
  for (const std::size_t r : changed_rows_) changed_[r] = 0;
  changed_rows_.clear();
}

}  // namespace oobleck::detail
