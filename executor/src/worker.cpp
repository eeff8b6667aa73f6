// A live worker, one per node. It trains its stage of the current
// generation's plan: 1F1B over its pipeline's microbatches, per-layer
// gradient all-reduces among the holders of each layer, global-norm clipping.
// A step is applied (AdamW) only once the master commits it, so every worker
// agrees on which steps happened. When the master announces a newer
// generation, the reader thread abandons every socket in hand, which makes
// whatever the training thread is blocked in fail at once; the worker then
// settles the step in hand (applied if the master had committed it,
// discarded otherwise), rebuilds its communicators, copies the layer states
// the planner assigns it and redoes the step on the same global batch.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "oobleck/common/files.h"
#include "oobleck/common/one_f_one_b.h"
#include "autocast.h"
#include "communicator.h"
#include "control.h"
#include "layer_state.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/live.h"
#include "plan_seats.h"
#include "train_common.h"

namespace oobleck::executor {
namespace {

// A pair of libtorch 1.x's Gloo waiting for its peer listens on a socket of
// its own, which an abandon must shut down to wake it; 2.x's Gloo has one
// listener per device and ends the process when that listener fails.
constexpr bool kKeepGlooListeners = TORCH_VERSION_MAJOR >= 2;

using control::Json;
using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC: one time base for every process on this machine.
double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

// The master has started a newer generation: the work in hand is abandoned.
struct Superseded final : std::runtime_error {
  Superseded() : std::runtime_error("a newer generation started") {}
};

// The control channel as the training thread sees it. A reader thread keeps
// the newest generation and the commits, and abandons every socket of this
// process (but its own) as soon as a generation newer than the one in hand
// arrives, so that no communication waits on a peer that is gone.
class Inbox {
 public:
  explicit Inbox(std::unique_ptr<control::Connection> connection) : connection_(std::move(connection)) {}
  ~Inbox() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
  }

  bool send(const Json& message) { return connection_->send(message); }

  // The job's configuration, read before the reader thread starts.
  Json welcome() {
    Json welcome;
    while (welcome.is_null()) {
      std::vector<Json> messages;
      if (!connection_->receive(messages, std::chrono::milliseconds(1000))) {
        throw std::runtime_error("the master closed the control channel before sending the configuration");
      }
      std::lock_guard lock(mutex_);
      for (auto& m : messages) {
        if (m.value("type", "") == "welcome") {
          welcome = std::move(m);
        } else {
          handle(std::move(m));  // what came with it (a generation) is kept
        }
      }
    }
    return welcome;
  }

  void start() {
    reader_ = std::thread([this] { read_loop(); });
  }

  // The generation in hand: from now on only newer ones abandon sockets.
  void begin(int generation) {
    std::lock_guard lock(mutex_);
    in_hand_ = generation;
    std::erase_if(commits_, [&](const auto& c) { return c.first.first < generation; });
  }
  // Communicators of the generation in hand, aborted when a newer one comes.
  void watch(Communicator* communicator) {
    std::lock_guard lock(mutex_);
    watched_.push_back(communicator);
    if (newest_number_ > in_hand_) communicator->abort();
  }
  void unwatch_all() {
    std::lock_guard lock(mutex_);
    watched_.clear();
  }
  [[nodiscard]] bool superseded() const {
    std::lock_guard lock(mutex_);
    return newest_number_ > in_hand_;
  }
  void throw_if_superseded() const {
    if (superseded()) throw Superseded();
  }
  // The training thread failed on its own: abandon its sockets, so that its
  // peers fail at once too, instead of waiting for it.
  void abandon() {
    std::lock_guard lock(mutex_);
    control::abandon_sockets({connection_->fd()}, kKeepGlooListeners);
  }

