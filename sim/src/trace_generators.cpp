// The trace generators: fixed-interval losses, Poisson failures with repair,
// and spot-style hourly churn. Each is deterministic for a given seed.
#include "oobleck/sim/trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "oobleck/common/event_lines.h"
#include "trace_shared.h"

namespace oobleck::sim {

namespace {

using namespace trace_internal;

// mt19937_64's sequence is fixed by the standard; the conversions below are
// ours, so a seed gives the same trace everywhere (std::log may differ in the
// last bit between libraries, which rounding to whole milliseconds absorbs).
class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) from the top 53 bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Exponential with the given mean, by inverting the CDF.
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  // Uniform index in [0, n).
  std::size_t index(std::size_t n) {
    return std::min(n - 1, static_cast<std::size_t>(uniform() * static_cast<double>(n)));
  }

 private:
  std::mt19937_64 engine_;
};

Milliseconds whole_ms(double t) { return static_cast<Milliseconds>(std::llround(t)); }

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

// After the other checks, whose messages say more about a mistyped flag.
void require_node_limit(const char* generator, int nodes) {
  require(nodes <= kTraceLimits.present_nodes,
          std::string(generator) + ": nodes must be at most " + std::to_string(kTraceLimits.present_nodes) +
              ", the most a trace may have present at once, got " + std::to_string(nodes));
}

void require_duration(const char* generator, Milliseconds duration_ms) {
  require(duration_ms >= 0 && duration_ms <= kMaxTraceMs,
          std::string(generator) + ": duration_ms must be between 0 and " + format_decimal(kMaxTraceMs) + ", got " +
              format_decimal(duration_ms));
}

void require_event_budget(const char* generator, std::size_t events) {
  if (events <= kMaxGeneratedEvents) return;  // checked per event: build no message here
  throw InputError(std::string(generator) + ": more than " + std::to_string(kMaxGeneratedEvents) +
                   " events; expected fewer nodes, a lower rate or a shorter duration");
}

// The node indices 0..n-1 not yet taken, in order, with the k-th found and
// taken in O(log n): a Fenwick tree over the indices, 1 where one is left.
// (Erasing from a sorted vector took O(n) a removal, O(n^2) a trace.)
class RemainingIndices {
 public:
  explicit RemainingIndices(int n) : tree_(static_cast<std::size_t>(n) + 1, 0), left_(n) {
    for (int i = 1; i <= n; ++i) {
      tree_[static_cast<std::size_t>(i)] += 1;
      if (const int parent = i + (i & -i); parent <= n) {
        tree_[static_cast<std::size_t>(parent)] += tree_[static_cast<std::size_t>(i)];
      }
    }
    while (top_ * 2 <= n) top_ *= 2;
  }
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(left_); }
  // The k-th (from 0) index still left, taken.
  int take(std::size_t k) {
    const int n = static_cast<int>(tree_.size()) - 1;
    int position = 0;  // the last position whose prefix holds at most k indices left
    int wanted = static_cast<int>(k) + 1;
    for (int step = top_; step > 0; step /= 2) {
      if (position + step <= n && tree_[static_cast<std::size_t>(position + step)] < wanted) {
        position += step;
        wanted -= tree_[static_cast<std::size_t>(position)];
      }
    }
    for (int i = position + 1; i <= n; i += i & -i) --tree_[static_cast<std::size_t>(i)];
    --left_;
    return position;  // 1-based position + 1, as an index from 0
  }

 private:
  std::vector<int> tree_;
  int left_;
  int top_ = 1;
};

Trace initial_adds(int nodes) {
  Trace trace;
  trace.events.reserve(static_cast<std::size_t>(nodes));
  for (int i = 0; i < nodes; ++i) trace.events.push_back({0, NodeChange::add, node_name(i)});
  return trace;
}

}  // namespace

Trace fixed_interval_trace(int nodes, Milliseconds interval_ms, int min_nodes, std::uint64_t seed) {
  constexpr const char* kWhat = "fixed-interval trace";
  require(nodes >= 1, std::string(kWhat) + ": nodes must be at least 1, got " + std::to_string(nodes));
  require(min_nodes >= 0 && min_nodes <= nodes, std::string(kWhat) + ": min_nodes must be between 0 and nodes (" +
                                                    std::to_string(nodes) + "), got " + std::to_string(min_nodes));
  const int removals = nodes - min_nodes;
  require(interval_ms > 0 && interval_ms * removals <= kMaxTraceMs,
          std::string(kWhat) + ": interval_ms must be positive (and the trace shorter than " +
              format_decimal(kMaxTraceMs) + " ms), got " + format_decimal(interval_ms));
  require_node_limit(kWhat, nodes);

  Trace trace = initial_adds(nodes);
  trace.events.reserve(trace.events.size() + static_cast<std::size_t>(removals));
  // The victim is the k-th of the nodes left in index order, so the choice
  // depends only on the seed and the nodes left.
  RemainingIndices present(nodes);
  Random random(seed);
  for (int k = 1; k <= removals; ++k) {
    const int victim = present.take(random.index(present.size()));
    trace.events.push_back({whole_ms(interval_ms * k), NodeChange::remove, node_name(victim)});
  }
  return trace;
}

