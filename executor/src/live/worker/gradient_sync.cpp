#include "gradient_sync.h"

#include <algorithm>
#include <map>

#include "oobleck/executor/gpt.h"

namespace oobleck::executor {
namespace {

// Whether every stage holding the layer holds it at one degree. Then shard s
// of each stage computed, from the same inputs, the same replicated
// gradients as its shard 0: each shard index sums its own over the stages
// (p.holders[s], as Megatron's data-parallel groups) and no copy travels.
// Otherwise shard 0 of each stage gives its gradient and the other shards
// zeros, summed over everyone.
bool one_degree(const std::vector<recovery::WorkerSeat>& seats, const recovery::LayerPieces& p) {
  return std::all_of(p.everyone.begin(), p.everyone.end(),
                     [&](int r) { return seats[static_cast<std::size_t>(r)].degree == p.count; });
}

// The groups the tied weight's gradient is summed over (holders of either
// end): one per shard index where both ends are held at one degree, else a
// single group of everyone.
std::vector<std::vector<int>> tied_groups(const std::vector<recovery::WorkerSeat>& seats, const ModelConfig& model) {
  const int last_layer = model.layers + 1;
  if (!ties_embedding(model)) return {{}};
  const auto first = recovery::layer_pieces(seats, 0), last = recovery::layer_pieces(seats, last_layer);
  const bool per_shard = one_degree(seats, first) && one_degree(seats, last) && first.count == last.count;
  std::vector<std::vector<int>> out(per_shard ? static_cast<std::size_t>(first.count) : 1);
  for (std::size_t s = 0; s < out.size(); ++s) {
    for (const auto* p : {&first, &last}) {
      const auto& add = per_shard ? p->holders[s] : p->everyone;
      out[s].insert(out[s].end(), add.begin(), add.end());
    }
    std::sort(out[s].begin(), out[s].end());
    out[s].erase(std::unique(out[s].begin(), out[s].end()), out[s].end());
  }
  return out;
}

}  // namespace

GradientPlan plan_gradients(const std::vector<recovery::WorkerSeat>& seats, int rank,
                            const std::vector<GradientSlot>& slots, const ModelConfig& model) {
  const recovery::WorkerSeat& me = seats.at(static_cast<std::size_t>(rank));
  const int last_layer = model.layers + 1;
  GradientPlan plan;
  std::map<int, recovery::LayerPieces> pieces;
  for (int l = me.layer_begin; l < me.layer_end; ++l) pieces.emplace(l, recovery::layer_pieces(seats, l));
  const auto tied = tied_groups(seats, model);
  const bool tied_per_shard = tied.size() > 1;  // a holder of either end then has the ends' degree
  if (me.holds(0) || me.holds(last_layer)) {
    plan.tied_holders = tied_per_shard ? tied.at(static_cast<std::size_t>(me.shard)) : tied.front();
  }
  plan.tied_counted = !tied.front().empty() && tied.front().front() == rank;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const GradientSlot& s = slots[i];
    if (s.label == kTied) {
      if (!tied_per_shard && me.shard != 0) plan.copies.push_back(i);
      continue;
    }
    const recovery::LayerPieces& p = pieces.at(s.label);
    const SplitLayout layout = split_layout(model, s.label, s.name);
    if (!layout.split()) {
      const bool counted = p.everyone.front() == rank;
      if (one_degree(seats, p)) {
        plan.parts.push_back({i, {}, p.holders[static_cast<std::size_t>(me.shard)], counted});
      } else {
        if (me.shard != 0) plan.copies.push_back(i);
        plan.parts.push_back({i, {}, p.everyone, counted});
      }
      continue;
    }
    const int mine = p.count / me.degree;  // pieces in this shard
    const int first = me.shard * mine;
    if (mine == 1) {
      const auto& holders = p.holders[static_cast<std::size_t>(first)];
      plan.parts.push_back({i, {}, holders, holders.front() == rank});
      continue;
    }
    auto view = layout.view;
    const auto cut = static_cast<std::size_t>(layout.dim);
    view[cut] /= me.degree;
    const std::int64_t length = view[cut] / mine;
    for (int k = 0; k < mine; ++k) {
      const auto& holders = p.holders[static_cast<std::size_t>(first + k)];
      plan.parts.push_back({i, {view, layout.dim, k * length, length}, holders, holders.front() == rank});
    }
  }
  return plan;
}

std::set<std::vector<int>> gradient_groups(const std::vector<recovery::WorkerSeat>& seats, const ModelConfig& model) {
  const int last_layer = model.layers + 1;
  std::set<std::vector<int>> out;
  for (int l = 0; l <= last_layer; ++l) {
    const recovery::LayerPieces p = recovery::layer_pieces(seats, l);
    out.insert(p.holders.begin(), p.holders.end());
    if (!one_degree(seats, p)) out.insert(p.everyone);
  }
  for (auto& group : tied_groups(seats, model)) {
    if (!group.empty()) out.insert(std::move(group));
  }
  return out;
}

