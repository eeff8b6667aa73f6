// Tensor-parallel blocks against the whole block: two shards, each on its
// own thread with its own Gloo group over loopback, compute the whole
// block's output and gradients (to float32 rounding: the shards add the
// same products in another order), and shards are cut from and put back
// into whole layers exactly, optimizer state included.
#include "torch_doctest.h"

#include <thread>

#include "comm/communicator.h"
#include "live/worker/gradient_sync.h"
#include "live/worker/state_copies.h"
#include "loopback_store.h"
#include "model/layer_state.h"
#include "oobleck/executor/gpt.h"

using namespace oobleck;
using namespace oobleck::executor;

namespace {

ModelConfig tiny() { return {"test", 3, 32, 4, 97, 16}; }

// Two Gloo groups of two ranks over one store, each rank with its own client.
std::vector<std::unique_ptr<Communicator>> pair_of_groups() {
  static const oobleck::test::LoopbackStore stores;  // (the groups outlive the call)
  std::vector<std::unique_ptr<Communicator>> out(2);
  std::vector<std::thread> makers;
  static int round = 0;
  const std::string name = "tp" + std::to_string(round++);
  for (int r = 0; r < 2; ++r) {
    makers.emplace_back([&, r] {
      out[static_cast<std::size_t>(r)] = make_gloo_communicator(stores.client(), name, r, 2, "127.0.0.1", std::chrono::seconds(30));
    });
  }
  for (auto& m : makers) m.join();
  return out;
}

bool close(const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, 1e-4, 1e-6); }

}  // namespace

namespace {

// `replicated`: a parameter every shard holds whole.
void check_block_split(const ModelConfig& c, const std::string& replicated) {
  const int index = 2;
  auto whole = make_layer(c, index, 11);
  std::vector<std::shared_ptr<GptLayer>> shards = {make_layer(c, index, 11, {2, 0}), make_layer(c, index, 11, {2, 1})};
  // Shards are cut from the whole layer's weights, exactly.
  const auto whole_parameters = whole->named_parameters();
  for (int r = 0; r < 2; ++r) {
    for (const auto& item : shards[static_cast<std::size_t>(r)]->named_parameters()) {
      CAPTURE(item.key());
      CHECK(torch::equal(item.value(), cut_shard(whole_parameters[item.key()], split_layout(c, index, item.key()),
                                                 {2, r})));
    }
  }
  auto gen = at::detail::createCPUGenerator(5);
  const auto input = torch::randn({2, c.seq_len, c.hidden}, gen);
  const auto upstream = torch::randn({2, c.seq_len, c.hidden}, gen);
  auto x = input.clone().requires_grad_(true);
  const auto y = whole->forward(x);
  y.backward(upstream);

  auto groups = pair_of_groups();
  std::vector<torch::Tensor> outputs(2), input_grads(2);
  std::vector<std::thread> workers;
  for (int r = 0; r < 2; ++r) {
    workers.emplace_back([&, r] {
      auto& shard = *shards[static_cast<std::size_t>(r)];
      Communicator* group = groups[static_cast<std::size_t>(r)].get();
      shard.set_shard_sum([group](torch::Tensor& t) { group->allreduce_sum(t); });
      auto xr = input.clone().requires_grad_(true);
      auto yr = shard.forward(xr);
      yr.backward(upstream);
      outputs[static_cast<std::size_t>(r)] = yr.detach();
      input_grads[static_cast<std::size_t>(r)] = xr.grad();
    });
  }
  for (auto& w : workers) w.join();
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(close(outputs[static_cast<std::size_t>(r)], y.detach()));
    CHECK(close(input_grads[static_cast<std::size_t>(r)], x.grad()));
    for (const auto& item : shards[static_cast<std::size_t>(r)]->named_parameters()) {
      CAPTURE(item.key());
      const auto expected =
          cut_shard(whole_parameters[item.key()].grad(), split_layout(c, index, item.key()), {2, r});
      CHECK(close(item.value().grad(), expected));
    }
  }
  // Replicated parameters get the same gradient on both shards, bit for bit.
  CHECK(torch::equal(shards[0]->named_parameters()[replicated].grad(),
                     shards[1]->named_parameters()[replicated].grad()));
}

}  // namespace

TEST_CASE("tensor parallel: a block split over two GPUs computes the whole block's output and gradients") {
  SUBCASE("GPT-2") { check_block_split(tiny(), "ln1.weight"); }
  SUBCASE("Llama, two query heads per key/value head") {
    check_block_split({"test-llama", 3, 32, 4, 97, 16, Architecture::llama, 2, 88, 10000}, "attention_norm");
  }
}