Trace poisson_trace(int nodes, double failures_per_node_hour, Milliseconds mttr_ms, Milliseconds duration_ms,
                    std::uint64_t seed) {
  constexpr const char* kWhat = "poisson trace";
  require(nodes >= 1, std::string(kWhat) + ": nodes must be at least 1, got " + std::to_string(nodes));
  require(failures_per_node_hour >= 0 && std::isfinite(failures_per_node_hour),
          std::string(kWhat) + ": failures_per_node_hour must be a non-negative number, got " +
              format_decimal(failures_per_node_hour));
  require(mttr_ms >= 0 && std::isfinite(mttr_ms),
          std::string(kWhat) + ": mttr_ms must be a non-negative number (0: never repaired), got " +
              format_decimal(mttr_ms));
  require_duration(kWhat, duration_ms);
  require_node_limit(kWhat, nodes);

  // Each node's alternating up/down periods are drawn on their own, then all
  // changes are merged by (time, node, order within the node): equal times
  // stay deterministic and a node's remove always precedes its return.
  struct Change {
    Milliseconds time_ms;
    int node;
    int sequence;
  };
  std::vector<Change> changes;
  Random random(seed);
  if (failures_per_node_hour > 0) {
    const double mean_up_ms = kMsPerHour / failures_per_node_hour;
    // Refuse hopeless sizes before drawing; the check per event catches the
    // rest. Without repair each node fails at most once.
    if (mttr_ms > 0) {
      require_event_budget(kWhat, static_cast<std::size_t>(std::min(
                                      2.0 * kMaxGeneratedEvents, 2.0 * nodes * duration_ms / (mean_up_ms + mttr_ms))));
    }
    for (int node = 0; node < nodes; ++node) {
      double t = 0;  // unrounded, so rounding errors do not accumulate
      for (int sequence = 0;; ++sequence) {
        const bool failing = sequence % 2 == 0;
        if (!failing && mttr_ms == 0) break;
        t += random.exponential(failing ? mean_up_ms : mttr_ms);
        if (!(t <= kMaxTraceMs)) break;
        const Milliseconds at = whole_ms(t);
        if (at > duration_ms) break;
        changes.push_back({at, node, sequence});
        require_event_budget(kWhat, changes.size() + static_cast<std::size_t>(nodes));
      }
    }
  }
  std::sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    if (a.time_ms != b.time_ms) return a.time_ms < b.time_ms;
    if (a.node != b.node) return a.node < b.node;
    return a.sequence < b.sequence;
  });

  Trace trace = initial_adds(nodes);
  trace.events.reserve(trace.events.size() + changes.size());
  for (const Change& c : changes) {
    trace.events.push_back({c.time_ms, c.sequence % 2 == 0 ? NodeChange::remove : NodeChange::add, node_name(c.node)});
  }
  return trace;
}

Trace spot_trace(int nodes, double add_probability, double remove_probability, Milliseconds duration_ms,
                 std::uint64_t seed) {
  constexpr const char* kWhat = "spot trace";
  require(nodes >= 1, std::string(kWhat) + ": nodes must be at least 1, got " + std::to_string(nodes));
  require(add_probability >= 0 && add_probability <= 1,
          std::string(kWhat) + ": add_probability must be between 0 and 1, got " + format_decimal(add_probability));
  require(
      remove_probability >= 0 && remove_probability <= 1,
      std::string(kWhat) + ": remove_probability must be between 0 and 1, got " + format_decimal(remove_probability));
  require_duration(kWhat, duration_ms);
  // One draw per slot and hour: bound the work, not only the events, since
  // tiny probabilities make long traces with few events.
  constexpr double kMaxDraws = 1e9;
  require(std::floor(duration_ms / kMsPerHour) * nodes <= kMaxDraws,
          std::string(kWhat) + ": nodes times hours must be at most 1e9, got " + std::to_string(nodes) +
              " nodes over " + format_decimal(std::floor(duration_ms / kMsPerHour)) + " hours");
  require_node_limit(kWhat, nodes);

  Trace trace = initial_adds(nodes);
  std::vector<char> up(static_cast<std::size_t>(nodes), 1);
  std::vector<int> leaving, returning;
  Random random(seed);
  for (long long hour = 1; static_cast<double>(hour) * kMsPerHour <= duration_ms; ++hour) {
    // One draw per slot per hour, in slot order, against the state at the
    // start of the hour: a node that leaves does not come back in the same hour.
    leaving.clear();
    returning.clear();
    for (int i = 0; i < nodes; ++i) {
      const double u = random.uniform();
      if (up[static_cast<std::size_t>(i)] != 0) {
        if (u < remove_probability) leaving.push_back(i);
      } else if (u < add_probability) {
        returning.push_back(i);
      }
    }
    const Milliseconds at = static_cast<double>(hour) * kMsPerHour;
    for (int i : leaving) {
      up[static_cast<std::size_t>(i)] = 0;
      trace.events.push_back({at, NodeChange::remove, node_name(i)});
    }
    for (int i : returning) {
      up[static_cast<std::size_t>(i)] = 1;
      trace.events.push_back({at, NodeChange::add, node_name(i)});
    }
    require_event_budget(kWhat, trace.events.size());
  }
  return trace;
}

