// The balanced layout that seeds the exact template search (templates.cpp).
#include "balanced_layout.h"

#include <algorithm>
#include <limits>

namespace oobleck::detail {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A stage's place: its degree and first node.
struct Device {
  int degree = 0;
  int node = 0;
};

// Devices of degree t filling nodes [first, first + count), in order; empty
// where t does not fill them.
std::vector<Device> devices_of(int t, int gpus, int first, int count) {
  const int span = t > gpus ? t / gpus : 1;  // nodes a stage takes
  if (count % span != 0) return {};
  const int per_node = t > gpus ? 1 : gpus / t;
  std::vector<Device> out;
  for (int s = 0; s < count / span * per_node; ++s) out.push_back({t, first + s / per_node * span});
  return out;
}

// The layers over `devices` by min-max bisection of the largest stage's
// compute, with a greedy that respects memory; none where nothing fits.
// The greedy sees the limit only through comparisons with stages' compute,
// so once no stage's compute (`splits`' breakpoints) lies between the
// bisection's ends, every limit left gives the layout it has: the
// bisection stops there with the same layout as at its end.
std::optional<std::vector<Stage>> split_layers(const CostModel& cost, const std::vector<Device>& devices, Recompute r,
                                               BalancedSplits& splits) {
  const int layers = cost.layers();
  const int gpus = cost.gpus_per_node();
  const int count = static_cast<int>(devices.size());
  if (count == 0 || count > layers) return std::nullopt;
  if (count == layers) {  // a layer a stage, the only split: what the bisection below ends with, if anything
    std::vector<Stage> stages;
    for (int s = 0; s < count; ++s) {
      const int t = devices[static_cast<std::size_t>(s)].degree;
      if (!cost.stage_fits(s, s + 1, t, std::min(cost.microbatches(), count - s), r)) return std::nullopt;
      stages.push_back({s, s + 1, t, devices[static_cast<std::size_t>(s)].node, r, t > gpus ? t / gpus : 1});
    }
    return stages;
  }
  // Per device, its degree's stages.
  std::vector<const BalancedSplits::Stages*> kinds;
  for (const Device& d : devices) kinds.push_back(&splits.stages(cost, d.degree, r));
  auto greedy = [&](double limit) -> std::optional<std::vector<Stage>> {
    std::vector<Stage> stages;
    int begin = 0;
    for (int s = 0; s < count; ++s) {
      const int t = devices[static_cast<std::size_t>(s)].degree;
      const BalancedSplits::Stages& kind = *kinds[static_cast<std::size_t>(s)];
      const int in_flight = std::min(cost.microbatches(), count - s);
      const int last_end = layers - (count - s - 1);
      const auto holds = [&](int end) {
        return kind.compute_ms(begin, end) <= limit && kind.max_in_flight(begin, end) >= in_flight;
      };
      // The stage's compute and memory only grow with its end, so the ends
      // that hold are those up to the last: galloping, then bisection.
      int end = begin + 1;
      if (!holds(end)) return std::nullopt;
      int fails = last_end + 1;  // the least end known not to hold
      for (int step = 1; end + step < fails; step *= 2) {
        if (!holds(end + step)) {
          fails = end + step;
          break;
        }
        end += step;
      }
      while (fails - end > 1) {
        const int mid = end + (fails - end) / 2;
        (holds(mid) ? end : fails) = mid;
      }
      if (s == count - 1 && end != layers) return std::nullopt;
      stages.push_back({begin, end, t, devices[static_cast<std::size_t>(s)].node, r, t > gpus ? t / gpus : 1});
      begin = end;
    }
    return stages;
  };
  double lo = 0, hi = 0;
  for (const auto* kind : kinds) hi = std::max(hi, kind->compute_ms(0, layers));
  auto found = greedy(hi);
  if (!found) return std::nullopt;
  std::vector<const std::vector<double>*> breakpoints;
  for (const auto* kind : kinds) {
    const auto* b = &kind->breakpoints();
    if (std::find(breakpoints.begin(), breakpoints.end(), b) == breakpoints.end()) breakpoints.push_back(b);
  }
  const auto some_between = [&](double a, double b) {  // a stage's compute in (a, b]
    return std::any_of(breakpoints.begin(), breakpoints.end(), [&](const std::vector<double>* values) {
      const auto it = std::upper_bound(values->begin(), values->end(), a);
      return it != values->end() && *it <= b;
    });
  };
  for (int iteration = 0; iteration < 60 && hi - lo > 1e-9 * hi && some_between(lo, hi); ++iteration) {
    const double mid = lo + (hi - lo) / 2;
    if (auto stages = greedy(mid)) {
      found = std::move(stages);
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return found;
}

// split_layers, taken from `splits` where it was found before.
std::optional<std::vector<Stage>> split_kept(const CostModel& cost, const std::vector<Device>& devices, Recompute r,
                                             BalancedSplits& splits) {
  if (!splits.keeps()) return split_layers(cost, devices, r, splits);
  BalancedSplits::Key key{{}, r, std::min(cost.microbatches(), static_cast<int>(devices.size()))};
  for (const Device& d : devices) key.devices.emplace_back(d.degree, d.node);
  auto [it, fresh] = splits.kept.try_emplace(std::move(key));
  if (fresh) it->second = split_layers(cost, devices, r, splits);
  return it->second;
}

}  // namespace

void BalancedSplits::serve(const CostModel& cost) {
  std::string profile = profile_fingerprint(cost.profile());
  if (profile == profile_) return;
  profile_ = std::move(profile);
  kept.clear();
  stages_.clear();
}

BalancedSplits::Stages::Stages(const CostModel& cost, int degree, Recompute r) {
  const int layers = cost.layers();
  for (int begin = 0; begin < layers; ++begin) {
    row_start_.push_back(compute_.size());
    for (int end = begin + 1; end <= layers; ++end) {
      compute_.push_back(cost.stage_compute_ms(begin, end, degree, r));
      max_in_flight_.push_back(cost.stage_max_in_flight(begin, end, degree, r));
    }
  }
  breakpoints_ = compute_;
  std::sort(breakpoints_.begin(), breakpoints_.end());
  breakpoints_.erase(std::unique(breakpoints_.begin(), breakpoints_.end()), breakpoints_.end());
}

const BalancedSplits::Stages& BalancedSplits::stages(const CostModel& cost, int degree, Recompute r) {
  return stages_.try_emplace({degree, r}, cost, degree, r).first->second;  // (made only where absent)
}

// A balanced layout: j stages of G/j GPUs on every node (or one stage on
// every k nodes, at degree k G), layers split by min-max bisection with a
// greedy that respects memory. Where no one degree fills the nodes with at
// most a stage a layer (an odd node count above the layer count, with
// stages over two nodes), the fewest stages over k nodes that let whole-
// node stages fill the rest, first or last. Not optimal; it seeds the
// exact search with an upper bound whose slowest stage is near the least
// possible, so the walk down the Pareto front can start near its bottom.
std::optional<std::vector<Stage>> balanced_layout(const CostModel& cost, int nodes, BalancedSplits& splits) {
  const int layers = cost.layers();
  const int gpus = cost.gpus_per_node();
  std::optional<std::vector<Stage>> best;
  double best_time = kInfinity;
  // Recomputing where the templates may choose not to costs time for
  // nothing here: the seed recomputes only when every stage must.
  const Recompute r = cost.recompute_choices().front();
  const auto consider = [&](const std::vector<Device>& devices) {
    auto found = split_kept(cost, devices, r, splits);
    if (!found) return;
    const double time = cost.pipeline_ms(*found, cost.microbatches());
    if (time < best_time) {
      best_time = time;
      best = std::move(found);
    }
  };
  for (int t : cost.degrees()) {
    // (More stages than layers split nothing: not even listed.)
    const bool few = t > gpus ? nodes / (t / gpus) <= layers : static_cast<long long>(nodes) * (gpus / t) <= layers;
    if (few) consider(devices_of(t, gpus, 0, nodes));
  }
  if (best) return best;
  for (int wide : cost.degrees()) {
    if (wide <= gpus) continue;
    const int span = wide / gpus;
    // j wide stages and one stage on each other node: j + nodes - j span <= layers.
    for (int j = 1; j * span <= nodes; ++j) {
      if (j + nodes - j * span > layers) continue;
      std::vector<Device> first = devices_of(wide, gpus, 0, j * span), rest = devices_of(gpus, gpus, j * span, nodes - j * span);
      first.insert(first.end(), rest.begin(), rest.end());
      consider(first);
      std::vector<Device> last = devices_of(gpus, gpus, 0, nodes - j * span), tail = devices_of(wide, gpus, nodes - j * span, j * span);
      last.insert(last.end(), tail.begin(), tail.end());
      consider(last);
      break;
    }
  }
  return best;
}

}  // namespace oobleck::detail
