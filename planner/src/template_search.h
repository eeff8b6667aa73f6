// The template search's dynamic programme (template_search.cpp; the sweep of
// one row in template_sweep.cpp): for a bound on the steady period, the
// least sigma of every suffix state.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "oobleck/planner.h"
#include "row_workers.h"

namespace oobleck::detail {

// Reusable: solve() at one bound after another on the same tables (a bound
// just under the last, on no more GPUs than the last full solve's, may
// update the last solve's table instead of sweeping anew: the same
// answers).
class TemplateSearch {
 public:
  // The value table's memory, handed from one search to the next (its
  // pages are written once, not faulted in again by every search): a
  // search takes it when it is large enough and hands it back when done.
  // What it holds is never read, only overwritten (value_).
  // (Freed with std::free: allocated aligned to huge pages, see
  // template_search.cpp.)
  struct FreeValues {
    void operator()(double* values) const;
  };
  using Values = std::unique_ptr<double[], FreeValues>;
  struct Storage {
    Values values;
    std::size_t size = 0;
  };

  TemplateSearch(const CostModel& cost, int max_nodes, Storage* storage = nullptr);
  ~TemplateSearch();
  TemplateSearch(const TemplateSearch&) = delete;
  TemplateSearch& operator=(const TemplateSearch&) = delete;

  // Least sigma for every state whose steady period is strictly below
  // `bound` (every stage's compute, every transfer one way, and every
  // suffix's sum over its stage count), on at most `gpu_limit` GPUs.
  void solve(double bound, int gpu_limit);

  // The best solution of the last solve() for `nodes` nodes: its sigma and
  // stages; of the layouts of that sigma, one of least suffix period.
  [[nodiscard]] std::optional<std::pair<double, std::vector<Stage>>> best(int nodes) const {
    return best_on_gpus(nodes * gpus_);
  }

  // The same on `u` GPUs: whole nodes, or fewer than one node's.
  [[nodiscard]] std::optional<std::pair<double, std::vector<Stage>>> best_on_gpus(int u) const;

  // The last solve was the same, bit for bit, under any cap on the
  // microbatches in flight from this one up to this search's own
  // (min(M, layers)): a suffix of m stages keeps min(cap, m) in flight,
  // and where its memory limit lies beyond the bound's compute reach
  // (or is already the tightest it gets) a lower cap changes no window.
  [[nodiscard]] int same_down_to_in_flight() const { return same_down_to_in_flight_; }
  // The same for a solve at `bound`, without solving.
  [[nodiscard]] int same_down_to_in_flight_at(double bound) const;

  // States (m, U, l) swept by all solves so far.
  [[nodiscard]] std::int64_t states() const { return states_; }
  // The highest value under `bound` at which a stage's compute or a
  // transfer stops passing: a solve at any bound above it and up to
  // `bound` sees the same stages and links (0: none).
  [[nodiscard]] double last_change_below(double bound) const;
  // Solves that updated the last one's table instead of sweeping anew
  // (tighten_round_trips).
  [[nodiscard]] std::int64_t tightened_solves() const { return tightened_solves_; }
  // Stage counts whose rows were shared among threads, in all and in
  // updates.
  [[nodiscard]] std::int64_t shared_levels() const { return shared_levels_; }
  [[nodiscard]] std::int64_t shared_update_levels() const { return shared_update_levels_; }

