// The template search's dynamic programme: its tables and solves here, the
// sweep of one row in template_sweep.cpp; the walk over its bounds, and
// what it minimises, are in templates.cpp.
//
// A stage is one of the cost model's variants: a degree t, and whether it
// recomputes its activations, selectively or fully (when the cost model's
// policy lets it choose, each variant is a stage kind of its own, with its
// compute and memory). A kind that recomputes costs at least as much as
// one of the same degree that recomputes less (wherever each layer's
// backward says so): for the same stage [l, e) it has the same links and
// the same successors, so it can lower a state's sigma only where memory
// lets its stage reach layers the cheaper kind's cannot. It is swept only
// from those l (set_window_ends), which takes a third of the sweeps where
// every stage may choose (GPT-3 175B to 256 nodes over up to 8 nodes, with
// `--recompute auto`: 4.26 to 2.86 s, the same templates).
//
// The dynamic programme runs over suffixes of the layers: state (m, U, l) is
// "layers [l, L) on the last U GPUs in m stages". m matters through memory
// (the first stage of the suffix keeps min(M, m) microbatches in flight)
// and through the round trip (R / m). A suffix of m stages uses at most
// m times the largest degree's GPUs, which bounds the rows of each m. A
// stage over k nodes starts where a node does (U a multiple of G). For
// fixed (m, U, t) the best successor boundary e of a stage starting at l is
// a sliding-window minimum over e in [l+1, hi(l)], with hi non-decreasing
// in l, so every state costs O(1). Under a bound, a stage kind may hold no
// layer at all (a layer on one GPU of 175B takes longer than the period
// allows), or only some: a kind is swept only along its runs of l where a
// stage holds a layer, and only into rows whose successor row lives. And a
// state whose suffix from l takes u GPUs leaves its prefix [0, l) at most
// the GPU limit less u: where stages under the bound cannot cover [0, l) on
// so few (cover_prefixes), no layout within the limit passes through it, so
// its value matters to no answer and it is not swept.
//
// Many layouts may share the least sigma bit for bit: uniform layers on
// stages of different degrees, permuted, sum the same. The values do not
// tell them apart, but their suffix periods differ, and a walk that took
// them one at a time would step down through each (templates.cpp: GPT-3
// 175B to 256 nodes over up to 4 nodes, 438 solves). So the layout an answer
// returns is, of the least-sigma layouts under the bound, one of least
// suffix period (least_period_choice, a programme over the tied states
// alone), and the walk's next bound passes every tie at once (302 solves).
//
// What one solve leaves to others (answers that hold at a lower M, a
// table the next solve just under its bound updates) is in
// template_search_reuse.cpp.
#include "template_search.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kMaxCells = 2.5e8;  // 2 GiB of doubles

}  // namespace

namespace {

// The value table holds room for every row's every layer (GPT-3 175B to
// 256 nodes at K = 8: 53 MiB), of which a search writes the slots of its
// largest solve's live rows (there 25 MiB), from the start: on huge pages
// where the kernel gives them to those who ask (transparent huge pages in
// `madvise` mode), its first writes fault a page in every 2 MiB, not every
// 4 KiB, and the sweep misses the TLB far less. Elsewhere the advice is
// ignored.
TemplateSearch::Values allocate_values(std::size_t count) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  const std::size_t bytes = (count * sizeof(double) + kHugePage - 1) / kHugePage * kHugePage;
  void* memory = std::aligned_alloc(kHugePage, bytes);
  if (!memory) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(memory, bytes, MADV_HUGEPAGE);
#endif
  return TemplateSearch::Values(static_cast<double*>(memory));
}

}  // namespace

void TemplateSearch::FreeValues::operator()(double* values) const { std::free(values); }

