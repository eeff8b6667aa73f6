// A live worker, one per GPU. It trains its shard of its stage of the
// current generation's plan (pipeline_step.h). A step is applied (AdamW) only once
// the master commits it, so every worker agrees on which steps happened.
// When the master announces a newer generation, the inbox abandons every
// socket in hand, which makes whatever the training thread is blocked in
// fail at once; the worker then settles the step in hand (applied if the
// master had committed it, discarded otherwise), takes its communicators
// (started as the generation arrived, while the step unwound), copies the
// layer states the planner assigns it and redoes the step on the same
// global batch: all of it, or, where the master lets its pipeline keep the
// gradient sums of passes it finished, what the lost pipelines did not
// (protocol::NewGeneration::kept_microbatches).
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>

#include "comm/store_guard.h"
#include "comm/store_server.h"
#include "early_groups.h"
#include "generation_groups.h"
#include "gradient_sync.h"
#include "inbox.h"
#include "kept_sums.h"
#include "model/host_memory.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/live.h"
#include "pipeline_step.h"
#include "snapshot_taker.h"
#include "state_copies.h"

namespace oobleck::executor {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class LiveWorker {
 public:
  explicit LiveWorker(const NodeProcessOptions& options)
      : node_(options.node),
        gpu_(options.gpu),
        master_addr_(options.master_addr),
        token_(options.token),
        inbox_(InboxIdentity{options.node, options.token, options.master_addr, options.gpu, options.control_port,
                             options.master_wait_ms}),
        taker_(options.token, options.snapshot_port) {}
  // The snapshot in hand reads held_, which goes before taker_ does.
  ~LiveWorker() { taker_.wait(); }
  LiveWorker(const LiveWorker&) = delete;
  LiveWorker& operator=(const LiveWorker&) = delete;

  int run() {
    configure(inbox_.welcome());
    inbox_.on_newer_generation([this](const protocol::NewGeneration& g) { return early_.start(g); });
    inbox_.start();
    protocol::NewGeneration generation = inbox_.next_generation(0);
    for (;;) {
      try {
        enter(generation);
        if (train()) {
          groups_->release(false);
          return kExitSuccess;
        }
      } catch (const Superseded&) {
      } catch (const std::exception& e) {
        if (!on_failure(e)) return kExitFailure;
      }
      step_.reset();
      groups_->release(true);
      generation = inbox_.next_generation(number_);
    }
  }

 private:
  // Whatever failed because the work was abandoned is no failure. A peer
  // failing under us: everyone connected to us must fail too, and the
  // master decides what comes next. Anything else is this node's own
  // failure (memory, disk, a corrupt state, a bug): it leaves the job,
  // which goes on without it (false).
  bool on_failure(const std::exception& e) {
    if (inbox_.superseded()) return true;
    inbox_.abandon();
    // (An all-reduce inside a backward pass may fail wrapped by autograd.)
    if (dynamic_cast<const CommunicationError*>(&e) || shard_sum_failed_) {
      shard_sum_failed_ = false;
      inbox_.send(protocol::CommunicationFailed{number_, std::string(e.what()).substr(0, 300)});
      return true;
    }
    if (const auto* missing = dynamic_cast<const SnapshotMissing*>(&e)) {
      inbox_.send(protocol::CommunicationFailed{number_, missing->what(), missing->step, missing->port});
      return true;
    }
    if (dynamic_cast<const KeptSumsChanged*>(&e)) {
      protocol::CommunicationFailed failed{number_, e.what()};
      failed.sums_lost = true;
      inbox_.send(failed);
      return true;
    }
    if (dynamic_cast<const CheckpointUnreadable*>(&e)) {
      // Every worker would fail alike: the master ends the run, naming the file.
      inbox_.send(protocol::RestoreFailed{number_, std::string(e.what()).substr(0, 500)});
      return true;
    }
    std::fprintf(stderr, "oobleck-run worker %s: cannot go on: %s\n", node_.c_str(), e.what());
    step_.reset();
    groups_->release(true);
    return false;
  }

  void configure(const protocol::Welcome& welcome) {
    profile_ = parse_profile(welcome.profile, welcome.profile_origin);
    apply_profile(o_, profile_, welcome.device);
    if (welcome.deterministic && o_.device == "cuda") use_deterministic_kernels();
    o_.cuda_device = gpu_;
    gpus_ = profile_.hardware.gpus_per_node;
    o_.steps = welcome.steps;
    o_.seed = welcome.seed;
    o_.learning_rate = welcome.learning_rate;
    snapshot_every_ = welcome.snapshot_every;
    torch::set_num_threads(welcome.threads);
    keep_freed_host_memory();
    torch::manual_seed(o_.seed);
    tokens_ = read_tokens(welcome.data);
    reach_store(welcome.store_port);
    settings_.timeout = std::chrono::milliseconds(welcome.comm_timeout_ms);
    // On one machine everything stays on loopback; across machines Gloo
    // binds to this host's own address.
    settings_.bind_host = master_addr_ == "127.0.0.1" || master_addr_ == "localhost" ? "127.0.0.1" : "";
    early_.set_base(settings_, store_port_);
  }