TEST_CASE("tensor parallel: shards cut from a layer and gathered back give it exactly, optimizer state included") {
  TrainOptions o;
  o.model = tiny();
  o.seed = 3;
  for (int index : {0, 1, 4}) {
    CAPTURE(index);
    HeldLayer whole = initial_layer(o, index);
    // One AdamW step, so that both moments and the step count exist.
    for (auto& p : whole.module->parameters()) p.mutable_grad() = torch::ones_like(p) * 0.5;
    whole.optimizer->step();
    std::vector<HeldLayer> shards;
    for (int r = 0; r < 2; ++r) {
      shards.push_back(initial_layer(o, index, {2, r}));
      copy_layer_overlap(whole, shards.back(), o.model, index);
    }
    HeldLayer gathered = initial_layer(o, index);
    for (const auto& s : shards) copy_layer_overlap(s, gathered, o.model, index);
    const auto a = whole.module->named_parameters(), b = gathered.module->named_parameters();
    for (const auto& item : a) CHECK(torch::equal(item.value(), b[item.key()]));
    // The gathered layer steps exactly as the whole one does.
    for (auto* layer : {&whole, &gathered}) {
      for (auto& p : layer->module->parameters()) p.mutable_grad() = torch::full_like(p, -0.25);
      layer->optimizer->step();
    }
    for (const auto& item : a) CHECK(torch::equal(item.value(), b[item.key()]));
  }
}

