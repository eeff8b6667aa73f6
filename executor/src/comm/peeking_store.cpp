#include "peeking_store.h"

#include <utility>

namespace oobleck::executor {
namespace {

// A value no key of the executor's stores holds: Gloo's values are
// addresses and host names, the executor's own numbers and flags.
const std::vector<uint8_t>& absent() {
  static const std::string text = "\x01oobleck: no such key\x01";
  static const std::vector<uint8_t> bytes(text.begin(), text.end());
  return bytes;
}

// libtorch 2.x's Store declares clone() (a store to use from another
// thread); 1.x's does not. The copy shares the inner store, whose client
// serialises its own calls.
template <typename Base, bool = requires(Base& s) { s.clone(); }>
class MadeStore final : public Base {
 public:
  using Base::Base;
};
template <typename Base>
class MadeStore<Base, true> final : public Base {
 public:
  using Base::Base;
  c10::intrusive_ptr<c10d::Store> clone() override { return c10::make_intrusive<MadeStore>(this->inner()); }
};

}  // namespace

PeekingStore::PeekingStore(c10::intrusive_ptr<c10d::Store> inner)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)) {}

bool PeekingStore::peek(const std::string& key, std::vector<uint8_t>& value) {
  ++round_trips_;
  value = inner_->compareSet(key, absent(), absent());
  return value != absent();
}

void PeekingStore::set(const std::string& key, const std::vector<uint8_t>& value) { inner_->set(key, value); }

std::vector<uint8_t> PeekingStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  ++round_trips_;
  return inner_->compareSet(key, expected, desired);
}

std::vector<uint8_t> PeekingStore::get(const std::string& key) {
  {
    const std::lock_guard lock(mutex_);
    const auto kept = peeked_.find(key);
    if (kept != peeked_.end()) {
      std::vector<uint8_t> value = std::move(kept->second);
      peeked_.erase(kept);
      return value;
    }
  }
  std::vector<uint8_t> value;
  if (peek(key, value)) return value;
  round_trips_ += 2;  // (TCPStore waits, then reads)
  return inner_->get(key);
}

int64_t PeekingStore::add(const std::string& key, int64_t value) {
  ++round_trips_;
  return inner_->add(key, value);
}

bool PeekingStore::deleteKey(const std::string& key) {
  ++round_trips_;
  return inner_->deleteKey(key);
}

bool PeekingStore::check(const std::vector<std::string>& keys) {
  ++round_trips_;
  return inner_->check(keys);
}

int64_t PeekingStore::getNumKeys() {
  ++round_trips_;
  return inner_->getNumKeys();
}

void PeekingStore::wait(const std::vector<std::string>& keys) { wait(keys, getTimeout()); }

void PeekingStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  if (keys.size() == 1) {
    std::vector<uint8_t> value;
    if (peek(keys.front(), value)) {
      const std::lock_guard lock(mutex_);
      peeked_[keys.front()] = std::move(value);
      return;
    }
  }
  ++round_trips_;
  inner_->wait(keys, timeout);
}

const std::chrono::milliseconds& PeekingStore::getTimeout() const noexcept { return inner_->getTimeout(); }

void PeekingStore::setTimeout(const std::chrono::milliseconds& timeout) { inner_->setTimeout(timeout); }

int PeekingStore::round_trips() const { return round_trips_.load(); }

c10::intrusive_ptr<c10d::Store> make_peeking_store(c10::intrusive_ptr<c10d::Store> inner) {
  return c10::make_intrusive<MadeStore<PeekingStore>>(std::move(inner));
}

}  // namespace oobleck::executor
