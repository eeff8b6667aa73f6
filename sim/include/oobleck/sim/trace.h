// Failure traces: what nodes the cluster has over time. Read from the CSV of
// DESIGN.md (`time_ms,add|remove,node_name`, and `time_ms,slow,node,factor`
// for stragglers; LF or CRLF), or from a count series (`date, time,
// instance_count`), or generated from a failure model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oobleck/common.h"

namespace oobleck::sim {

// slow: a present node computes at `factor` of its speed from then on (a
// straggler; 1 ends it, and so does its removal).
enum class NodeChange { add, remove, slow };

struct TraceEvent {
  Milliseconds time_ms = 0;
  NodeChange change = NodeChange::add;
  std::string node;
  double factor = 1;  // slow
  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

// Events sorted by time (stable: file order within one time). Every add names
// a node not present at that point, and every remove and slow one that is.
struct Trace {
  std::string origin;
  std::vector<TraceEvent> events;
  [[nodiscard]] Milliseconds duration_ms() const { return events.empty() ? 0 : events.back().time_ms; }
  // Most nodes present at any moment.
  [[nodiscard]] int peak_nodes() const;
  // Whether any event slows a node down (a factor below 1).
  [[nodiscard]] bool has_stragglers() const;
};

// How large a trace may be. Beyond these a trace is refused (InputError
// naming the file and line, or the generator's parameters) rather than left
// to exhaust memory or time: a replay costs O(events log nodes) besides the
// policies' planning, and its memory grows with the events.
struct TraceLimits {
  std::size_t events = 10'000'000;
  int present_nodes = 1'000'000;  // at any one time; a count series' instance_count
  std::uintmax_t file_bytes = std::uintmax_t{512} << 20;
};
inline constexpr TraceLimits kTraceLimits{};

// The event CSV: `time_ms,add|remove,node` and `time_ms,slow,node,factor`
// (factor in [0.01, 1]). Throws InputError naming origin:line and what was
// expected.
[[nodiscard]] Trace parse_trace(std::string_view text, const std::string& origin, const TraceLimits& limits = {});
// A count series (`YYYY-MM-DD, HH:MM:SS, count` per line): each change of the
// count becomes adds (new names) or removes (most recently added first).
[[nodiscard]] Trace parse_count_series(std::string_view text, const std::string& origin,
                                       const TraceLimits& limits = {});
// By content: a count series when the first line has three comma-separated
// fields and the first looks like a date, the event CSV otherwise.
[[nodiscard]] Trace load_trace(const std::string& path, const TraceLimits& limits = {});

[[nodiscard]] std::string trace_to_csv(const Trace& trace);

// ---------------------------------------------------------------- generators
// All deterministic for a given seed, on every platform (no std::
// distributions, whose output the standard leaves to each library).

// `nodes` nodes at time 0, then one removed every `interval_ms` until
// `min_nodes` remain (the Oobleck artifact's synthetic traces).
[[nodiscard]] Trace fixed_interval_trace(int nodes, Milliseconds interval_ms, int min_nodes, std::uint64_t seed);

// Each present node fails after an exponential time with rate
// `failures_per_node_hour` and comes back after an exponential repair time
// with mean `mttr_ms` (never, when mttr_ms is 0), over `duration_ms`.
[[nodiscard]] Trace poisson_trace(int nodes, double failures_per_node_hour, Milliseconds mttr_ms,
                                  Milliseconds duration_ms, std::uint64_t seed);

// Llama 3 405B pre-training: 419 unexpected interruptions in 54 days on
// 16,384 H100 GPUs. Per GPU-hour; multiply by GPUs per node.
inline constexpr double kLlama3FailuresPerGpuHour = 419.0 / (54.0 * 24.0 * 16384.0);

// Stragglers added to `trace`: while a node is present, slowdowns come as a
// Poisson process of `episodes_per_node_hour`, each lasting an exponential
// time of mean `mean_duration_ms` (cut short by the node's removal), at a
// factor drawn uniformly from [factor_min, factor_max] (to 0.01), one at a
// time per node, until `until_ms` (at least the trace's last event). The
// trace's own events keep their order.
[[nodiscard]] Trace with_stragglers(const Trace& trace, double episodes_per_node_hour, Milliseconds mean_duration_ms,
                                    double factor_min, double factor_max, std::uint64_t seed,
                                    Milliseconds until_ms = 0);

// Spot-style: `nodes` slots; at every hour boundary each present node is
// removed with probability `remove_probability` and each absent slot comes
// back with `add_probability`; all slots present at time 0.
[[nodiscard]] Trace spot_trace(int nodes, double add_probability, double remove_probability,
                               Milliseconds duration_ms, std::uint64_t seed);

// Durations on the command line: a number with a unit, ms s m h d ("90m", "54d").
[[nodiscard]] Milliseconds parse_duration(std::string_view text, const std::string& what);

}  // namespace oobleck::sim