TEST_CASE("tensor parallel: a degree that does not divide the heads is refused") {
  CHECK_THROWS_AS((void)make_layer(tiny(), 1, 1, {3, 0}), InputError);
  CHECK_NOTHROW((void)make_layer(tiny(), 0, 1, {3, 0}));  // the embedding is replicated
  // Llama: 4 query heads but 2 key/value heads, so 2 GPUs at most.
  const ModelConfig llama{"test-llama", 3, 32, 4, 97, 16, Architecture::llama, 2, 88, 10000};
  CHECK_NOTHROW((void)make_layer(llama, 1, 1, {2, 1}));
  try {
    (void)make_layer(llama, 1, 1, {4, 0});
    FAIL("degree 4 accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("4 attention heads and 2 key/value heads") != std::string::npos);
  }
}

TEST_CASE("tensor parallel: shards copied between workers are re-cut to the receiver's degree, exactly") {
  // Rank 2 gathers a layer that ranks 0 and 1 hold at degree 2 (after a
  // step, so that optimizer state travels too); then ranks 0 and 1 cut
  // their shards at degree 2 back out of what rank 2 holds whole.
  TrainOptions o;
  o.model = tiny();
  o.seed = 9;
  const int index = 2;
  HeldLayer whole = initial_layer(o, index);
  for (auto& p : whole.module->parameters()) p.mutable_grad() = torch::randn_like(p);
  whole.optimizer->step();

  const oobleck::test::LoopbackStore stores;
  std::vector<std::map<int, HeldLayer>> held(3);
  for (int r = 0; r < 2; ++r) {
    held[static_cast<std::size_t>(r)].emplace(index, initial_layer(o, index, {2, r}));
    copy_layer_overlap(whole, held[static_cast<std::size_t>(r)].at(index), o.model, index);
  }
  const std::vector<protocol::LayerCopy> gather = {{index, 0, 2, 2, 0}, {index, 1, 2, 2, 1}};
  const std::vector<protocol::LayerCopy> cut = {{index, 2, 0, 1, 0}, {index, 2, 1, 1, 0}};
  std::vector<std::int64_t> received(3, 0);
  std::vector<std::thread> workers;
  for (int r = 0; r < 3; ++r) {
    workers.emplace_back([&, r] {
      auto world = make_gloo_communicator(stores.client(), "copies", r, 3, "127.0.0.1", std::chrono::seconds(30));
      const TensorShard shard = r == 2 ? TensorShard{} : TensorShard{2, r};
      auto& mine = held[static_cast<std::size_t>(r)];
      received[static_cast<std::size_t>(r)] += copy_layers(*world, gather, shard, mine, o);
      if (r < 2) mine.clear();  // what they held must come back from rank 2
      received[static_cast<std::size_t>(r)] += copy_layers(*world, cut, shard, mine, o);
    });
  }
  for (auto& w : workers) w.join();
  CHECK(received[2] > 0);
  const auto expected = whole.module->named_parameters();
  const auto gathered = held[2].at(index).module->named_parameters();
  for (const auto& item : expected) CHECK(torch::equal(item.value(), gathered[item.key()]));
  for (int r = 0; r < 2; ++r) {
    CHECK(received[static_cast<std::size_t>(r)] > 0);
    for (const auto& item : held[static_cast<std::size_t>(r)].at(index).module->named_parameters()) {
      CAPTURE(item.key());
      CHECK(torch::equal(item.value(), cut_shard(expected[item.key()], split_layout(o.model, index, item.key()), {2, r})));
    }
  }
  // The optimizer state came along: one more identical step keeps them equal.
  for (auto* layer : {&whole, &held[2].at(index)}) {
    for (auto& p : layer->module->parameters()) p.mutable_grad() = torch::full_like(p, 0.125);
    layer->optimizer->step();
  }
  for (const auto& item : expected) CHECK(torch::equal(item.value(), gathered[item.key()]));
}

namespace {

// One seat per GPU: `stages` as (pipeline, degree), each stage holding every
// layer of `model`, ranks in order.
std::vector<recovery::WorkerSeat> whole_model_seats(const ModelConfig& model, std::vector<std::pair<int, int>> stages) {
  std::vector<recovery::WorkerSeat> out;
  for (const auto& [pipeline, degree] : stages) {
    const int first = static_cast<int>(out.size());
    for (int s = 0; s < degree; ++s) {
      recovery::WorkerSeat seat;
      seat.pipeline = pipeline;
      seat.layer_end = pipeline_layers(model);
      seat.gpu = s;
      seat.degree = degree;
      seat.shard = s;
      seat.first_rank = first;
      out.push_back(seat);
    }
  }
  return out;
}

std::vector<GradientSlot> slots_of(const TrainOptions& o, const recovery::WorkerSeat& seat,
                                   std::map<int, HeldLayer>& held) {
  for (int l = seat.layer_begin; l < seat.layer_end; ++l) held.emplace(l, initial_layer(o, l, {seat.degree, seat.shard}));
  return gradient_slots(held, seat.layer_begin, seat.layer_end, o.model);
}

}  // namespace

TEST_CASE("tensor parallel: replicated gradients are summed per shard where every stage has one degree") {
  TrainOptions o;
  o.model = tiny();
  SUBCASE("two pipelines of degree 2: shard s of each, no zeros") {
    const auto seats = whole_model_seats(o.model, {{0, 2}, {1, 2}});
    for (int rank = 0; rank < 4; ++rank) {
      std::map<int, HeldLayer> held;
      const auto slots = slots_of(o, seats[static_cast<std::size_t>(rank)], held);
      const auto plan = plan_gradients(seats, rank, slots, o.model);
      const std::vector<int> mine = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
      CHECK(plan.copies.empty());
      CHECK(plan.tied_holders == mine);
      CHECK(plan.tied_counted == (rank == 0));
      for (const auto& part : plan.parts) {
        CAPTURE(slots[part.slot].name);
        CHECK(part.holders == mine);
        const bool split = split_layout(o.model, slots[part.slot].label, slots[part.slot].name).split();
        CHECK(part.counted == (split ? rank < 2 : rank == 0));  // each slice's norm counted once
      }
    }
    const auto groups = gradient_groups(seats, o.model);
    CHECK(groups == std::set<std::vector<int>>{{0, 2}, {1, 3}});
  }
  SUBCASE("degrees 2 and 1: shard 1 gives zeros, summed over everyone") {
    const auto seats = whole_model_seats(o.model, {{0, 2}, {1, 1}});
    std::map<int, HeldLayer> held;
    const auto slots = slots_of(o, seats[1], held);
    const auto plan = plan_gradients(seats, 1, slots, o.model);
    CHECK(plan.tied_holders == std::vector<int>{0, 1, 2});
    std::size_t replicated = 0;
    for (const auto& part : plan.parts) {
      if (split_layout(o.model, slots[part.slot].label, slots[part.slot].name).split()) {
        CHECK(part.holders == std::vector<int>{1, 2});
      } else {
        ++replicated;
        CHECK(part.holders == std::vector<int>{0, 1, 2});
        CHECK(std::count(plan.copies.begin(), plan.copies.end(), part.slot) == 1);
      }
    }
    CHECK(plan.copies.size() == replicated + 2);  // and both copies of the tied weight
    const auto groups = gradient_groups(seats, o.model);
    CHECK(groups.count({0, 1, 2}) == 1);
    CHECK(groups.count({0, 2}) == 1);
  }
}
