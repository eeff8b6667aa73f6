// The discrete-event core. Events run in order of (time, insertion
// sequence), so events at the same time run in the order they were
// scheduled and every run is deterministic. The engine knows nothing of
// pipelines or clusters: models schedule handlers on it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace oobleck::sim {

using TimeMs = double;

// A move-only `void()` callable stored inline up to 48 bytes, so scheduling
// a handler with a few captured pointers never allocates (std::function
// allocates above 16 bytes).
class Handler {
 public:
  Handler() = default;
  Handler(std::nullptr_t) {}
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Handler>>>
  Handler(F&& f) {  // NOLINT: implicit, like std::function
    using Stored = std::decay_t<F>;
    if constexpr (sizeof(Stored) <= kInline && alignof(Stored) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Stored>) {
      new (buffer_) Stored(std::forward<F>(f));
      ops_ = &inline_ops<Stored>;
    } else {
      *reinterpret_cast<Stored**>(buffer_) = new Stored(std::forward<F>(f));
      ops_ = &heap_ops<Stored>;
    }
  }
  Handler(Handler&& other) noexcept { take(other); }
  Handler& operator=(Handler&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Handler(const Handler&) = delete;
  Handler& operator=(const Handler&) = delete;
  ~Handler() { reset(); }

  void operator()() { ops_->call(buffer_); }
  explicit operator bool() const { return ops_ != nullptr; }
  void reset() {
    if (ops_) ops_->destroy(buffer_);
    ops_ = nullptr;
  }

 private:
  static constexpr std::size_t kInline = 48;
  struct Ops {
    void (*call)(void*);
    void (*move)(void* from, void* to);  // leaves `from` destroyed
    void (*destroy)(void*);
  };
  template <typename T>
  static constexpr Ops inline_ops = {
      [](void* p) { (*static_cast<T*>(p))(); },
      [](void* from, void* to) {
        new (to) T(std::move(*static_cast<T*>(from)));
        static_cast<T*>(from)->~T();
      },
      [](void* p) { static_cast<T*>(p)->~T(); }};
  template <typename T>
  static constexpr Ops heap_ops = {
      [](void* p) { (**static_cast<T**>(p))(); },
      [](void* from, void* to) { *static_cast<T**>(to) = *static_cast<T**>(from); },
      [](void* p) { delete *static_cast<T**>(p); }};
  void take(Handler& other) {
    if (other.ops_) other.ops_->move(other.buffer_, buffer_);
    ops_ = other.ops_;
    other.ops_ = nullptr;
  }
  alignas(std::max_align_t) unsigned char buffer_[kInline];
  const Ops* ops_ = nullptr;
};

// Names a scheduled event so it can be cancelled. Stale ids (the event ran
// or was cancelled) are recognised and ignored.
struct EventId {
  std::uint32_t slot = UINT32_MAX;
  std::uint32_t generation = 0;
};

class Engine {
 public:
  // `when` must not lie before now(): the past cannot be changed.
  EventId schedule_at(TimeMs when, Handler handler);
  EventId schedule_after(TimeMs delay, Handler handler) { return schedule_at(now_ + delay, std::move(handler)); }
  // True when the event was still pending; it will not run.
  bool cancel(EventId id);

  [[nodiscard]] TimeMs now() const { return now_; }
  [[nodiscard]] std::size_t pending() const { return pending_; }
  [[nodiscard]] std::uint64_t executed() const { return executed_; }

  // Runs the next event; false when none is pending.
  bool step();
  void run() {
    while (step()) {
    }
  }
  // Runs every event at or before `until`, then sets the clock to `until`.
  void run_until(TimeMs until) { run_through(until, true); }
  // Runs every event strictly before `until`, then sets the clock to
  // `until`: a driver can then act at `until` ahead of the events pending
  // there, as if it had scheduled its action first.
  void run_before(TimeMs until) { run_through(until, false); }

 private:
  // 16 bytes, so a node's four children share a cache line: the insertion
  // sequence in the high 40 bits of `key`, the slot in the low 24.
  // Times are never negative, so their bit patterns order like the times;
  // (time bits, key) as one 128-bit number compares without branches.
  __extension__ using Order = unsigned __int128;
  struct Entry {
    std::uint64_t time_bits;
    std::uint64_t key;
    [[nodiscard]] std::uint32_t slot() const { return static_cast<std::uint32_t>(key & kSlotMask); }
    [[nodiscard]] TimeMs time() const { return std::bit_cast<TimeMs>(time_bits); }
    [[nodiscard]] Order order() const { return (static_cast<Order>(time_bits) << 64) | key; }
  };
  static constexpr int kSlotBits = 24;
  static constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << kSlotBits) - 1;
  struct Slot {
    Handler handler;
    std::uint32_t generation = 0;
    bool live = false;
  };

  void run_through(TimeMs until, bool inclusive);
  void push(Entry entry);
  void pop_front();
  void release(std::uint32_t slot);

  TimeMs now_ = 0;
  std::uint64_t next_sequence_ = 0;
  std::uint64_t executed_ = 0;
  std::size_t pending_ = 0;
  std::vector<Entry> heap_;  // 4-ary min-heap on (time, sequence); may hold cancelled entries
  std::deque<Slot> slots_;  // stable addresses: a handler may schedule while it runs
  std::vector<std::uint32_t> free_slots_;
};

}  // namespace oobleck::sim
