// The store Gloo groups rendezvous through (comm/peeking_store.h): a key
// already there is read in one round trip, with its value byte for byte; a
// key not there yet is waited for as before; a peek never writes. Gloo
// groups made through it are exercised by every communicator test.
#include "torch_doctest.h"

#include <string>
#include <thread>
#include <vector>

#include "comm/peeking_store.h"
#include "loopback_store.h"

using oobleck::executor::make_peeking_store;
using oobleck::executor::PeekingStore;

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace

TEST_CASE("peeking store: a key already there, waited for and read, costs one round trip and reads the same") {
  const oobleck::test::LoopbackStore stores;
  const auto value = bytes(std::string("\0address\xff of rank 3", 20));
  stores.server()->set("rank/3", value);
  auto store = make_peeking_store(stores.client());
  auto& peeking = dynamic_cast<PeekingStore&>(*store);
  store->wait({"rank/3"}, std::chrono::seconds(10));
  CHECK(store->get("rank/3") == value);
  CHECK(peeking.round_trips() == 1);
  // Read again (nothing kept from a wait now): one peek.
  CHECK(store->get("rank/3") == value);
  CHECK(peeking.round_trips() == 2);
  // The store holds what it held.
  CHECK(stores.server()->get("rank/3") == value);
  CHECK(stores.server()->getNumKeys() == 1);
}

TEST_CASE("peeking store: a key set later is waited for, and read as set; a peek writes nothing") {
  const oobleck::test::LoopbackStore stores;
  auto store = make_peeking_store(stores.client());
  auto& peeking = dynamic_cast<PeekingStore&>(*store);
  // Absent: a wait that runs out throws, and leaves no key behind.
  CHECK_THROWS(store->wait({"never"}, std::chrono::milliseconds(50)));
  CHECK_FALSE(stores.server()->check({"never"}));
  CHECK(stores.server()->getNumKeys() == 0);
  // Set by another client while this one waits, or before its peek: either
  // way the value read is the one set.
  const auto value = bytes("host-b");
  std::vector<uint8_t> read;
  std::thread waiter([&] {
    store->wait({"late"}, std::chrono::seconds(30));
    read = store->get("late");
  });
  const auto other = stores.client();
  other->set("late", value);
  waiter.join();
  CHECK(read == value);
  CHECK(stores.server()->get("late") == value);
  CHECK(peeking.round_trips() <= 1 + 4);  // the first wait's peek and wait, then at most peek, wait and read
}

TEST_CASE("peeking store: compare-and-set and counters pass through") {
  const oobleck::test::LoopbackStore stores;
  auto store = make_peeking_store(stores.client());
  CHECK(store->add("count", 2) == 2);
  CHECK(store->add("count", 3) == 5);
  CHECK(store->compareSet("flag", {}, bytes("on")) == bytes("on"));
  CHECK(store->compareSet("flag", bytes("on"), bytes("off")) == bytes("off"));
  CHECK(stores.server()->get("flag") == bytes("off"));
  CHECK(store->check({"count", "flag"}));
  CHECK(store->deleteKey("flag"));
  CHECK_FALSE(stores.server()->check({"flag"}));
}