TemplateSearch::TemplateSearch(const CostModel& cost, int max_nodes, Storage* storage)
    : layers_(cost.layers()), gpus_(cost.gpus_per_node()), microbatches_(cost.microbatches()),
      max_gpus_(max_nodes * cost.gpus_per_node()),
      storage_(storage) {
  for (int t : cost.degrees()) {
    for (Recompute r : cost.recompute_choices()) variants_.push_back({t, r});
  }
  widest_ = std::max(gpus_, cost.degrees().back());
  degrees_ = cost.degrees();
  const std::size_t degree_count = variants_.size();
  prefix_.assign(degree_count, std::vector<double>(layers_ + 1, 0.0));
  for (std::size_t d = 0; d < degree_count; ++d) {
    for (int l = 1; l <= layers_; ++l) prefix_[d][l] = cost.stage_compute_ms(0, l, degree(d), recompute(d));
  }
  // Across nodes a boundary's transfers go over the cards of the stage
  // before it, so they depend on that stage's degree.
  transfer_same_.assign(layers_ + 1, 0.0);
  transfer_cross_.assign(degree_count, std::vector<double>(layers_ + 1, 0.0));
  for (int e = 1; e < layers_; ++e) {
    transfer_same_[e] = 2 * cost.transfer_ms(e, true);
    for (std::size_t d = 0; d < degree_count; ++d) transfer_cross_[d][e] = 2 * cost.transfer_ms(e, false, degree(d));
  }
  // Stage counts are exact (the round-trip bound divides a suffix's sum by
  // its count); a suffix of m stages starts with min(M, m) in flight.
  max_stages_ = std::min(layers_, max_gpus_);
  // hi_memory_: per (degree, m, l), the last boundary e such that [l, e)
  // fits with min(M, m) in flight.
  hi_memory_.assign(degree_count * (max_stages_ + 1) * (layers_ + 1), 0);
  for (std::size_t d = 0; d < degree_count; ++d) {
    for (int m = 1; m <= max_stages_; ++m) {
      const int in_flight = std::min(m, cost.microbatches());
      if (m > 1 && in_flight < m) {  // as for m - 1
        for (int l = 0; l < layers_; ++l) hi_memory_[window_index(d, m, l)] = hi_memory_[window_index(d, m - 1, l)];
        continue;
      }
      int e = 0;
      for (int l = 0; l < layers_; ++l) {
        e = std::max(e, l);
        while (e + 1 <= layers_ && cost.stage_max_in_flight(l, e + 1, degree(d), recompute(d)) >= in_flight) ++e;
        hi_memory_[window_index(d, m, l)] = e;  // e == l: not even one layer fits
      }
    }
  }
  reach_.assign(degree_count * (layers_ + 1), 0);
  window_end_.assign(degree_count * (layers_ + 1), 0);
  entry_same_.assign(degree_count * (layers_ + 1), kInfinity);
  entry_cross_.assign(degree_count * (layers_ + 1), kInfinity);
  fitting_runs_.resize(degree_count);
  reaching_runs_.resize(degree_count);
  holds_layer_.assign(degree_count, 0);
  // Recomputing none costs least on every layer; selectively, no more than
  // fully where the attention core's forward is no more than the layer's
  // (a measured profile need not say so). Only a kind that recomputes less
  // counts as cheaper, so that two kinds of equal cost never both give way.
  cheaper_kinds_.assign(degree_count, {});
  for (std::size_t d = 0; d < degree_count; ++d) {
    for (std::size_t p = 0; p < degree_count; ++p) {
      if (degree(p) != degree(d) || recompute(p) >= recompute(d)) continue;
      bool cheaper = true;
      for (int l = 0; l < layers_ && cheaper; ++l) {
        cheaper = cost.layer_backward_ms(l, degree(p), recompute(p)) <= cost.layer_backward_ms(l, degree(d), recompute(d));
      }
      if (cheaper) cheaper_kinds_[d].push_back(p);
    }
  }
  // The variants whose stage may end on GPU u, for every u.
  fitting_start_.assign(static_cast<std::size_t>(max_gpus_) + 2, 0);
  for (int u = 1; u <= max_gpus_; ++u) {
    fitting_start_[u] = fitting_.size();
    for (std::size_t d = 0; d < degree_count; ++d) {
      if (fits_in_node(u, degree(d))) fitting_.push_back(d);
    }
  }
  fitting_start_[max_gpus_ + 1] = fitting_.size();
  variant_bits_ = variants_.size() <= 64;
  if (variant_bits_) {
    fitting_bits_.assign(static_cast<std::size_t>(max_gpus_) + 1, 0);
    for (int u = 1; u <= max_gpus_; ++u) {
      for (std::size_t k = fitting_start_[u]; k < fitting_start_[u + 1]; ++k) {
        fitting_bits_[static_cast<std::size_t>(u)] |= std::uint64_t{1} << fitting_[k];
      }
    }
  }
  // Value rows: for each m, U in [u_lo, u_hi], each with the layers a suffix
  // of m stages may start at, 0 to L - m (a third of L + 1 on the whole:
  // fewer pages to fault in and to sweep through).
  row_base_.assign(max_stages_ + 1, 0);
  u_lo_.assign(max_stages_ + 1, 0);
  u_hi_.assign(max_stages_ + 1, -1);
  std::size_t rows = 0, cells = 0;
  for (int m = 1; m <= max_stages_; ++m) {
    u_lo_[m] = m;
    u_hi_[m] = std::min(widest_ * m, max_gpus_);  // m stages hold at most m of the widest
    row_base_[m] = rows;
    if (u_hi_[m] >= u_lo_[m]) {
      rows += static_cast<std::size_t>(u_hi_[m] - u_lo_[m] + 1);
      cells += static_cast<std::size_t>(u_hi_[m] - u_lo_[m] + 1) * static_cast<std::size_t>(layers_ - m + 1);
    }
  }
  // The exact search needs a table of (stage counts x GPUs x layers).
  if (static_cast<double>(cells) > kMaxCells) {
    throw InputError("exact template search for " + std::to_string(layers_) + " layers on up to " +
                     std::to_string(max_nodes) + " nodes of " + std::to_string(gpus_) + " GPUs needs " +
                     std::to_string(static_cast<long long>(cells * 8 / (1 << 20))) +
                     " MiB; lower --max-nodes or profile coarser layers");
  }
  value_size_ = slots_start() + cells;  // (a full solve gives each row one slot, no longer than its layers)
  if (storage_ && storage_->size >= value_size_) {
    value_ = std::move(storage_->values);
    value_size_ = std::exchange(storage_->size, 0);
  } else {
    value_ = allocate_values(value_size_);
  }
  alive_.assign(rows, Alive{layers_ + 1, -1});
  row_start_.assign(rows, 0);
  prepare_reuse(rows);
  sweepers_.resize(static_cast<std::size_t>(search_threads()));
  for (auto& sweeper : sweepers_) {
    sweeper.through.assign(layers_ + 2, kInfinity);
    sweeper.least.assign(layers_ + 1, kInfinity);
    sweeper.window.assign(layers_ + 2, 0);
  }
}

