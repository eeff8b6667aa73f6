// A rendezvous store that reads a key already there in one round trip.
//
// Why: a Gloo group's members find each other through the store. Gloo
// waits for each peer's address and then reads it (store.wait, store.get),
// and libtorch's TCPStore client waits again inside every get before it
// reads: three round trips per peer, each through the worker's tunnel and
// the master's store thread. Gloo also reads the host name of every lower
// rank, two round trips each. Traced in a live recovery on two loaded
// cores (a group of five), a round trip took 0.2 to 8 ms, and the fifth
// rank made 18 of them one after another before its pairs were connected.
//
// Most of those keys are there already when asked for: members start
// within milliseconds of each other and publish first. So a wait for one
// key, and a get, first peek: a compare-and-set whose expected and desired
// values are both a sentinel no store value takes. TCPStore answers it in
// one round trip with the key's value, leaving it unchanged, or with the
// sentinel when the key is absent (it sets a missing key only when the
// expected value is empty). A present key is then read in one round trip
// instead of three (wait then get) or two (get); the value a wait peeked is
// kept for the get that follows. An absent key costs one round trip more
// than before, then waits as it did. Values are what the inner store holds,
// byte for byte: only the number of round trips changes.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace oobleck::executor {

class PeekingStore : public c10d::Store {
 public:
  explicit PeekingStore(c10::intrusive_ptr<c10d::Store> inner);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  const std::chrono::milliseconds& getTimeout() const noexcept override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;

  // Round trips to the inner store so far, reads and waits (for tests).
  [[nodiscard]] int round_trips() const;

 protected:
  [[nodiscard]] const c10::intrusive_ptr<c10d::Store>& inner() const { return inner_; }

 private:
  // The key's value when the inner store holds it now (one round trip).
  [[nodiscard]] bool peek(const std::string& key, std::vector<uint8_t>& value);

  c10::intrusive_ptr<c10d::Store> inner_;
  std::mutex mutex_;
  std::map<std::string, std::vector<uint8_t>> peeked_;  // by a wait, for the get after it
  std::atomic<int> round_trips_{0};
};

// A PeekingStore for `inner`. (libtorch 2.x's Store also declares clone();
// the store made here defines it where its libtorch does.)
[[nodiscard]] c10::intrusive_ptr<c10d::Store> make_peeking_store(c10::intrusive_ptr<c10d::Store> inner);

}  // namespace oobleck::executor
