// Sums without Gloo's ring. A small tensor's sum among Gloo ranks
// (Communicator::allreduce_sum_small: gathered to rank 0, added up in rank
// order, sent back) against Gloo's all-reduce: the same sum on every rank,
// bit for bit where every addition is exact in any order, as with these
// values. Two ranks' all-reduce, an exchange: each rank's sum is the one
// addition of the two, bit for bit, several in flight at once. Point-to-point
// messages of other tags in flight across either arrive as sent. Sets of
// ranks of a larger group summing over its connections (SubgroupOverGroup):
// the same bits on every member, several sets at once.
#include "torch_doctest.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/subgroup_over_group.h"
#include "loopback_store.h"

using oobleck::executor::make_gloo_communicator;

namespace {

constexpr int kRanks = 4, kRounds = 5, kValues = 13;

// Multiples of 1/8 below 64: any sum of a few is exact in float64.
torch::Tensor values(int rank, int round) {
  auto t = torch::empty({kValues}, torch::kFloat64);
  for (int i = 0; i < kValues; ++i) t[i] = ((rank * 37 + i * 11 + round * 5) % 97 - 48) / 8.0;
  return t;
}

}  // namespace

TEST_CASE("gloo: a small tensor's sum gathered to rank 0 is the all-reduce's on every rank, bit for bit") {
  const oobleck::test::LoopbackStore stores;
  struct Got {
    std::vector<torch::Tensor> small, ring, passed;
  };
  std::vector<Got> got(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto group = make_gloo_communicator(stores.client(), "sums", r, kRanks, "127.0.0.1", std::chrono::seconds(60));
      Got& mine = got[static_cast<std::size_t>(r)];
      for (int round = 0; round < kRounds; ++round) {
        torch::Tensor small = values(r, round), ring = values(r, round);
        // A message of another tag to the next rank, across the small sum.
        const auto sent = group->send(torch::full({3}, 100.0 * r + round, torch::kFloat64), (r + 1) % kRanks, 5);
        group->allreduce_sum_small(small);
        torch::Tensor passed = torch::empty({3}, torch::kFloat64);
        group->recv(passed, (r + kRanks - 1) % kRanks, 5);
        sent->wait();
        group->allreduce_sum(ring);
        mine.small.push_back(small);
        mine.ring.push_back(ring);
        mine.passed.push_back(passed);
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    torch::Tensor expected = torch::zeros({kValues}, torch::kFloat64);
    for (int r = 0; r < kRanks; ++r) expected += values(r, round);
    for (int r = 0; r < kRanks; ++r) {
      CAPTURE(r);
      const Got& g = got[static_cast<std::size_t>(r)];
      CHECK(torch::equal(g.small[static_cast<std::size_t>(round)], expected));
      CHECK(torch::equal(g.small[static_cast<std::size_t>(round)], g.ring[static_cast<std::size_t>(round)]));
      const int from = (r + kRanks - 1) % kRanks;
      CHECK(torch::equal(g.passed[static_cast<std::size_t>(round)],
                         torch::full({3}, 100.0 * from + round, torch::kFloat64)));
    }
  }
}

TEST_CASE("gloo: two ranks' all-reduces exchange their tensors and add them, bit for bit, several in flight") {
  const oobleck::test::LoopbackStore stores;
  constexpr int kInFlight = 3;
  // Per rank and round: each tensor's sum, and the message passed beside them.
  std::vector<std::vector<torch::Tensor>> sums(2), passed(2);
  const auto inputs = [](int rank, int round, int k) {
    return torch::randn({1 + 97 * k}, torch::TensorOptions().dtype(k == 1 ? torch::kFloat64 : torch::kFloat32))
        .mul_(1 + rank + round);
  };
  std::vector<std::vector<torch::Tensor>> given(2);
  torch::manual_seed(3);
  for (int r = 0; r < 2; ++r) {
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kInFlight; ++k) given[static_cast<std::size_t>(r)].push_back(inputs(r, round, k));
    }
  }
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto group = make_gloo_communicator(stores.client(), "pair", r, 2, "127.0.0.1", std::chrono::seconds(60));
      for (int round = 0; round < kRounds; ++round) {
        const auto sent = group->send(torch::full({2}, 10.0 * r + round, torch::kFloat64), 1 - r, 4);
        std::vector<torch::Tensor> tensors;
        std::vector<std::unique_ptr<oobleck::executor::PendingOp>> ops;
        for (int k = 0; k < kInFlight; ++k) {
          tensors.push_back(given[static_cast<std::size_t>(r)][static_cast<std::size_t>(round * kInFlight + k)].clone());
          ops.push_back(group->start_allreduce_sum(tensors.back()));
        }
        torch::Tensor message = torch::empty({2}, torch::kFloat64);
        group->recv(message, 1 - r, 4);
        for (auto& op : ops) op->wait();
        sent->wait();
        for (auto& t : tensors) sums[static_cast<std::size_t>(r)].push_back(t);
        passed[static_cast<std::size_t>(r)].push_back(message);
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (std::size_t i = 0; i < sums[0].size(); ++i) {
    CAPTURE(i);
    const torch::Tensor expected = given[0][i] + given[1][i];
    CHECK(torch::equal(sums[0][i], expected));
    CHECK(torch::equal(sums[1][i], expected));
  }
  for (int r = 0; r < 2; ++r) {
    for (int round = 0; round < kRounds; ++round) {
      CHECK(torch::equal(passed[static_cast<std::size_t>(r)][static_cast<std::size_t>(round)],
                         torch::full({2}, 10.0 * (1 - r) + round, torch::kFloat64)));
    }
  }
}