TemplateSearch::~TemplateSearch() {
  if (storage_ && value_size_ > storage_->size) {
    storage_->values = std::move(value_);
    storage_->size = value_size_;
  }
}

void TemplateSearch::compute_reach(std::size_t d, double bound, int* reach) const {
  const double* prefix = prefix_[d].data();
  int e = 0;
  for (int l = 0; l < layers_; ++l) {
    e = std::max(e, l);
    while (e + 1 <= layers_ && prefix[e + 1] - prefix[l] < bound) ++e;
    reach[l] = e;
  }
}

void TemplateSearch::share_among_threads(std::size_t count, std::size_t min_chunk, const ChunkJob& job) {
  if (!workers_) workers_ = std::make_unique<RowWorkers>(static_cast<int>(sweepers_.size()));
  ++shared_levels_;
  const std::size_t chunk = std::max(min_chunk, count / (4 * sweepers_.size()));
  std::atomic<std::size_t> next{0};
  workers_->run([&](int i) {
    Sweeper& sweeper = sweepers_[static_cast<std::size_t>(i)];
    for (std::size_t first = next.fetch_add(chunk); first < count; first = next.fetch_add(chunk)) {
      job(first, std::min(count, first + chunk), sweeper);
    }
  });
}

// Least sigma for every state whose steady period is strictly below
// `bound` (every stage's compute, every transfer one way, and every
// suffix's sum over its stage count), on at most `gpu_limit` GPUs.
void TemplateSearch::solve(double bound, int gpu_limit) {
  window_ends_in_flight_ = 0;  // (the reach changes with the bound)
  const int limit = std::min(gpu_limit, max_gpus_);
  const double last_bound = bound_;
  const int last_limit = gpu_limit_;
  // Just below the last solve's bound, on no more GPUs, where no stage's
  // compute and no transfer lies between the two bounds: only the suffixes'
  // round trips tighten, and the table is updated where they do. It stays
  // a table on the last limit's GPUs (no count's answer depends on the
  // limit), so that a solve after it on more GPUs than this one, but no
  // more than that, updates it too.
  const bool lower_alike =
      solved_ && bound < last_bound && limit <= last_limit && last_change_below(last_bound) < bound;
  gpu_limit_ = lower_alike ? last_limit : limit;
  asked_limit_ = limit;
  bound_ = bound;
  choices_.clear();
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    int* reach = reach_.data() + d * static_cast<std::size_t>(layers_ + 1);
    compute_reach(d, bound, reach);
    // Its runs of l where a stage holds a layer, from the top.
    auto& runs = fitting_runs_[d];
    runs.clear();
    for (int l = layers_ - 1; l >= 0; --l) {
      if (reach[l] > l) add_below(runs, l);
    }
  }
  holding_bits_ = 0;
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    holds_layer_[d] = !fitting_runs_[d].empty();
    if (variant_bits_ && holds_layer_[d]) holding_bits_ |= std::uint64_t{1} << d;
  }
  same_down_to_in_flight_ = 1;
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    same_down_to_in_flight_ = std::max(same_down_to_in_flight_,
                                       same_down_to_for(d, reach_.data() + d * static_cast<std::size_t>(layers_ + 1)));
  }
  cover_prefixes();
  solved_ = true;
  if (lower_alike) {
    ++tightened_solves_;
    tighten_round_trips();
    return;
  }
  // Per variant and boundary: the stage's compute up to it plus the
  // transfer after it, where the transfer passes the bound (an update
  // passes no link, so keeps them).
  const double transfer_limit = 2 * bound;
  for (std::size_t d = 0; d < variants_.size(); ++d) {
    double* same = entry_same_.data() + d * static_cast<std::size_t>(layers_ + 1);
    double* cross = entry_cross_.data() + d * static_cast<std::size_t>(layers_ + 1);
    for (int e = 0; e <= layers_; ++e) {
      same[e] = transfer_same_[e] < transfer_limit ? prefix_[d][e] + transfer_same_[e] : kInfinity;
      cross[e] = transfer_cross_[d][e] < transfer_limit ? prefix_[d][e] + transfer_cross_[d][e] : kInfinity;
    }
  }
  for (const std::size_t r : deferred_rows_) deferred_[r] = 0;
  deferred_rows_.clear();
  // The rows made live last time become empty again (their values are
  // not read outside the live layers).
  for (const std::size_t r : live_rows_) {
    alive_[r].lo = layers_ + 1;
    alive_[r].hi = -1;
  }
  live_rows_.clear();
  slots_end_.store(slots_start(), std::memory_order_relaxed);
  // Rows of m stages depend on rows of m - 1 alone, and only on those
  // that hold some finite value: a row of m stages on u GPUs can be live
  // only if u lies a degree above a live row of m - 1 (or, for m = 1, u
  // is a degree).
  int live_lo = 0, live_hi = 0;  // the live rows of m - 1: GPU counts [lo, hi]
  int m_end = 1;  // the first stage count not swept
  for (int m = 1; m <= max_stages_; ++m) {
    m_end = m + 1;
    const int lo = std::max(u_lo_[m], m == 1 ? 1 : live_lo + 1);
    const int hi = std::min({u_hi_[m], gpu_limit_, m == 1 ? widest_ : live_hi + widest_});
    set_window_ends(m);
    for (auto& sweeper : sweepers_) {
      sweeper.live_lo = gpu_limit_ + 1;
      sweeper.live_hi = 0;
    }
    // Rows of one m are independent: where there are enough of them, the
    // threads take them in chunks (the values are the same either way).
    const std::int64_t work = static_cast<std::int64_t>(std::max(0, hi - lo + 1)) * (layers_ - m + 1);
    if (sweepers_.size() > 1 && work >= kRowsWorthThreads) {
      share_among_threads(static_cast<std::size_t>(hi - lo + 1), 4,
                          [&](std::size_t first, std::size_t end, Sweeper& sweeper) {
                            sweep_rows(m, lo + static_cast<int>(first), lo + static_cast<int>(end) - 1, sweeper);
                          });
    } else {
      sweep_rows(m, lo, hi, sweepers_.front());
    }
    int next_lo = gpu_limit_ + 1, next_hi = 0;
    level_rows_[m] = live_rows_.size();
    for (auto& sweeper : sweepers_) {
      next_lo = std::min(next_lo, sweeper.live_lo);
      next_hi = std::max(next_hi, sweeper.live_hi);
      live_rows_.insert(live_rows_.end(), sweeper.live_rows.begin(), sweeper.live_rows.end());
      sweeper.live_rows.clear();
      states_ += sweeper.states;
      sweeper.states = 0;
    }
    if (next_hi == 0) break;  // no row of m stages lives, so none of more
    live_lo = next_lo;
    live_hi = next_hi;
  }
  std::fill(level_rows_.begin() + std::min(m_end, max_stages_ + 1), level_rows_.end(), live_rows_.size());
}

