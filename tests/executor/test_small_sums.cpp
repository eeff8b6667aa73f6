// A small tensor's sum among Gloo ranks (Communicator::allreduce_sum_small:
// gathered to rank 0, added up in rank order, sent back) against Gloo's
// all-reduce: the same sum on every rank, bit for bit where every addition
// is exact in any order, as with these values; and point-to-point messages
// of other tags in flight across it arrive as sent.
#include "torch_doctest.h"

#include <thread>
#include <vector>

#include "comm/communicator.h"
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