  // The newest generation after `generation`, waiting for one.
  Json next_generation(int generation) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return newest_number_ > generation; });
    return newest_;
  }

  // The master's commit of `step`, or Superseded. A commit that came is
  // taken even when a newer generation came after it: the step is applied
  // (and saved, when asked) before that generation is entered.
  Json wait_commit(int generation, int step) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return newest_number_ > in_hand_ || commits_.count({generation, step}); });
    const auto it = commits_.find({generation, step});
    if (it == commits_.end()) throw Superseded();
    Json out = std::move(it->second);
    commits_.erase(it);
    return out;
  }

  // A worker with nothing to train waits for a newer generation or the end.
  bool wait_generation_or_finish(int generation) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return newest_number_ > generation || finished_; });
    return finished_ && newest_number_ <= generation;
  }

 private:
  void read_loop() {
    while (!stop_) {
      std::vector<Json> messages;
      const bool open = connection_->receive(messages, std::chrono::milliseconds(100));
      std::lock_guard lock(mutex_);
      for (auto& m : messages) {
        try {
          handle(std::move(m));
        } catch (const std::exception& e) {  // a malformed message: a bug at the master, not a reason to die
          std::fprintf(stderr, "oobleck-run worker: ignoring a malformed control message (%s)\n", e.what());
        }
      }
      if (newest_number_ > in_hand_) {
        for (auto* c : watched_) c->abort();
        control::abandon_sockets({connection_->fd()}, kKeepGlooListeners);
      }
      if (!open) {
        if (finishing_) return;
        // The master is gone: so is the job. Nothing here can be saved by waiting.
        std::fprintf(stderr, "oobleck-run worker: the master went away; exiting\n");
        std::_Exit(kExitFailure);
      }
    }
  }
  void handle(Json message) {
    const std::string type = message.value("type", "");
    if (type == "generation") {
      const int number = message.at("generation");
      if (number > newest_number_) {
        newest_number_ = number;
        newest_ = std::move(message);
      }
    } else if (type == "commit") {
      if (message.value("finish", false)) finishing_ = true;
      const std::pair<int, int> key = {message.at("generation"), message.at("step")};
      commits_[key] = std::move(message);  // (json's operator= takes its argument by value: key first)
    } else if (type == "finish") {
      finishing_ = true;
      finished_ = true;
    }
    changed_.notify_all();
  }

  std::unique_ptr<control::Connection> connection_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Json newest_;
  int newest_number_ = 0;
  int in_hand_ = 0;
  std::map<std::pair<int, int>, Json> commits_;
  std::vector<Communicator*> watched_;
  bool finished_ = false;
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

class LiveWorker {
 public:
  explicit LiveWorker(const NodeProcessOptions& options)
      : node_(options.node),
        master_addr_(options.master_addr),
        token_(options.token),
        inbox_(control::connect_to(options.master_addr, options.control_port, std::chrono::seconds(60))) {}

  int run() {
    inbox_.send({{"type", "hello"}, {"role", "worker"}, {"node", node_}, {"token", token_}, {"pid", ::getpid()}});
    configure(inbox_.welcome());
    inbox_.start();
    Json generation = inbox_.next_generation(0);
    for (;;) {
      try {
        enter(generation);
        if (train()) {
          release_communicators(false);
          return 0;
        }
      } catch (const Superseded&) {
      } catch (const std::exception& e) {
        if (inbox_.superseded()) {
          // Whatever failed, it failed because the work was abandoned.
        } else if (dynamic_cast<const CommunicationError*>(&e)) {
          // A peer failed under us: make everyone connected to us fail too,
          // and tell the master, which decides what comes next.
          inbox_.abandon();
          inbox_.send({{"type", "comm_error"}, {"generation", number_}, {"what", std::string(e.what()).substr(0, 300)}});
        } else {
          // This node's own failure (memory, disk, a corrupt state, a bug):
          // it leaves the job, which goes on without it.
          std::fprintf(stderr, "oobleck-run worker %s: cannot go on: %s\n", node_.c_str(), e.what());
          inbox_.abandon();
          release_communicators(true);
          return kExitFailure;
        }
      }
      release_communicators(true);
      generation = inbox_.next_generation(number_);
    }
  }

 private:
  // ------------------------------------------------------------ configuration
  void configure(const Json& welcome) {
    profile_ = parse_profile(welcome.at("profile").get<std::string>(), welcome.at("profile_origin"));
    apply_profile(o_, profile_, welcome.value("device", std::string("cpu")));
    o_.steps = welcome.at("steps");
    o_.seed = welcome.at("seed");
    torch::set_num_threads(welcome.at("threads").get<int>());
    torch::manual_seed(o_.seed);
    tokens_ = read_tokens(welcome.at("data"));
    store_port_ = welcome.at("store_port");
    comm_timeout_ = std::chrono::milliseconds(welcome.at("comm_timeout_ms").get<std::int64_t>());
    // On one machine everything stays on loopback; across machines Gloo
    // binds to this host's own address.
    bind_host_ = master_addr_ == "127.0.0.1" || master_addr_ == "localhost" ? "127.0.0.1" : "";
  }