 private:
  [[nodiscard]] std::size_t window_index(std::size_t d, int m, int l) const {
    return (d * static_cast<std::size_t>(max_stages_ + 1) + static_cast<std::size_t>(m)) *
               static_cast<std::size_t>(layers_ + 1) +
           static_cast<std::size_t>(l);
  }
  // A stage on the GPUs (u - t, u] from the end: inside one node, or on
  // whole nodes.
  [[nodiscard]] bool fits_in_node(int u, int t) const {
    if (t <= gpus_) return (u - 1) / gpus_ == (u - t) / gpus_;
    return t % gpus_ == 0 && u % gpus_ == 0 && u >= t;
  }
  [[nodiscard]] std::ptrdiff_t row_index(int m, int u) const {
    if (m < 1 || m > max_stages_ || u < u_lo_[m] || u > u_hi_[m]) return -1;
    return static_cast<std::ptrdiff_t>(row_base_[m] + static_cast<std::size_t>(u - u_lo_[m]));
  }
  // The GPUs of row r of m stages (row_index's inverse).
  [[nodiscard]] int row_gpus(int m, std::size_t r) const { return u_lo_[m] + static_cast<int>(r - row_base_[m]); }
  // Row r's values, indexed by layer: only its live layers may be read.
  [[nodiscard]] const double* row_values(std::ptrdiff_t r) const {
    return value_.get() + row_start_[static_cast<std::size_t>(r)];
  }
  // The least sigma of state (m, u, l): infinite outside its row's live layers.
  [[nodiscard]] double value_at(int m, int u, int l) const {
    const auto i = row_index(m, u);
    if (i < 0 || l < alive_[i].lo || l > alive_[i].hi) return std::numeric_limits<double>::infinity();
    return row_values(i)[l];
  }
  // A successor row only if it holds some finite value; widens [lo, hi] to
  // the layers where it does (only those may be read: outside them the
  // row holds whatever an earlier solve left, or was never written).
  [[nodiscard]] const double* live_row(int m, int u, int& lo, int& hi) const {
    const auto i = row_index(m, u);
    if (i < 0 || alive_[i].lo > alive_[i].hi) return nullptr;
    lo = std::min(lo, alive_[i].lo);
    hi = std::max(hi, alive_[i].hi);
    return row_values(i);
  }
  [[nodiscard]] int last_boundary(int m) const { return layers_ - (m - 1); }  // successor needs m-1 layers
  [[nodiscard]] bool terminal_allowed(int m, int u, int t) const { return u == t && m == 1; }
  // 2 C after a stage of variant d whose successor ends on GPU u_next.
  [[nodiscard]] const double* transfers(int u_next, std::size_t d) const {
    return (u_next % gpus_ != 0) ? transfer_same_.data() : transfer_cross_[d].data();
  }

  // The same with the compute of variant d's stages up to u_next's
  // boundaries added: prefix + 2 C at each boundary e, infinite where C
  // does not pass this solve's bound.
  [[nodiscard]] const double* entries(int u_next, std::size_t d) const {
    return ((u_next % gpus_ != 0) ? entry_same_.data() : entry_cross_.data()) + d * static_cast<std::size_t>(layers_ + 1);
  }

  // Per row: the layers this solve wrote, [lo, hi] (apart from the
  // values: a sweep reads the ranges of many rows it then does not read).
  struct Alive {
    int lo, hi;
  };

  // Rows x layers of one stage count below which one thread sweeps them all:
  // handing rows to the others and waiting for their last costs more than
  // such a level's few microseconds of work.
  static constexpr std::int64_t kRowsWorthThreads = 5000;
  // What one thread needs and finds while it sweeps rows: its sliding
  // window, and the rows it made live.
  struct alignas(64) Sweeper {  // (apart: each thread writes its own often)
    std::vector<double> through;  // the window's values, by position
    std::vector<double> least;  // the row being swept: its values so far, per layer
    int touched_lo = 0, touched_hi = -1;  // the layers of `least` any variant may have lowered
    std::vector<int> window;
    std::vector<std::size_t> live_rows;
    std::vector<double> before;  // a row's values before an update sweeps it again
    std::int64_t states = 0;
    int live_lo = 0, live_hi = 0;  // GPU counts of its live rows of this m
  };
  // Lowers sweeper.least[0..l_max] by the layouts whose first stage is of
  // variant d (row (m, u)), followed by the live row `next` (-1: none).
  void sweep(int m, int u, std::size_t d, int l_max, std::ptrdiff_t next, Sweeper& sweeper);
  // Per layer l, the last boundary e such that variant d's stage [l, e)
  // computes under `bound`.
  void compute_reach(std::size_t d, double bound, int* reach) const;
  // same_down_to_in_flight() of variant d's windows, given its reach.
  [[nodiscard]] int same_down_to_for(std::size_t d, const int* reach) const;
  // job(first, end, sweeper) over chunks [first, end) of [0, count), at
  // least `min_chunk` long, on every thread of the search, each with its
  // own sweeper: for the rows of one stage count, which read only those of
  // one fewer (the values the same in any order).
  using ChunkJob = std::function<void(std::size_t, std::size_t, Sweeper&)>;
  void share_among_threads(std::size_t count, std::size_t min_chunk, const ChunkJob& job);
  // window_end_ for the rows of m stages.
  void set_window_ends(int m);
  // Rows [lo, hi] of m stages, each with every variant that may end on it.
  void sweep_rows(int m, int lo, int hi, Sweeper& sweeper);
  // Row (m, u), each variant that may end on it. Its values go to a new
  // slot of the table, or, with `slot` (the row's live layers when it
  // was swept last, which its values now lie within), to its own again.
  void sweep_row(int m, int u, Sweeper& sweeper, const Alive* slot = nullptr);
  // The last solve's table brought down to this solve's bound, where only
  // the suffixes' round trips differ (template_search_reuse.cpp).
  void tighten_round_trips();
  // What the reuse of answers and tables needs, made once with the
  // tables (template_search_reuse.cpp).
  void prepare_reuse(std::size_t rows);
  // prefix_gpus_ and covered_ for this solve's bound and GPU limit.
  void cover_prefixes();