  // The master's rendezvous store at `port`, through a tunnel of this
  // worker's (store_guard.h): behind the master's guard when the master is
  // on another host; and always so that the master's death leaves the
  // store's clients waiting rather than ending this process.
  void reach_store(int port) {
    store_port_ = port;
    if (store_tunnel_) {
      store_tunnel_->retarget(port);
    } else {
      store_tunnel_ =
          std::make_unique<StoreTunnel>(master_addr_, port, is_loopback_address(master_addr_) ? "" : token_);
    }
    settings_.store_host = "127.0.0.1";
    settings_.store_port = store_tunnel_->port();
    early_.set_base(settings_, store_port_);
  }

  // ------------------------------------------------------------ generations

  void enter(const protocol::NewGeneration& g) {
    step_.reset();
    if (inbox_.store_port() != store_port_) reach_store(inbox_.store_port());  // a restarted master's
    number_ = g.generation;
    // Counted as making groups from before the generation is begun: one
    // newer than it, coming meanwhile, then starts no groups of its own
    // early, and its abandon, repeated, cuts whatever these open.
    const GenerationGroups::Making making;
    const bool started_early = inbox_.begin(number_);
    inbox_.throw_if_superseded();  // (a newer one came since: it is entered instead)
    const double start = std::min(now_ms(), inbox_.arrived_ms());
    inbox_.send(protocol::Recovering{number_});
    // The groups first, while a snapshot in hand is still being packed:
    // every member waits for the slowest to connect, and the packing (tens
    // of milliseconds on a loaded machine) need not come before.
    NextGeneration next;
    if (started_early) {
      EarlyGroups::Started early = early_.take(number_);
      next = std::move(early.next);
      groups_ = std::move(early.groups);
      groups_->wait_built();
    } else {
      next = read_generation(g, settings_);
      groups_ = std::make_unique<GenerationGroups>(inbox_);
      groups_->build(next.settings, shard_group(next), gradient_groups(next.seats, o_.model));
    }
    const double rebuilt = now_ms();
    taker_.wait();  // the layers change from here on
    if (g.discard_held) {
      // A rollback past f: whatever is held is newer than the state resumed.
      pending_.reset();
      held_.clear();
    }
    settle_step_in_hand(g.resume_step);  // (on the seat of the generation before)
    adopt(std::move(next), g);
    keep_passed_sums(g);
    keep_what_is_counted(g);
    const TensorShard shard = trainer_ ? my_shard() : TensorShard{};
    SumSends sums_sent = kept_sums_.post_sends(g, sums_place(), groups_->world(), o_.model);
    const std::int64_t copied_bytes = copy_layers(groups_->world(), g.copies, shard, held_, o_);
    if (trainer_) restore_missing_layers(g, shard);
    const std::int64_t sum_bytes = kept_sums_.take(g, sums_place(), groups_->world(), held_, o_.model, slots_, passed_);
    sums_sent.wait();
    if (trainer_) complete_seat(g.resume_step);
    applied_through_ = g.resume_step - 1;
    established_ = false;
    inbox_.send(protocol::Recovered{number_, rebuilt - start, now_ms() - rebuilt, copied_bytes + sum_bytes});
  }

  // The seat's layers that no copy brought, from the checkpoint or the
  // snapshot the generation names (a rollback, or this worker restarted).
  void restore_missing_layers(const protocol::NewGeneration& g, TensorShard shard) {
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      if (held_.count(l)) continue;
      if (!g.checkpoint_folder.empty()) {
        load_checkpoint_layers(g.checkpoint_folder, l, l + 1, shard, held_, o_, gpus_);
      } else if (g.snapshot_step >= 0) {
        load_snapshot_layers(g.snapshot, g.snapshot_step, l, l + 1, shard, held_, o_, token_);
      }
    }
  }