// The fewest GPUs on which stages under the bound, each holding one
// microbatch in flight, cover layers [0, l): node boundaries, transfers and
// the suffixes' round trips set aside, a lower bound on the GPUs of any
// layout's prefix [0, l). It grows with l (a cover of more layers, cut at l,
// covers [0, l)), so for each variant the longest last stage ending at l is
// the one to take: its start rises with l.
void TemplateSearch::cover_prefixes() {
  constexpr int kNever = std::numeric_limits<int>::max() / 2;
  prefix_gpus_.assign(static_cast<std::size_t>(layers_ + 1), kNever);
  prefix_gpus_[0] = 0;
  std::vector<int> start(variants_.size(), 0);  // per variant: the first start of a stage that holds [start, l)
  for (int l = 1; l <= layers_; ++l) {
    for (std::size_t d = 0; d < variants_.size(); ++d) {
      const int* reach = reach_.data() + d * static_cast<std::size_t>(layers_ + 1);
      const int* memory = hi_memory_.data() + window_index(d, 1, 0);
      int& a = start[d];
      while (a < l && (reach[a] < l || memory[a] < l)) ++a;
      if (a < l) prefix_gpus_[l] = std::min(prefix_gpus_[l], prefix_gpus_[a] + degree(d));
    }
  }
  covered_.assign(static_cast<std::size_t>(gpu_limit_ + 1), 0);
  int l = 0;
  for (int g = 0; g <= gpu_limit_; ++g) {
    while (l < layers_ && prefix_gpus_[l + 1] <= g) ++l;
    covered_[g] = l;
  }
}

}  // namespace oobleck::detail