  // Among the layouts of a state's least sigma (bit for bit), the one of
  // least suffix period, and of those the one whose runs of neighbouring
  // stages cost least (priced over its first kRunStages stages).
  static constexpr int kRunStages = 8;
  struct Choice {
    double period;  // the layout's suffix period
    double run;     // the costliest run's mean, from its first kRunStages stages or within its rest
    std::size_t variant;  // the first stage's
    int end;              // the first stage's end (layers_: the state's only stage)
    // The first stages' compute and the links after them, one way.
    std::array<double, kRunStages> compute;
    std::array<double, kRunStages> link;
    int stages;  // of those
  };
  [[nodiscard]] Choice least_period_choice(int m, int u, int l) const;
  [[nodiscard]] std::vector<Stage> reconstruct(int m, int u, int nodes) const;

  // The stage kinds: a tensor-parallel degree and a recomputation choice.
  struct Variant {
    int degree;
    Recompute recompute;
  };
  [[nodiscard]] int degree(std::size_t d) const { return variants_[d].degree; }
  [[nodiscard]] int span(int t) const { return t > gpus_ ? t / gpus_ : 1; }
  [[nodiscard]] Recompute recompute(std::size_t d) const { return variants_[d].recompute; }

  int layers_;
  int gpus_;
  int microbatches_;  // M
  std::vector<Variant> variants_;
  int max_gpus_;
  int max_stages_ = 1;
  int widest_ = 1;  // the largest degree
  int gpu_limit_ = 0;    // the GPUs the table spans: the last full solve's limit
  int asked_limit_ = 0;  // the GPUs the last solve was asked for: answers on no more
  double bound_ = std::numeric_limits<double>::infinity();  // the last solve's bound on the steady period
  std::vector<std::vector<double>> prefix_;             // compute prefix sums per variant
  std::vector<double> transfer_same_;               // 2 C at each boundary inside a node
  std::vector<std::vector<double>> transfer_cross_;  // per variant: 2 C at each boundary between nodes
  std::vector<double> entry_same_, entry_cross_;        // per (variant, e): entries(), as of the last full solve
  std::vector<int> hi_memory_;                          // memory limit on the window end
  std::vector<int> settled_from_;  // per (d, l): the first m whose memory limit is the last m's
  int same_down_to_in_flight_ = 1;
  std::vector<int> reach_;                              // this solve's window end on compute per (d, l)
  std::vector<int> window_end_;  // per (d, l), for the stage count being swept: min(reach, its memory limit)
  int window_ends_in_flight_ = 0;  // the in-flight count window_end_ holds this solve's ends for (0: none)
  std::vector<unsigned char> ends_changed_;  // per d: whether the last set_window_ends changed its ends
  std::vector<double> edges_;  // every stage's compute and every transfer one way, sorted, distinct
  // Per row, in an update (tighten_round_trips): whether it changed, and
  // whether a row it reads did; changed_rows_ lists the rows marked.
  static constexpr unsigned char kChanged = 1, kReadsChanged = 2;
  std::vector<unsigned char> changed_;
  std::vector<std::size_t> changed_rows_;
  std::vector<int> degrees_;  // the variants' distinct degrees
  // Per row: on more GPUs than an update was asked for, so left as it was,
  // to be swept again by the first update asked for its GPUs (a full solve
  // sweeps every row anew).
  std::vector<unsigned char> deferred_;
  std::vector<std::size_t> deferred_rows_;
  std::vector<double> row_max_;                         // per row: its largest finite value when last swept
  std::vector<std::size_t> level_rows_;  // per m: where its rows start in live_rows_ (m + 1's: where they end)
  bool solved_ = false;                                 // whether the table holds a solve's values
  std::vector<unsigned char> holds_layer_;  // per d: whether fitting_runs_[d] has any
  std::vector<std::vector<std::pair<int, int>>> fitting_runs_;  // per d: this solve's runs [lo, hi] of l with reach > l, descending
  // Per d: the variants of its degree that recompute less and cost no
  // more on any layer (none for a variant that does not recompute).
  std::vector<std::vector<std::size_t>> cheaper_kinds_;
  // Per d that has cheaper kinds, for the stage count being swept: the runs
  // of fitting_runs_[d] where its window reaches past every cheaper
  // kind's (set_window_ends). Elsewhere each of its stages is one a
  // cheaper kind also offers, at no more compute, with the same links and
  // successors.
  std::vector<std::vector<std::pair<int, int>>> reaching_runs_;
  // Layers taken from the top down, as runs [lo, hi], descending: l joins
  // the last run where it lies just below it.
  static void add_below(std::vector<std::pair<int, int>>& runs, int l) {
    if (!runs.empty() && runs.back().first == l + 1) {
      runs.back().first = l;
    } else {
      runs.emplace_back(l, l);
    }
  }
  // The runs of l that variant d is swept along for the stage count being swept.
  [[nodiscard]] const std::vector<std::pair<int, int>>& swept_runs(std::size_t d) const {
    return cheaper_kinds_[d].empty() ? fitting_runs_[d] : reaching_runs_[d];
  }
  std::vector<std::size_t> fitting_, fitting_start_;    // per u: the variants that fit, fitting_[start[u], start[u+1])
  // Where there are at most 64 variants: per u, those that fit as bits, and
  // those a row may sweep, for this solve (holding a layer) and for the
  // stage count being swept (with runs of l to sweep, set_window_ends). A
  // row then visits only the variants it sweeps, in fitting_'s order,
  // without reading the others' runs (a tenth of a search's time, where
  // recomputation triples the variants).
  bool variant_bits_ = false;
  std::vector<std::uint64_t> fitting_bits_;
  std::uint64_t holding_bits_ = 0, swept_bits_ = 0;
  std::vector<int> prefix_gpus_;  // this solve's fewest GPUs covering layers [0, l) with stages under the bound
  std::vector<int> covered_;      // per GPU count g <= gpu_limit_: the most layers [0, l) so covered on g GPUs
  std::vector<std::size_t> live_rows_;                  // the rows this solve made live
  std::vector<std::size_t> row_base_;    // per m: its first row's index
  std::vector<int> u_lo_, u_hi_;
  // The rows' values. A full solve lays each live row's layers out one
  // after the other, in the order it sweeps them (from kSlotsStart on):
  // the rows a sweep reads lie together, and a search touches only the
  // pages its largest solve fills, not a table of every row's every layer
  // (a page costs a fault once written: 175B to 256 nodes at K = 8 took a
  // tenth of its time faulting in a 53 MiB table). Only the layers in a
  // row's alive_ range are this solve's, and among them a layer no layout
  // reaches is infinite.
  Values value_;
  std::size_t value_size_ = 0;
  std::vector<std::size_t> row_start_;  // per row: its layer 0's place in value_ (where its slot lies, less lo)
  std::atomic<std::size_t> slots_end_{0};  // the slots' end in this full solve (threads take slots at once)
  [[nodiscard]] std::size_t slots_start() const { return static_cast<std::size_t>(layers_) + 1; }  // (> any lo)
  Storage* storage_;  // where value_ goes back to, if anywhere
  std::vector<Alive> alive_;
  // This solve's choices by state: every node count's answer shares them.
  mutable std::unordered_map<std::size_t, Choice> choices_;
  std::vector<Sweeper> sweepers_;       // [0]: the caller's
  std::unique_ptr<RowWorkers> workers_;  // started at the first stage count worth them
  std::int64_t states_ = 0;
  std::int64_t shared_levels_ = 0;
  std::int64_t tightened_solves_ = 0;
  std::int64_t shared_update_levels_ = 0;
};

}  // namespace oobleck::detail