  // (Also on the inbox's reader thread: it reads only what configure() set.)
  [[nodiscard]] NextGeneration read_generation(const protocol::NewGeneration& g, const GroupSettings& base) const {
    NextGeneration next;
    next.plan = parse_plan(g.plan, "generation " + std::to_string(g.generation), profile_);
    const auto me = std::find(g.ranks.begin(), g.ranks.end(), node_);
    if (me == g.ranks.end())
      throw std::logic_error("generation " + std::to_string(g.generation) + " does not list " + node_);
    next.settings = base;
    next.settings.generation = g.generation;
    next.settings.rank = static_cast<int>(me - g.ranks.begin()) * gpus_ + gpu_;
    next.settings.world_size = static_cast<int>(g.ranks.size()) * gpus_;
    next.seats = recovery::worker_seats(next.plan, gpus_);
    next.settings.trainers = static_cast<int>(next.seats.size());
    return next;
  }

  void adopt(NextGeneration next, const protocol::NewGeneration& g) {
    plan_ = std::move(next.plan);
    seats_ = std::move(next.seats);
    settings_ = next.settings;
    trainer_ = settings_.rank < settings_.trainers;
    resume_step_ = g.resume_step;
  }

  // The sums of the resumed step's finished passes (kept_sums.h): the
  // seat before's, where a kept pipeline's seats change, set aside.
  void keep_passed_sums(const protocol::NewGeneration& g) {
    resume_listed_ = g.step_listed;
    resume_microbatches_ = g.step_microbatches;
    kept_sums_.set_aside(g, sums_place(), slots_, passed_);
  }

  [[nodiscard]] SumsPlace sums_place() const {
    return {settings_.rank, trainer_ ? &seat() : nullptr, node_, number_};
  }

  // Keep exactly what the master counts this node as holding, at the state
  // after step resume - 1; anything else is stale.
  void keep_what_is_counted(const protocol::NewGeneration& g) {
    std::erase_if(held_, [&](const auto& h) { return h.first < g.holds_begin || h.first >= g.holds_end; });
    const TensorShard counted{g.holds_degree, g.holds_shard};
    for (int l = g.holds_begin; l < g.holds_end; ++l) {
      if (!held_.count(l) || !(held_.at(l).shard == counted) ||
          (g.resume_step > 0 && applied_through_ != g.resume_step - 1)) {
        throw std::logic_error(node_ + " is counted as holding layer " + std::to_string(l) + " after step " +
                               std::to_string(g.resume_step - 1) + " but does not");
      }
    }
  }