void synchronise_gradients(std::vector<GradientSlot>& slots, const GradientPlan& plan, GenerationGroups& groups,
                           int last_layer, double clip_norm) {
  torch::NoGradGuard no_grad;
  settle_sums(slots);
  // The sums are only read here: a step interrupted after its passes keeps
  // them for the next generation (kept_sums in pipeline_step.h). A copy
  // gives zeros; the totals go straight into the gradients.
  std::vector<bool> copy(slots.size(), false);
  for (std::size_t i : plan.copies) copy[i] = true;
  const auto given = [&](std::size_t i, const torch::Tensor& region) {
    return copy[i] ? torch::zeros_like(region) : region;
  };
  torch::Tensor tied;  // this worker's part of the tied weight's gradient (both copies it holds)
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].label != kTied) continue;
    const torch::Tensor part = given(i, slots[i].sum);
    tied = tied.defined() ? tied + part : part.clone();
  }
  struct Summed {
    std::vector<torch::Tensor> given;        // by part, in the order below
    std::vector<const GradientPart*> parts;  // nullptr: the tied weight
    torch::Tensor flat;                      // the parts' total, once reduced (summed over two or more)
    std::unique_ptr<PendingOp> op;
  };
  std::map<std::vector<int>, Summed> by_set;
  for (const auto& part : plan.parts) {
    Summed& s = by_set[part.holders];
    s.given.push_back(given(part.slot, part.region.of(slots[part.slot].sum)));
    s.parts.push_back(&part);
  }
  if (tied.defined()) {
    Summed& s = by_set[plan.tied_holders];
    s.given.push_back(tied);
    s.parts.push_back(nullptr);
  }
  // Every set's sum started, then waited for in set order, the same on
  // every trainer (subgroups over the world run their steps as they are
  // waited for: comm/subgroup_over_group.h).
  for (auto& [set, s] : by_set) {
    if (set.size() < 2) continue;  // (its own sums are the totals)
    std::vector<torch::Tensor> flat_views;
    for (auto& t : s.given) flat_views.push_back(t.reshape({-1}));
    s.flat = torch::cat(flat_views);
    s.op = groups.gradient_group(set).start_allreduce_sum(s.flat);
  }
  for (auto& [set, s] : by_set) {
    if (s.op) s.op->wait();
  }
  // The totals, rounded once, become the parameters' gradients; every copy
  // of the tied weight gets the whole tied total.
  std::vector<torch::Tensor> grads(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) grads[i] = torch::empty_like(slots[i].parameter);
  for (auto& [set, s] : by_set) {
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < s.parts.size(); ++k) {
      const torch::Tensor& shape = s.given[k];
      const torch::Tensor total =
          s.flat.defined() ? s.flat.narrow(0, offset, shape.numel()).view(shape.sizes()) : s.given[k];
      offset += shape.numel();
      if (s.parts[k] == nullptr) {
        for (std::size_t i = 0; i < slots.size(); ++i) {
          if (slots[i].label == kTied) grads[i].copy_(total);
        }
      } else {
        s.parts[k]->region.of(grads[s.parts[k]->slot]).copy_(total);
      }
    }
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].parameter.mutable_grad() = grads[i];
  // Squared norms by label (index label + 1: the tied weight first).
  std::vector<double> norms(static_cast<std::size_t>(last_layer) + 2, 0.0);
  std::vector<std::size_t> labels;
  std::vector<torch::Tensor> counted;
  for (const auto& part : plan.parts) {
    if (!part.counted) continue;
    const GradientSlot& s = slots[part.slot];
    labels.push_back(static_cast<std::size_t>(s.label + 1));
    counted.push_back(part.region.of(s.parameter.grad()));
  }
  if (plan.tied_counted) {
    const auto first = std::find_if(slots.begin(), slots.end(), [](const auto& s) { return s.label == kTied; });
    if (first != slots.end()) {
      labels.push_back(0);
      counted.push_back(first->parameter.grad());
    }
  }
  // Added on the host in the order above.
  const std::vector<double> squares = squared_norms(counted);
  for (std::size_t i = 0; i < labels.size(); ++i) norms[labels[i]] += squares[i];
  // An owning tensor: an abandoned all-reduce may still write into it.
  auto reduced = torch::tensor(norms, torch::kFloat64);
  groups.trainers().allreduce_sum_small(reduced);
  const auto total = reduced.accessor<double, 1>();
  for (std::size_t i = 0; i < norms.size(); ++i) norms[i] = total[static_cast<std::int64_t>(i)];
  clip_by_global_norm(slots, norms, clip_norm);
}

}  // namespace oobleck::executor