Trace with_stragglers(const Trace& trace, double episodes_per_node_hour, Milliseconds mean_duration_ms,
                      double factor_min, double factor_max, std::uint64_t seed, Milliseconds until_ms) {
  constexpr const char* kWhat = "stragglers";
  require(episodes_per_node_hour >= 0 && std::isfinite(episodes_per_node_hour),
          std::string(kWhat) + ": the rate per node-hour must be a non-negative number, got " +
              format_decimal(episodes_per_node_hour));
  require(mean_duration_ms > 0 && std::isfinite(mean_duration_ms),
          std::string(kWhat) + ": the mean duration must be positive, got " + format_decimal(mean_duration_ms));
  require(factor_min >= kMinSlowFactor && factor_min <= factor_max && factor_max < 1,
          std::string(kWhat) + ": the factors must satisfy 0.01 <= min <= max < 1, got " + format_decimal(factor_min) +
              " and " + format_decimal(factor_max));
  if (episodes_per_node_hour == 0) return trace;
  // Each presence of a node (its add to its remove, or the trace's end)
  // gets its episodes on its own: a renewal process of exponential gaps and
  // durations, whole milliseconds strictly inside the presence.
  struct Slow {
    Milliseconds time_ms;
    std::size_t presence;  // order of the presences, for equal times
    int sequence;
    double factor;
    std::string node;
  };
  std::vector<Slow> slows;
  Random random(seed);
  const double mean_gap_ms = kMsPerHour / episodes_per_node_hour;
  require(until_ms >= 0 && until_ms <= kMaxTraceMs,
          std::string(kWhat) + ": the end must be between 0 and " + format_decimal(kMaxTraceMs) + " ms");
  const Milliseconds end_of_trace = std::max(trace.duration_ms(), until_ms);
  std::map<std::string, Milliseconds> added_at;
  std::size_t presences = 0;
  const auto presence = [&](const std::string& node, Milliseconds from, Milliseconds to) {
    const std::size_t id = presences++;
    double t = from;
    for (int sequence = 0;; sequence += 2) {
      t += random.exponential(mean_gap_ms);
      const Milliseconds start = whole_ms(t);
      if (!(start > from && start < to)) break;
      const double factor =
          std::round((factor_min + (factor_max - factor_min) * random.uniform()) * 100) / 100;
      slows.push_back({start, id, sequence, std::clamp(factor, factor_min, factor_max), node});
      t += random.exponential(mean_duration_ms);
      const Milliseconds end = whole_ms(t);
      if (!(end < to)) break;  // the removal (or the trace's end) ends it
      slows.push_back({std::max(end, start), id, sequence + 1, 1.0, node});
      require_event_budget(kWhat, trace.events.size() + slows.size());
    }
  };
  for (const TraceEvent& e : trace.events) {
    if (e.change == NodeChange::add) {
      added_at[e.node] = e.time_ms;
    } else if (e.change == NodeChange::remove) {
      if (const auto it = added_at.find(e.node); it != added_at.end()) {
        presence(e.node, it->second, e.time_ms);
        added_at.erase(it);
      }
    }
  }
  for (const auto& [node, from] : added_at) presence(node, from, end_of_trace);
  std::sort(slows.begin(), slows.end(), [](const Slow& a, const Slow& b) {
    if (a.time_ms != b.time_ms) return a.time_ms < b.time_ms;
    if (a.presence != b.presence) return a.presence < b.presence;
    return a.sequence < b.sequence;
  });
  // Merged: at one time the trace's own events first (a slow lies strictly
  // inside its node's presence, so the order there does not matter).
  Trace out;
  out.origin = trace.origin;
  out.events.reserve(trace.events.size() + slows.size());
  std::size_t next = 0;
  for (const TraceEvent& e : trace.events) {
    while (next < slows.size() && slows[next].time_ms < e.time_ms) {
      out.events.push_back({slows[next].time_ms, NodeChange::slow, slows[next].node, slows[next].factor});
      ++next;
    }
    out.events.push_back(e);
  }
  for (; next < slows.size(); ++next) {
    out.events.push_back({slows[next].time_ms, NodeChange::slow, slows[next].node, slows[next].factor});
  }
  return out;
}

}  // namespace oobleck::sim