TEST_CASE("subgroups over a larger group: pairs exchange, small sets gather, large ones ring; bit for bit") {
  // Four ranks of one Gloo group; sets of two, three and four sum over it,
  // two of them sharing two members, with every set's sums in flight at
  // once beside the group's own messages. Each set sums a small tensor
  // (gathered to its first member, or exchanged), one above kGatherBytes
  // (a ring, or exchanged) of values whose sums are exact in any order, and
  // one of random floats, whose total must be the same bits on every member.
  const oobleck::test::LoopbackStore stores;
  using oobleck::executor::SubgroupOverGroup;
  const std::set<std::vector<int>> sets = {{0, 2}, {1, 3}, {0, 1, 2}, {1, 2, 3}, {0, 1, 2, 3}};
  constexpr int kSumRounds = 3, kKinds = 3;
  const std::int64_t large = SubgroupOverGroup::kGatherBytes / 8 + 4099;
  const auto exact = [](int rank, int set, int round, std::int64_t n) {
    return torch::arange(n, torch::kFloat64).mul_(7 + rank + set).add_(round * 3).remainder_(97).sub_(48).div_(8);
  };
  torch::manual_seed(11);
  std::map<std::tuple<int, int, int, int>, torch::Tensor> given, summed;  // (rank, set, round, kind)
  for (int r = 0; r < kRanks; ++r) {
    for (int set = 0; set < static_cast<int>(sets.size()); ++set) {
      for (int round = 0; round < kSumRounds; ++round) {
        given[{r, set, round, 0}] = exact(r, set, round, kValues);
        given[{r, set, round, 1}] = exact(r, set, round, large);
        given[{r, set, round, 2}] = torch::randn({large / 2 + 17}, torch::kFloat32);
      }
    }
  }
  std::mutex mutex;
  std::vector<torch::Tensor> passed(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto world = make_gloo_communicator(stores.client(), "world", r, kRanks, "127.0.0.1", std::chrono::seconds(60));
      std::vector<std::pair<int, std::unique_ptr<SubgroupOverGroup>>> mine;
      int index = 0;
      for (const auto& set : sets) {
        const auto it = std::find(set.begin(), set.end(), r);
        if (it != set.end()) {
          mine.emplace_back(index, std::make_unique<SubgroupOverGroup>(*world, set, static_cast<int>(it - set.begin()),
                                                                        index));
        }
        ++index;
      }
      const auto sent = world->send(torch::full({3}, 7.0 * r, torch::kFloat64), (r + 1) % kRanks, 6);
      for (int round = 0; round < kSumRounds; ++round) {
        std::vector<std::pair<std::tuple<int, int, int, int>, torch::Tensor>> tensors;
        std::vector<std::unique_ptr<oobleck::executor::PendingOp>> ops;
        for (auto& [set, group] : mine) {
          for (int kind = 0; kind < kKinds; ++kind) {
            tensors.emplace_back(std::tuple{r, set, round, kind}, given.at({r, set, round, kind}).clone());
            ops.push_back(group->start_allreduce_sum(tensors.back().second));
          }
        }
        for (auto& op : ops) op->wait();
        const std::lock_guard lock(mutex);
        for (auto& [key, t] : tensors) summed[key] = t;
      }
      torch::Tensor message = torch::empty({3}, torch::kFloat64);
      world->recv(message, (r + kRanks - 1) % kRanks, 6);
      sent->wait();
      passed[static_cast<std::size_t>(r)] = message;
    });
  }
  for (auto& t : ranks) t.join();
  int index = 0;
  for (const auto& set : sets) {
    CAPTURE(index);
    for (int round = 0; round < kSumRounds; ++round) {
      CAPTURE(round);
      for (int kind = 0; kind < kKinds; ++kind) {
        CAPTURE(kind);
        torch::Tensor expected = torch::zeros_like(given.at({set[0], index, round, kind}));
        for (int member : set) expected += given.at({member, index, round, kind});
        const torch::Tensor& first = summed.at({set[0], index, round, kind});
        for (int member : set) {
          CAPTURE(member);
          const torch::Tensor& got = summed.at({member, index, round, kind});
          CHECK(torch::equal(got, first));  // the same bits on every member
          if (kind < 2 || set.size() == 2) {
            CHECK(torch::equal(got, expected));
          } else {
            CHECK(torch::allclose(got, expected, 1e-5, 1e-5));
          }
        }
      }
    }
    ++index;
  }
  for (int r = 0; r < kRanks; ++r) {
    CHECK(torch::equal(passed[static_cast<std::size_t>(r)],
                       torch::full({3}, 7.0 * ((r + kRanks - 1) % kRanks), torch::kFloat64)));
  }
}