  // Every layer of the seat, the ones nothing was trained on yet from
  // (seed, layer); and the step's machinery.
  void complete_seat(int resume) {
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      if (held_.count(l)) continue;
      if (resume > 0) {
        throw std::logic_error("generation " + std::to_string(number_) + " gives " + node_ + " layer " +
                               std::to_string(l) + " without a copy");
      }
      held_.emplace(l, initial_layer(o_, l, my_shard()));
    }
    for (int l = seat().layer_begin; l < seat().layer_end; ++l) {
      held_.at(l).module->set_shard_sum([this](torch::Tensor& t) {
        try {
          step_->sum_over_shards(t);
        } catch (const CommunicationError&) {
          shard_sum_failed_ = true;
          throw;
        }
      });
    }
    // (Kept sums are in place already: KeptSums::take.)
    if (passed_.step < 0) slots_ = gradient_slots(held_, seat().layer_begin, seat().layer_end, o_.model);
    gradients_ = plan_gradients(seats_, settings_.rank, slots_, o_.model);
    step_.emplace(o_, tokens_, inbox_, TrainerPlace{number_, &plan_, &seats_, settings_.rank}, *groups_, gradients_,
                  held_, slots_);
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
    taker_.wait();  // the snapshot of the step before reads what AdamW changes
    step_optimizers(held_, seat().layer_begin, seat().layer_end);
    applied_through_ = *pending_;
    pending_.reset();
    if (!established_) {
      established_ = true;
      std::erase_if(held_, [&](const auto& h) { return h.first < seat().layer_begin || h.first >= seat().layer_end; });
    }
  }

  [[nodiscard]] const recovery::WorkerSeat& seat() const { return seats_.at(static_cast<std::size_t>(settings_.rank)); }
  [[nodiscard]] TensorShard my_shard() const { return {seat().degree, seat().shard}; }

  // ------------------------------------------------------------ training

  // True when training is over; false when a new generation follows.
  bool train() {
    if (!trainer_) {
      const bool finished = inbox_.wait_generation_or_finish(number_);
      if (finished) inbox_.send(protocol::Done{number_, std::nullopt});
      return finished;
    }
    double optimizer_ms = 0;  // the step before's, in this generation
    for (int step = resume_step_; step < o_.steps; ++step) {
      // (The last step, warmed up, is timed.)
      const double loss = step_->run(step, step == o_.steps - 1, microbatches_of(step), passed_);
      pending_ = step;
      protocol::Ready ready{number_, step, loss, {}, step_->compute_ms(), optimizer_ms};
      if (seat().stage == 0 && seat().shard == 0) ready.samples = sample_ranges(passed_.microbatches);
      inbox_.send(ready);
      const protocol::Commit commit = inbox_.wait_commit(number_, step);
      const double applied = now_ms();
      apply_step();
      const double applied_until = now_ms();
      step_->record_optimizer(applied, applied_until);
      optimizer_ms = applied_until - applied;
      snapshot(commit);
      if (commit.finish) {
        taker_.wait();
        inbox_.send(protocol::Done{number_, step_->timeline()});
        return true;
      }
      if (commit.pause) return false;
    }
    throw std::logic_error("generation " + std::to_string(number_) + " resumes after the last step");
  }

  // The microbatches of the global batch this worker's pipeline trains in
  // `step`: the plan's share, or the resumed step's list.
  [[nodiscard]] std::vector<int> microbatches_of(int step) const {
    if (step == resume_step_ && resume_listed_) return resume_microbatches_;
    int first = 0;
    for (int p = 0; p < seat().pipeline; ++p) first += plan_.pipelines[static_cast<std::size_t>(p)].microbatches;
    std::vector<int> out(static_cast<std::size_t>(plan_.pipelines[static_cast<std::size_t>(seat().pipeline)].microbatches));
    std::iota(out.begin(), out.end(), first);
    return out;
  }

  // The samples of `microbatches`, as runs.
  [[nodiscard]] std::vector<protocol::SampleRange> sample_ranges(std::vector<int> microbatches) const {
    std::sort(microbatches.begin(), microbatches.end());
    std::vector<protocol::SampleRange> out;
    const int mb = o_.microbatch_size;
    for (int m : microbatches) {
      if (!out.empty() && out.back().first + out.back().count == m * mb) {
        out.back().count += mb;
      } else {
        out.push_back({m * mb, mb});
      }
    }
    return out;
  }

  // The state after the step just applied, in the background: into the
  // agent's memory every snapshot_every_ steps, and into the checkpoint
  // when the commit asks for one.
  void snapshot(const protocol::Commit& commit) {
    const bool to_memory = snapshot_every_ > 0 && (commit.step + 1) % snapshot_every_ == 0;
    if (!to_memory && !commit.save) return;
    SnapshotJob job;
    job.seal = {node_, gpu_, commit.step, seat().layer_begin, seat().layer_end, seat().degree, seat().shard};
    job.to_memory = to_memory;
    if (commit.save) {
      job.save = commit.save->folder;
      job.saved_layers = layers_saved_by(seats_, settings_.rank);
      job.on_saved = [this, generation = number_, step = commit.save->step] {
        inbox_.send(protocol::Saved{generation, step});
      };
    }
    taker_.start(std::move(job), held_);
  }

  // Identity and job.
  std::string node_;
  int gpu_ = 0, gpus_ = 1;  // this worker's GPU, and the node's count
  std::string master_addr_, token_;
  std::unique_ptr<StoreTunnel> store_tunnel_;  // declared before groups_: outlives their store clients
  int store_port_ = 0;                         // the master's
  Inbox inbox_;
  SnapshotTaker taker_;  // after the inbox: gone first, as its job may send
  int snapshot_every_ = 0;
  Profile profile_;
  TrainOptions o_;
  std::vector<std::uint16_t> tokens_;
  GroupSettings settings_;

  // The generation in hand.
  int number_ = 0;
  Plan plan_;
  std::vector<recovery::WorkerSeat> seats_;
  int resume_step_ = 0;
  bool resume_listed_ = false;              // the resumed step trains resume_microbatches_
  std::vector<int> resume_microbatches_;
  bool trainer_ = false, established_ = false;
  GradientPlan gradients_;
  bool shard_sum_failed_ = false;  // a tensor-parallel all-reduce failed
  std::unique_ptr<GenerationGroups> groups_ = std::make_unique<GenerationGroups>(inbox_);
  std::optional<PipelineStep> step_;
  // After groups_: gone first (it waits for groups still being made).
  EarlyGroups early_{inbox_, [this](const protocol::NewGeneration& g, const GroupSettings& base) {
                       return read_generation(g, base);
                     },
                     [this](const NextGeneration& next) { return gradient_groups(next.seats, o_.model); }};

  // Training state: every layer held, at the state after applied_through_.
  std::map<int, HeldLayer> held_;
  std::vector<GradientSlot> slots_;  // this worker's layers' gradients
  PassedSums passed_;                // what slots_ hold
  KeptSums kept_sums_;               // while they change seats
  int applied_through_ = -1;
  std::optional<int> pending_;  // the step reported ready and not yet settled
};

}  // namespace

int run_worker(const NodeProcessOptions& options) {
  LiveWorker worker(options);
  return worker.run();
}

}  // namespace oobleck::executor