  // ------------------------------------------------------------ generations
  void enter(const Json& message) {
    number_ = message.at("generation");
    inbox_.begin(number_);
    const double start = now_ms();
    inbox_.send({{"type", "recovering"}, {"generation", number_}});
    const int resume = message.at("resume_step");
    settle_step_in_hand(resume);

    plan_ = parse_plan(message.at("plan").get<std::string>(), "generation " + std::to_string(number_), profile_);
    const auto ranks = message.at("ranks").get<std::vector<std::string>>();
    const auto me = std::find(ranks.begin(), ranks.end(), node_);
    if (me == ranks.end()) throw std::logic_error("generation " + std::to_string(number_) + " does not list " + node_);
    rank_ = static_cast<int>(me - ranks.begin());
    world_size_ = static_cast<int>(ranks.size());
    seats_ = seats_of(plan_);
    trainer_ = rank_ < static_cast<int>(seats_.size());
    resume_step_ = resume;

    // Keep exactly what the master counts this node as holding, at the
    // state after step resume - 1; anything else is stale.
    const int holds_begin = message.at("holds")[0], holds_end = message.at("holds")[1];
    for (auto it = held_.begin(); it != held_.end();) {
      it = it->first >= holds_begin && it->first < holds_end ? std::next(it) : held_.erase(it);
    }
    for (int l = holds_begin; l < holds_end; ++l) {
      if (!held_.count(l) || (resume > 0 && applied_through_ != resume - 1)) {
        throw std::logic_error(node_ + " is counted as holding layer " + std::to_string(l) + " after step " +
                               std::to_string(resume - 1) + " but does not");
      }
    }

    build_communicators();
    const double rebuilt = now_ms();
    const std::int64_t copied_bytes = copy_layers(message.at("copies"));
    if (message.contains("checkpoint")) load_checkpoint(message.at("checkpoint"));
    if (trainer_) {
      for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
        if (held_.count(l)) continue;
        if (resume > 0) {
          throw std::logic_error("generation " + std::to_string(number_) + " gives " + node_ + " layer " +
                                 std::to_string(l) + " without a copy");
        }
        held_.emplace(l, initial_layer(o_, l));  // nothing trained yet: (seed, layer) is the state
      }
    }
    slots_.clear();
    if (trainer_) slots_ = gradient_slots(held_, seat().layer_begin, seat().layer_end, o_.model.layers + 1);
    applied_through_ = resume - 1;
    established_ = false;
    first_microbatch_ = 0;
    if (trainer_) {
      for (int p = 0; p < seat().pipeline; ++p) first_microbatch_ += plan_.pipelines[p].microbatches;
    }
    inbox_.send({{"type", "recovered"},
                 {"generation", number_},
                 {"rebuild_ms", rebuilt - start},
                 {"copy_ms", now_ms() - rebuilt},
                 {"copy_bytes", copied_bytes}});
  }

  // The step in hand when the generation changed: the master's resume step
  // says whether it was committed (apply it) or not (discard it).
  void settle_step_in_hand(int resume) {
    if (!pending_) return;
    if (*pending_ + 1 == resume) {
      apply_step();
    } else if (*pending_ == resume) {
      pending_.reset();
    } else {
      throw std::logic_error("step " + std::to_string(*pending_) + " in hand, but the master resumes at step " +
                             std::to_string(resume));
    }
  }

  // AdamW on this worker's layers. The first commit of a generation makes
  // its plan the one the master counts holdings by: other layers go.
  void apply_step() {
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) held_.at(l).optimizer->step();
    applied_through_ = *pending_;
    pending_.reset();
    if (!established_) {
      established_ = true;
      for (auto it = held_.begin(); it != held_.end();) {
        it = it->first >= seat().layer_begin && it->first < seat().layer_end ? std::next(it) : held_.erase(it);
      }
    }
  }

  [[nodiscard]] const Seat& seat() const { return seats_.at(rank_); }

  // The world (every worker of the generation: state copies) and the
  // trainers (pipelines: activations, the norm) now; one group per set of
  // trainers holding the same layers in the background, while the first
  // step's passes run (they are needed only at its end). Every group is made
  // on its own thread with its own store client (a client serves one
  // thread); every member of a group makes it, so no order among them can
  // deadlock, and a recovery waits for the slowest group, not their sum.
  void build_communicators() {
    std::vector<GroupToMake> now = {{"world", rank_, world_size_, &world_}};
    const int trainers = static_cast<int>(seats_.size());
    if (trainer_ && trainers < world_size_) now.push_back({"trainers", rank_, trainers, &trainers_group_});
    make_groups(now);
    if (!trainer_) return;
    std::vector<GroupToMake> later;
    for (const auto& set : gradient_sets()) {
      auto it = std::find(set.begin(), set.end(), rank_);
      if (it == set.end() || set.size() < 2) continue;
      if (static_cast<int>(set.size()) == trainers) continue;  // the trainers' own group serves
      std::string name = "grads";
      for (int r : set) name.append(":").append(std::to_string(r));
      later.push_back({name, static_cast<int>(it - set.begin()), static_cast<int>(set.size()), &groups_[set]});
    }
    gradient_groups_ = std::async(std::launch::async, [this, later] { make_groups(later); });
  }

  struct GroupToMake {
    std::string name;
    int rank, size;
    std::unique_ptr<Communicator>* slot;
  };
  void make_groups(const std::vector<GroupToMake>& groups) {
    std::vector<std::exception_ptr> errors(groups.size());
    std::vector<std::thread> makers;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      makers.emplace_back([&, i] {
        try {
          try {
            c10d::TCPStoreOptions options;
            options.port = static_cast<std::uint16_t>(store_port_);
            options.isServer = false;
            options.timeout = comm_timeout_;
            auto store = c10::make_intrusive<c10d::TCPStore>(master_addr_, options);
            const GroupToMake& g = groups[i];
            *g.slot = make_gloo_communicator(store, "g" + std::to_string(number_) + "/" + g.name, g.rank, g.size,
                                             bind_host_, comm_timeout_);
            inbox_.watch(g.slot->get());
          } catch (const CommunicationError&) {
            throw;
          } catch (const std::exception& e) {  // the store: also communication
            throw CommunicationError(e.what());
          }
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& m : makers) m.join();
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }
  // The gradient groups, once made (rethrows what failed making them).
  Communicator& gradient_group(const std::vector<int>& set) {
    if (gradient_groups_.valid()) gradient_groups_.get();
    return static_cast<int>(set.size()) == static_cast<int>(seats_.size()) ? trainers() : *groups_.at(set);
  }
  Communicator& trainers() { return trainers_group_ ? *trainers_group_ : *world_; }

  // After an interruption a collective may still be running on a group's
  // own threads until Gloo gives up on it: those groups are destroyed on a
  // thread of their own, so that the next generation starts at once.
  void release_communicators(bool interrupted) {
    if (gradient_groups_.valid()) {
      try {
        gradient_groups_.get();  // its sockets are abandoned by now: it ends at once
      } catch (const std::exception&) {
      }
    }
    inbox_.unwatch_all();
    std::vector<std::unique_ptr<Communicator>> old;
    for (auto& [set, c] : groups_) old.push_back(std::move(c));
    groups_.clear();
    old.push_back(std::move(trainers_group_));
    old.push_back(std::move(world_));
    if (!interrupted) return;
    std::thread([old = std::move(old)]() mutable { old.clear(); }).detach();
  }

  [[nodiscard]] static bool holds(const Seat& s, int layer) { return s.layer_begin <= layer && layer < s.layer_end; }

  // Which trainers hold each label (the tied weight: holders of either
  // end), and the distinct sets among them.
  std::set<std::vector<int>> gradient_sets() {
    const int last_layer = o_.model.layers + 1;
    auto holders = [&](int label) {
      std::vector<int> ranks;
      for (int r = 0; r < static_cast<int>(seats_.size()); ++r) {
        const bool in = label == kTied ? holds(seats_[r], 0) || holds(seats_[r], last_layer) : holds(seats_[r], label);
        if (in) ranks.push_back(r);
      }
      return ranks;
    };
    label_holders_.clear();
    std::set<std::vector<int>> sets;
    for (int l = kTied; l <= last_layer; ++l) {
      label_holders_[l] = holders(l);
      sets.insert(label_holders_[l]);
    }
    return sets;
  }

  // The planner's transfer list: every sender posts its sends, then every
  // receiver receives, so no order of the list can deadlock. Layers travel
  // whole (weights, AdamW moments, step count). Returns the bytes received.
  std::int64_t copy_layers(const Json& copies) {
    std::vector<std::unique_ptr<PendingOp>> sends;
    for (const auto& c : copies) {
      if (c.at("from") != rank_) continue;
      const int layer = c.at("layer");
      const std::string bytes = serialize_layer(held_.at(layer));
      auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
      auto payload = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
      std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
      sends.push_back(world_->send(size, c.at("to"), 2 * layer));
      sends.push_back(world_->send(payload, c.at("to"), 2 * layer + 1));
    }
    std::int64_t received = 0;
    for (const auto& c : copies) {
      if (c.at("to") != rank_) continue;
      const int layer = c.at("layer"), from = c.at("from");
      auto size = torch::zeros({1}, torch::kLong);
      world_->recv(size, from, 2 * layer);
      auto payload = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
      world_->recv(payload, from, 2 * layer + 1);
      HeldLayer incoming = initial_layer(o_, layer);
      deserialize_layer(incoming,
                        std::string(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel())));
      held_[layer] = std::move(incoming);  // whole, or not at all
      received += payload.numel();
    }
    for (auto& s : sends) s->wait();
    return received;
  }

  void load_checkpoint(const Json& checkpoint) {
    if (!trainer_) return;
    const std::string folder = checkpoint.at("folder");
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      HeldLayer layer = initial_layer(o_, l);
      deserialize_layer(layer, read_text_file(folder + "/layer-" + std::to_string(l) + ".pt"));
      held_[l] = std::move(layer);
    }
  }

  // ------------------------------------------------------------ training
  // True when training is over; false when a new generation follows.
  bool train() {
    if (!trainer_) {
      const bool finished = inbox_.wait_generation_or_finish(number_);
      if (finished) inbox_.send({{"type", "done"}, {"generation", number_}});
      return finished;
    }
    for (int step = resume_step_; step < o_.steps; ++step) {
      run_step(step);
      const Json commit = inbox_.wait_commit(number_, step);
      const double applied = now_ms();
      apply_step();
      if (recording_) {
        optimizer_ms_ = now_ms() - applied;
        record('O', 0, applied, now_ms());
      }
      if (commit.contains("save")) save_checkpoint(commit.at("save"));
      if (commit.value("finish", false)) {
        inbox_.send({{"type", "done"}, {"generation", number_}, {"timeline", timeline()}});
        return true;
      }
      if (commit.value("pause", false)) return false;
    }
    throw std::logic_error("generation " + std::to_string(number_) + " resumes after the last step");
  }

  // One step up to the master's commit: forward and backward passes,
  // gradient synchronisation and clipping; then "ready" with this worker's
  // share of the loss and, on first stages, the samples it consumed.
  void run_step(int step) {
    inbox_.throw_if_superseded();
    recording_ = step == o_.steps - 1;  // the last step, warmed up
    ops_.clear();
    compute_ms_ = wait_ms_ = sync_ms_ = optimizer_ms_ = 0;
    if (recording_) trainers().barrier();
    step_start_ms_ = now_ms();
    zero_sums(slots_);
    double loss = 0;
    {
      const CudaAutocast autocast(o_.bf16);
      loss = one_f_one_b(step);
    }
    const double sync_start = now_ms();
    synchronise_gradients();
    sync_ms_ = now_ms() - sync_start;
    pending_ = step;
    Json ready = {{"type", "ready"}, {"generation", number_}, {"step", step}, {"loss", loss}};
    if (seat().position == 0) {
      const int mb = o_.microbatch_size;
      ready["samples"] = {first_microbatch_ * mb, plan_.pipelines[seat().pipeline].microbatches * mb};
    }
    inbox_.send(ready);
  }

  void record(char kind, int index, double start, double end) {
    if (recording_) ops_.push_back({kind, index, start, end});
  }
  Json timeline() const {
    Json ops = Json::array();
    for (const auto& op : ops_) ops.push_back({std::string(1, op.kind), op.index, op.start_ms, op.end_ms});
    return {{"step_start_ms", step_start_ms_}, {"compute_ms", compute_ms_}, {"wait_ms", wait_ms_},
            {"sync_ms", sync_ms_},             {"optimizer_ms", optimizer_ms_}, {"ops", ops}};
  }

  torch::Tensor microbatch_tokens(int step, int m, bool targets) const {
    const Sequences s = step_sequences(tokens_, o_.seed, step, (first_microbatch_ + m) * o_.microbatch_size,
                                       o_.microbatch_size, o_.model.seq_len);
    return long_tensor(targets ? s.targets : s.inputs, o_.microbatch_size, o_.model.seq_len, train_device(o_));
  }

  // A newer generation is looked for between layers too: a long pass must
  // not hold up everyone's recovery until its next communication.
  torch::Tensor forward_layers(torch::Tensor x) {
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      inbox_.throw_if_superseded();
      x = held_.at(l).module->forward(x);
    }
    return x;
  }

  // 1F1B over this pipeline's microbatches; returns the sum of the scaled
  // losses this worker computed (non-zero on last stages only).
  double one_f_one_b(int step) {
    const Pipeline& pipeline = plan_.pipelines[seat().pipeline];
    const int stages = static_cast<int>(pipeline.nodes.size()), position = seat().position;
    const bool first = position == 0, last = position == stages - 1;
    const int M = pipeline.microbatches, B = plan_.global_microbatches;
    const auto activation_shape = std::vector<std::int64_t>{o_.microbatch_size, o_.model.seq_len, o_.model.hidden};
    // Stage boundaries carry fp32 (under autocast too: the residual stream is fp32).
    const auto activation = torch::TensorOptions().dtype(torch::kFloat32).device(train_device(o_));
    Communicator& links = trainers();
    std::vector<torch::Tensor> inputs(M), outputs(M);
    std::vector<std::unique_ptr<PendingOp>> sends;
    double loss_sum = 0;
    auto forward = [&](int m) {
      torch::Tensor x;
      if (first) {
        x = microbatch_tokens(step, m, false);
      } else {
        auto buffer = torch::empty(activation_shape, activation);
        const double wait_start = now_ms();
        links.recv(buffer, rank_ - 1, 2 * m);
        wait_ms_ += now_ms() - wait_start;
        x = buffer.requires_grad_(true);
      }
      const double start = now_ms();
      auto y = forward_layers(x);
      if (last) {
        y = language_model_loss(y, microbatch_tokens(step, m, true)) / B;
        loss_sum += y.item<double>();
      }
      wait_for_device(o_);
      const double end = now_ms();
      record('F', m, start, end);
      compute_ms_ += end - start;
      if (!last) sends.push_back(links.send(y.detach().to(torch::kFloat32), rank_ + 1, 2 * m));
      if (m == 0 && rank_ == 0) inbox_.send({{"type", "started"}, {"generation", number_}, {"step", step}});
      inputs[m] = x;
      outputs[m] = y;
    };
    auto backward = [&](int m) {
      inbox_.throw_if_superseded();
      double start = now_ms();
      if (last) {
        outputs[m].backward();
      } else {
        auto buffer = torch::empty(activation_shape, activation);
        links.recv(buffer, rank_ + 1, 2 * m + 1);
        const double arrived = now_ms();
        wait_ms_ += arrived - start;
        start = arrived;
        outputs[m].backward(buffer);
      }
      add_microbatch(slots_);
      wait_for_device(o_);
      const double end = now_ms();
      record('B', m, start, end);
      compute_ms_ += end - start;
      if (!first) sends.push_back(links.send(inputs[m].grad(), rank_ - 1, 2 * m + 1));
      inputs[m] = outputs[m] = torch::Tensor();
    };
    for (const PipelinePass pass : oobleck::one_f_one_b(position, stages, M)) {
      pass.forward ? forward(pass.microbatch) : backward(pass.microbatch);
    }
    for (auto& w : sends) w->wait();
    return loss_sum;
  }

  // Sums each layer's gradient over its holders (the tied weight over the
  // holders of either end), in float64, then clips by the global norm: each
  // label's norm comes from its lowest-ranked holder, and everyone adds the
  // labels up in the same order (train_common.h).
  void synchronise_gradients() {
    std::map<std::vector<int>, std::vector<torch::Tensor>> by_set;
    for (const auto& s : slots_) {
      if (s.label != kTied) by_set[label_holders_.at(s.label)].push_back(s.sum);
    }
    torch::Tensor tied = tied_sum(slots_);
    if (tied.defined()) by_set[label_holders_.at(kTied)].push_back(tied);
    // Every group's all-reduce in flight at once: each group is its own
    // communicator, so none waits for another worker's other groups.
    struct InFlight {
      std::vector<torch::Tensor>* tensors;
      torch::Tensor flat;
      std::unique_ptr<PendingOp> op;
    };
    std::vector<InFlight> in_flight;
    for (auto& [set, tensors] : by_set) {
      if (set.size() < 2) continue;
      auto flat = torch::cat([&] {
        std::vector<torch::Tensor> views;
        for (auto& t : tensors) views.push_back(t.reshape({-1}));
        return views;
      }());
      auto op = gradient_group(set).start_allreduce_sum(flat);
      in_flight.push_back({&tensors, std::move(flat), std::move(op)});
    }
    for (auto& f : in_flight) {
      f.op->wait();
      std::int64_t offset = 0;
      for (auto& t : *f.tensors) {
        t.copy_(f.flat.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
    write_gradients(slots_, tied);
    auto norms = label_norms(slots_, o_.model.layers + 1,
                             [&](int label) { return label_holders_.at(label).front() == rank_; });
    // Each entry has one contributor: the sum is exact. (An owning tensor:
    // an abandoned all-reduce may still write into it.)
    auto reduced = torch::tensor(norms, torch::kFloat64);
    trainers().allreduce_sum(reduced);
    const auto total = reduced.accessor<double, 1>();
    for (std::size_t i = 0; i < norms.size(); ++i) norms[i] = total[static_cast<std::int64_t>(i)];
    clip_by_global_norm(slots_, norms, o_.clip_norm);
  }

  // The master asked for a checkpoint of the state after this step: each
  // layer is written by its first holder, into the folder the master names.
  void save_checkpoint(const Json& save) {
    const std::string folder = save.at("folder");
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      bool first_holder = true;
      for (int r = 0; r < rank_; ++r) first_holder = first_holder && !holds(seats_[r], l);
      if (!first_holder) continue;
      const std::string path = folder + "/layer-" + std::to_string(l) + ".pt";
      write_file_atomically(path, serialize_layer(held_.at(l)));
    }
    inbox_.send({{"type", "saved"}, {"generation", number_}, {"step", save.at("step")}});
  }

  // Identity and job.
  std::string node_, master_addr_, token_, bind_host_;
  Inbox inbox_;
  Profile profile_;
  TrainOptions o_;
  std::vector<std::uint16_t> tokens_;
  int store_port_ = 0;
  std::chrono::milliseconds comm_timeout_{120000};

  // The generation in hand.
  int number_ = 0;
  Plan plan_;
  std::vector<Seat> seats_;
  int rank_ = -1, world_size_ = 0, resume_step_ = 0, first_microbatch_ = 0;
  bool trainer_ = false, established_ = false;
  std::unique_ptr<Communicator> world_, trainers_group_;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;
  std::future<void> gradient_groups_;  // makes groups_: declared after it, so waited for before it goes
  std::map<int, std::vector<int>> label_holders_;

  // Training state: every layer held, at the state after applied_through_.
  std::map<int, HeldLayer> held_;
  std::vector<GradientSlot> slots_;  // this worker's layers' gradients
  int applied_through_ = -1;
  std::optional<int> pending_;  // the step reported ready and not yet settled

  // The last step's timeline.
  struct OpTime {
    char kind;
    int index;
    double start_ms, end_ms;
  };
  bool recording_ = false;
  std::vector<OpTime> ops_;
  double step_start_ms_ = 0, compute_ms_ = 0, wait_ms_ = 0, sync_ms_ = 0, optimizer_ms_ = 0;
};

}  // namespace

int run_worker(const NodeProcessOptions& options) {
  LiveWorker worker(options);
  return worker.run();
}

}  // namespace oobleck::executor
