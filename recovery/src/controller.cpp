// The recovery rule (controller.h has it in prose). Every handler updates
// the books and returns what the driver must do, in order: a commit may be
// followed by the generation that takes in the nodes waiting to join.
#include "oobleck/recovery/controller.h"

#include <algorithm>

namespace oobleck::recovery {
namespace {

bool erase_from(std::vector<std::string>& list, const std::string& name) {
  const auto it = std::find(list.begin(), list.end(), name);
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

void append(Actions& to, Actions more) {
  to.insert(to.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

void Controller::NameList::push_back(const std::string& name) {
  names.push_back(name);
  ++occurrences[name];
}

bool Controller::NameList::erase(const std::string& name) {
  const auto it = occurrences.find(name);
  if (it == occurrences.end()) return false;
  if (--it->second == 0) occurrences.erase(it);
  names.erase(std::find(names.begin(), names.end(), name));
  return true;
}

void Controller::NameList::assign(std::vector<std::string> list) {
  names = std::move(list);
  occurrences.clear();
  for (const auto& name : names) ++occurrences[name];
}

void Controller::NameList::clear() {
  names.clear();
  occurrences.clear();
}

Controller::Controller(const CostModel& cost, const TemplateSet& templates, ControllerOptions options)
    : cost_(cost),
      templates_(&templates),
      options_(std::move(options)),
      committed_(options_.first_step - 1),
      start_source_(options_.first_source) {
  if (options_.resumed) restore(*options_.resumed);
}

void Controller::restore(const ControllerState& state) {
  generations_ = state.generations;
  if (state.current) {
    set_current(std::make_shared<const Generation>(*state.current));
    for (const auto& node : state.gone) {
      if (const auto it = rank_index_.find(node); it != rank_index_.end()) gone_[static_cast<std::size_t>(it->second)] = 1;
    }
  }
  ready_ = state.ready;
  established_ = state.established;
  committed_ = state.committed;
  if (state.base) base_ = std::make_shared<const Plan>(*state.base);
  base_generation_ = state.base_generation;
  start_source_ = state.start_source;
  lost_since_base_ = state.lost_since_base;
  added_since_base_.assign(state.added_since_base);
  pending_joins_.assign(state.pending_joins);
  saved_step_ = state.saved_step;
  rolled_back_from_ = state.rolled_back_from;
  dropped_ = state.dropped_for_speed;
}

ControllerState Controller::state() const {
  ControllerState s;
  s.generations = generations_;
  if (current_) {
    s.current = *current_;
    s.current->transfers.clear();
    for (std::size_t r = 0; r < ranked_.size(); ++r) {
      if (gone_[r]) s.gone.emplace_back(ranked_[r]);
    }
  }
  s.ready = ready_;
  s.established = established_;
  s.committed = committed_;
  if (base_) s.base = *base_;
  s.base_generation = base_generation_;
  s.start_source = start_source_;
  s.lost_since_base = lost_since_base_;
  s.added_since_base = added_since_base_.names;
  s.pending_joins = pending_joins_.names;
  s.saved_step = saved_step_;
  s.rolled_back_from = rolled_back_from_;
  s.dropped_for_speed = dropped_;
  return s;
}

Actions Controller::handle(const Event& event) {
  if (finished_) return {};
  return std::visit([this](const auto& e) { return on(e); }, event);
}

// ---------------------------------------------------------------- membership

std::vector<std::string> Controller::members() const {
  std::vector<std::string> out;
  out.reserve(ranked_.size() + pending_joins_.names.size());
  for (std::size_t r = 0; r < ranked_.size(); ++r) {
    if (!gone_[r]) out.emplace_back(ranked_[r]);
  }
  out.insert(out.end(), pending_joins_.names.begin(), pending_joins_.names.end());
  return out;
}

int Controller::rank_of(std::string_view node) const {
  const auto it = rank_index_.find(node);
  if (it == rank_index_.end()) return -1;
  return gone_[static_cast<std::size_t>(it->second)] ? -1 : it->second;
}

bool Controller::trains(std::string_view node) const {
  const int rank = rank_of(node);
  return rank >= 0 && rank < trainers_;
}

Actions Controller::on(const NodesLost& e) { return on(NodesChanged{e.nodes, {}, e.at_ms}); }
Actions Controller::on(const NodesJoined& e) { return on(NodesChanged{{}, e.nodes, e.at_ms}); }

Actions Controller::on(const NodesChanged& e) {
  bool interrupted = false;
  for (const auto& node : e.lost) interrupted = note_loss(node) || interrupted;
  for (const auto& node : e.joined) note_join(node);
  if (!current_) return try_start();
  if (interrupted) return recover(Cause::loss);
  if (deferred_commit_ && awaited_joins_.empty()) return try_commit(*deferred_commit_);
  return {};
}

bool Controller::note_loss(const std::string& node) {
  awaited_joins_.erase(node);
  if (pending_joins_.erase(node)) return false;
  const int rank = rank_of(node);
  if (rank < 0) return false;
  gone_[rank] = 1;
  // A node that joined since the base held nothing the base counts.
  if (!added_since_base_.erase(node)) lost_since_base_.push_back(node);
  return rank < trainers_ || !ready_;
}

void Controller::note_join(const std::string& node) {
  awaited_joins_.erase(node);
  if (!pending_joins_.contains(node) && rank_of(node) < 0) pending_joins_.push_back(node);
}

Actions Controller::on(const JoinAwaited& e) {
  if (!pending_joins_.contains(e.node) && rank_of(e.node) < 0) awaited_joins_.insert(e.node);
  return {};
}

// ---------------------------------------------------------------- steps

Actions Controller::on(const GenerationReady& e) {
  if (current_ && e.generation == current_->number && !ready_) rebase();
  return {};
}

// Every member has its layers at the state after the last committed step:
// the generation's plan is where the state is, and later recoveries plan
// from it.
// (Any loss before this point started a newer generation, so nothing is
// lost or added since this plan yet; a spare lost later is dropped then.)
void Controller::rebase() {
  ready_ = true;
  base_ = std::shared_ptr<const Plan>(current_, &current_->plan);
  base_generation_ = current_->number;
  lost_since_base_.clear();
  added_since_base_.clear();
}

Actions Controller::on(const StepReported& e) {
  if (!current_ || e.generation != current_->number || !trains(e.node)) return {};
  auto& reported = reports_[e.step];
  reported.insert(e.node);
  if (static_cast<int>(reported.size()) < trainers_) return {};
  return try_commit(e.step);
}

Actions Controller::on(const StepCompleted& e) {
  if (!current_ || e.generation != current_->number) return {};
  return try_commit(e.step);
}

Actions Controller::try_commit(int step) {
  if (!awaited_joins_.empty()) {
    deferred_commit_ = step;
    return {};
  }
  return commit(step);
}

Actions Controller::commit(int step) {
  deferred_commit_.reset();
  reports_.erase(step);
  committed_ = step;
  rolled_back_from_ = -1;
  restarts_without_progress_ = 0;
  communication_deadline_ms_.reset();
  // Every trainer trained the step, so every one had its state.
  if (!ready_) rebase();
  const bool establishes = !established_;
  established_ = true;
  const bool finish = options_.last_step >= 0 && step >= options_.last_step;
  Actions out{CommitStep{current_->number, step, establishes, finish}};
  if (finish) {
    finished_ = true;
    return out;
  }
  if (!pending_joins_.empty()) {
    append(out, recover(Cause::join));
  } else if (speeds_unweighed_) {
    append(out, weigh_speeds(step));
  }
  return out;
}

// ---------------------------------------------------------------- node speeds

Actions Controller::on(const NodeSpeedsMeasured& e) {
  if (e.speeds == speeds_) return {};
  speeds_ = e.speeds;
  speeds_unweighed_ = true;
  return {};
}

Actions Controller::weigh_speeds(int step) {
  // Only on a settled plan: a recovery under way (a spare lost, say) plans
  // from the base with what it lost, and is weighed at its own commit.
  if (!base_ || !lost_since_base_.empty() || !added_since_base_.empty() || !established_) return {};
  speeds_unweighed_ = false;
  const Plan& plan = current_->plan;
  const std::vector<std::string> nodes = ranked_nodes(plan);
  const NodeSpeeds speeds = speeds_of(nodes);
  SpeedChoice c;
  c.speeds = speeds;
  c.keep_ms = iteration_ms_at_speeds(cost_, plan, speeds);
  std::optional<Plan> split, placed;
  std::optional<Reconfiguration> moves;
  int horizon = std::max(1, options_.speeds_horizon_steps);
  if (options_.last_step >= 0) horizon = std::max(1, std::min(horizon, options_.last_step - step));
  // Pipelines that share nodes or interleave are kept, or lose their slow
  // nodes (drop) and take them back (readmit): neither split nor placed anew.
  const bool plain = plans_at_speeds();
  try {
    if (plain) split = split_at_speeds(cost_, plan, speeds);
  } catch (const NoPlanError&) {
  }
  // Re-plan: the pipelines' nodes placed anew within them, or (only to be
  // taken, so only where allowed) the plan made again at the speeds
  // (templates, pipelines, places: more may move), the better one with its
  // copies spread over the horizon.
  const auto offer_replan = [&](auto make) {
    try {
      Plan candidate = make();
      Reconfiguration copies = rearrangement(cost_, *base_, candidate);
      if (!placed || candidate.iteration_ms + copies.copy_ms / horizon <
                         (placed->iteration_ms + moves->copy_ms / horizon) * (1 - 1e-12)) {
        placed = std::move(candidate);
        moves = std::move(copies);
      }
    } catch (const NoPlanError&) {
    }
  };
  if (plain) offer_replan([&] { return apply_node_speeds(cost_, plan, speeds); });
  if (plain && options_.speeds_may_replan) {
    offer_replan([&] {
      std::vector<std::string> training;
      for (const auto& p : plan.pipelines) training.insert(training.end(), p.nodes.begin(), p.nodes.end());
      return instantiate_at_speeds(cost_, templates_for(static_cast<int>(training.size())), training,
                                   options_.fault_tolerance, plan.global_microbatches, speeds);
    });
  }
  c.resplit_ms = split ? split->iteration_ms : c.keep_ms;
  c.replan_ms = placed ? placed->iteration_ms : c.keep_ms;
  if (moves) {
    c.replan_copy_bytes = moves->copy_bytes;
    c.replan_copy_ms = moves->copy_ms;
  }
  // Drop: the pipelines' slow nodes leave them, as a loss would take them
  // (their layers copied from replicas), and stay as spares holding
  // nothing. Readmit: dropped nodes no longer slow come back, as joins.
  std::vector<std::string> slow, recovered;
  for (const auto& n : trainer_nodes(plan)) {  // (each once, where pipelines share it)
    if (const auto it = speeds.find(n); it != speeds.end() && it->second < 1) slow.push_back(n);
  }
  for (const auto& n : dropped_) {
    if (!speeds.count(n) && rank_of(n) >= 0) recovered.push_back(n);
  }
  const auto reconfigured = [&](const std::vector<std::string>& lost, const std::vector<std::string>& added,
                                  bool wanted) -> std::optional<Reconfiguration> {
    if (!wanted || !options_.speeds_may_drop) return std::nullopt;
    const int count = static_cast<int>(nodes.size() + added.size() - lost.size());
    try {
      return reconfigure(cost_, templates_for(std::max(1, count)), *base_, lost, added, at_speeds(added));
    } catch (const NoPlanError&) {
      return std::nullopt;
    }
  };
  std::optional<Reconfiguration> dropping = reconfigured(slow, {}, !slow.empty());
  // A node dropped by choice must not cost fault tolerance: the plan keeps
  // f + 1 pipelines, or as many as it had.
  // (Where pipelines share nodes, a loss takes all of a node's: nodes count.)
  const auto holders = [](const Plan& p) {
    return p.pipelines_per_node > 1 ? trainer_nodes(p).size() : p.pipelines.size();
  };
  const std::size_t keeps = std::min(static_cast<std::size_t>(options_.fault_tolerance) + 1, holders(plan));
  if (dropping && holders(dropping->plan) < keeps) dropping.reset();
  if (dropping) {
    dropping->plan.spare_nodes.insert(dropping->plan.spare_nodes.end(), slow.begin(), slow.end());
    c.dropped = slow;
    c.drop_ms = iteration_ms_at_speeds(cost_, dropping->plan, speeds);
    c.drop_copy_ms = dropping->copy_ms;
  }
  std::optional<Reconfiguration> readmitting = reconfigured(recovered, recovered, !recovered.empty());
  if (readmitting) {
    c.readmitted = recovered;
    c.readmit_ms = iteration_ms_at_speeds(cost_, readmitting->plan, speeds);
    c.readmit_copy_ms = readmitting->copy_ms;
  }
  const double worth = 1 - options_.speeds_min_gain;
  Milliseconds best = c.keep_ms;
  const auto consider = [&](bool possible, Milliseconds ms, SpeedChoice::Kind kind) {
    if (possible && ms < best * worth) {
      c.chosen = kind;
      best = ms;
    }
  };
  consider(split && options_.speeds_may_resplit, c.resplit_ms, SpeedChoice::Kind::resplit);
  consider(placed && options_.speeds_may_replan, c.replan_ms + c.replan_copy_ms / horizon, SpeedChoice::Kind::replan);
  consider(dropping.has_value(), c.drop_ms + c.drop_copy_ms / horizon, SpeedChoice::Kind::drop);
  consider(readmitting.has_value(), c.readmit_ms + c.readmit_copy_ms / horizon, SpeedChoice::Kind::readmit);
  Actions out{SpeedsWeighed{step, c}};
  if (c.chosen == SpeedChoice::Kind::keep) return out;
  Generation g;
  g.cause = Cause::speeds;
  g.resume_step = committed_ + 1;
  g.source = StateSource::replicas;
  g.base_generation = base_generation_;
  std::optional<Reconfiguration>* moved = nullptr;
  switch (c.chosen) {
    case SpeedChoice::Kind::resplit:
      g.plan = std::move(*split);
      break;
    case SpeedChoice::Kind::replan:
      moved = &moves;
      break;
    case SpeedChoice::Kind::drop:
      moved = &dropping;
      dropped_.insert(dropped_.end(), slow.begin(), slow.end());
      break;
    case SpeedChoice::Kind::readmit:
      moved = &readmitting;
      break;
    case SpeedChoice::Kind::keep:
      break;
  }
  if (moved) {
    g.plan = std::move((*moved)->plan);
    g.transfers = std::move((*moved)->transfers);
    g.copy_bytes = (*moved)->copy_bytes;
    g.copy_ms = (*moved)->copy_ms;
  }
  g.speed_choice = std::move(c);
  append(out, begin(std::move(g)));
  return out;
}

// ---------------------------------------------------------------- communication

Actions Controller::on(const CommunicationFailed& e) {
  if (current_ && e.generation == current_->number && !communication_deadline_ms_) {
    communication_deadline_ms_ = e.at_ms + options_.communication_grace_ms;
  }
  return {};
}

Actions Controller::on(const Timer& e) {
  if (!communication_deadline_ms_ || e.at_ms < *communication_deadline_ms_) return {};
  communication_deadline_ms_.reset();
  if (++restarts_without_progress_ > options_.restarts_without_progress) {
    finished_ = true;
    return {GiveUp{GiveUp::Reason::no_progress,
                   "training makes no progress: its collectives failed " + std::to_string(restarts_without_progress_) +
                       " times in a row with no node lost",
                   committed_, lost_since_base_, added_since_base_.names}};
  }
  return recover(Cause::communication);
}

// ---------------------------------------------------------------- restarts

// The restarted process holds what it held after the committed step, so
// the generation's layout of the state stands: only the step in flight is
// lost. Before the generation committed a step its members may still be
// receiving copies, which the restarted one lost: that is the driver's to
// treat as a loss.
Actions Controller::on(const WorkerRestarted& e) {
  if (!current_ || !established_ || rank_of(e.node) < 0) return {};
  reports_.clear();
  deferred_commit_.reset();
  communication_deadline_ms_.reset();
  return {RestartInPlace{current_->number, committed_ + 1, e.node}};
}

// ---------------------------------------------------------------- a restarted master

// Whatever was in flight is moot: the members start over where the state
// is, as a recovery from the base would (or, with no base, as a loss there
// would: from the start's source, choosing again past f).
Actions Controller::on(const MasterRestarted& e) {
  for (const auto& node : e.lost) note_loss(node);
  if (!current_) return try_start();
  return recover(Cause::master_restart);
}

bool Controller::counts_state_on(std::string_view node) const {
  if (!base_ || std::find(lost_since_base_.begin(), lost_since_base_.end(), node) != lost_since_base_.end()) return false;
  return std::any_of(base_->pipelines.begin(), base_->pipelines.end(), [&](const Pipeline& p) {
    return std::find(p.nodes.begin(), p.nodes.end(), node) != p.nodes.end();
  });
}

// ---------------------------------------------------------------- saves

Actions Controller::on(const StateSaved& e) {
  if (!saved_step_ || e.step > *saved_step_) saved_step_ = e.step;
  return {};
}

Actions Controller::on(const SnapshotsHeld& e) {
  snapshots_ = e.snapshots;
  return {};
}

// The newest state `alive` can restore completely: a snapshot held by
// them (their own copies first, then with mirrors), else the newest save.
std::optional<Controller::Restorable> Controller::newest_restorable(const std::vector<std::string>& alive) const {
  std::optional<Restorable> best;
  if (saved_step_) best = Restorable{*saved_step_, StateSource::checkpoint};
  for (const auto& snapshot : snapshots_) {
    if (snapshot.step > committed_ || (best && snapshot.step < best->step)) continue;
    for (const bool with_mirrors : {false, true}) {
      if (!choose_pieces(snapshot, cost_.layers(), alive, with_mirrors)) continue;
      const StateSource source = with_mirrors ? StateSource::mirror : StateSource::memory;
      // (At an equal step, the checkpoint comes last.)
      if (!best || snapshot.step > best->step || best->source == StateSource::checkpoint ||
          (best->source == StateSource::mirror && !with_mirrors)) {
        best = Restorable{snapshot.step, source};
      }
      break;
    }
  }
  return best;
}

bool Controller::roll_back() {
  rollback_source_ = StateSource::checkpoint;
  if (!options_.saves_reported) return true;
  if (committed_ < 0) return true;  // nothing trained: the seed is the state
  const auto restorable = newest_restorable(members());
  if (!restorable) return false;
  rollback_source_ = restorable->source;
  rolled_back_from_ = std::max(rolled_back_from_, committed_);
  committed_ = restorable->step;
  return true;
}

bool Controller::can_roll_back_losing(const std::vector<std::string>& nodes) const {
  if (!options_.saves_reported || committed_ < 0) return true;
  std::vector<std::string> left = members();
  for (const auto& node : nodes) erase_from(left, node);
  return newest_restorable(left).has_value();
}

// ---------------------------------------------------------------- planning

const TemplateSet& Controller::templates_for(int nodes) {
  // Pipelines sharing nodes have their one template on part of a node,
  // whatever the node count.
  if (templates_->max_nodes < nodes && cost_.pipelines_per_node() == 1) {
    grown_ = build_templates(cost_, std::max(nodes, 2 * templates_->max_nodes));
    templates_ = &grown_;
  }
  return *templates_;
}

// A fresh plan for `nodes`: f+1 pipelines, or as many as they can form
// (as a recovery keeps), so that a job short of nodes trains with less
// redundancy rather than not at all.
Plan Controller::plan_for(const std::vector<std::string>& nodes) {
  if (nodes.empty()) throw NoPlanError("no node left");
  const TemplateSet& templates = templates_for(static_cast<int>(nodes.size()));
  const PipelineTemplate* shared = nullptr;
  if (cost_.pipelines_per_node() > 1) {
    if (templates.templates.empty()) throw NoPlanError("no pipeline template fits on part of a node");
    shared = &templates.templates.front();
  }
  for (int f = options_.fault_tolerance;; --f) {
    try {
      Plan plan = shared ? instantiate_sharing_nodes(cost_, *shared, nodes, f, options_.global_microbatches)
                         : instantiate(cost_, templates, nodes, f, options_.global_microbatches);
      if (plan.pipelines.empty()) throw NoPlanError("too few nodes left for any pipeline template");
      plan.fault_tolerance = options_.fault_tolerance;  // what later recoveries aim for again
      return plan;
    } catch (const NoPlanError&) {
      if (f == 0) throw;
    }
  }
}

Actions Controller::try_start() {
  if (options_.initial_plan && generations_ == 0) {
    for (const auto& node : ranked_nodes(*options_.initial_plan)) {
      if (!pending_joins_.contains(node)) return {};  // not all here yet
    }
    Generation g;
    g.cause = Cause::start;
    g.plan = *options_.initial_plan;
    g.resume_step = committed_ + 1;
    g.source = start_source_;
    return begin(std::move(g));
  }
  return start_afresh(generations_ == 0 ? Cause::start : Cause::nodes_back, start_source_, false);
}

Actions Controller::recover(Cause cause) {
  if (!base_) {
    // A rollback not ready yet reads a snapshot from the nodes it had: with
    // some of them lost, or a piece found missing (a communication failure),
    // choose again among what the others hold.
    if (start_source_ == StateSource::memory || start_source_ == StateSource::mirror) {
      if (!roll_back()) return give_up("past f, and no snapshot or checkpoint the nodes left can restore");
      return start_afresh(cause, rollback_source_, true);
    }
    return start_afresh(cause, start_source_, false);
  }
  for (const auto& node : pending_joins_.names) added_since_base_.push_back(node);
  const int survivors =
      node_count(*base_) + static_cast<int>(added_since_base_.names.size()) - static_cast<int>(lost_since_base_.size());
  Reconfiguration r;
  try {
    r = reconfigure(cost_, templates_for(std::max(1, survivors)), *base_, lost_since_base_, added_since_base_.names,
                    at_speeds(added_since_base_.names));
  } catch (const NoPlanError& e) {
    if (options_.when_no_plan == ControllerOptions::WhenNoPlan::give_up || !roll_back()) {
      return give_up(e.what());
    }
    // (Reported saves, nothing committed yet: the seed is the state.)
    return start_afresh(cause, options_.saves_reported && committed_ < 0 ? StateSource::initial : rollback_source_,
                        true);
  }
  Generation g;
  g.cause = cause;
  g.plan = std::move(r.plan);
  g.resume_step = committed_ + 1;
  g.source = StateSource::replicas;
  g.base_generation = base_generation_;
  g.transfers = std::move(r.transfers);
  g.copy_bytes = r.copy_bytes;
  g.copy_ms = r.copy_ms;
  return begin(std::move(g));
}

Actions Controller::start_afresh(Cause cause, StateSource source, bool rolled_back) {
  if (cause == Cause::start || cause == Cause::nodes_back) {
    // The job (re)starts on the nodes present: nothing was lost or added.
    lost_since_base_.clear();
    added_since_base_.clear();
  } else {
    for (const auto& node : pending_joins_.names) {
      if (!added_since_base_.contains(node)) added_since_base_.push_back(node);
    }
  }
  const std::vector<std::string> nodes = members();
  base_.reset();
  base_generation_ = 0;
  start_source_ = source;
  Plan plan;
  try {
    plan = plan_for(nodes);
  } catch (const NoPlanError& e) {
    return no_plan(e.what(), rolled_back);
  }
  Generation g;
  g.cause = cause;
  g.plan = std::move(plan);
  g.resume_step = committed_ + 1;
  g.source = source;
  g.rolled_back = rolled_back;
  return begin(std::move(g));
}

Actions Controller::give_up(const std::string& why) {
  finished_ = true;
  return {GiveUp{GiveUp::Reason::no_plan, why, committed_, lost_since_base_, added_since_base_.names}};
}

Actions Controller::begin(Generation g) {
  g.number = ++generations_;
  if (rolled_back_from_ >= 0) {
    g.rolled_back = true;
    g.rolled_back_from = rolled_back_from_;
  }
  g.lost = lost_since_base_;
  g.added = added_since_base_.names;
  set_current(std::make_shared<const Generation>(std::move(g)));
  // Dropped nodes that a plan took back into its pipelines (or lost) are
  // no longer kept out.
  const auto& spares = current_->plan.spare_nodes;
  std::erase_if(dropped_, [&](const std::string& n) { return std::find(spares.begin(), spares.end(), n) == spares.end(); });
  // The nodes that waited to join are in the new plan now (a recovery takes
  // them all in), but for those beside a given initial plan.
  std::erase_if(pending_joins_.names, [&](const std::string& node) { return rank_of(node) >= 0; });
  pending_joins_.assign(std::move(pending_joins_.names));
  established_ = ready_ = false;
  reports_.clear();
  deferred_commit_.reset();
  communication_deadline_ms_.reset();
  // A plan made without the speeds in view is weighed at its first commit.
  if (current_->cause != Cause::speeds && !speeds_.empty()) speeds_unweighed_ = true;
  return {StartGeneration{current_, current_->source == StateSource::replicas ? base_ : nullptr}};
}

void Controller::set_current(std::shared_ptr<const Generation> generation) {
  current_ = std::move(generation);
  const Plan& plan = current_->plan;
  ranked_.clear();
  rank_index_.clear();
  // Each node once, where pipelines share it.
  const auto rank = [this](const std::string& node) {
    if (rank_index_.emplace(node, static_cast<int>(ranked_.size())).second) ranked_.push_back(node);
  };
  for (const auto& p : plan.pipelines) std::for_each(p.nodes.begin(), p.nodes.end(), rank);
  trainers_ = static_cast<int>(ranked_.size());
  std::for_each(plan.spare_nodes.begin(), plan.spare_nodes.end(), rank);
  gone_.assign(ranked_.size(), 0);
}

Actions Controller::no_plan(const std::string& why, bool rolled_back) {
  if (options_.when_no_plan == ControllerOptions::WhenNoPlan::give_up) return give_up(why);
  if (committed_ >= 0 && !roll_back()) return give_up(why);
  // Down until enough nodes join: they start from the checkpoint (or from
  // the seed, when nothing was ever trained). The members wait with them.
  pending_joins_.assign(members());
  ranked_.clear();
  rank_index_.clear();
  gone_.clear();
  trainers_ = 0;
  current_.reset();
  established_ = ready_ = false;
  if (committed_ >= 0) start_source_ = rollback_source_;
  return {WaitForNodes{why, rolled_back}};
}

// ---------------------------------------------------------------- queries

NodeSpeeds Controller::speeds_of(const std::vector<std::string>& nodes) const {
  NodeSpeeds out;
  for (const auto& [node, factor] : speeds_) {
    if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) {
      out[node] = std::clamp(factor, kMinNodeSpeed, kMaxNodeSpeed);
    }
  }
  return out;
}

bool Controller::plans_at_speeds() const {
  const auto interleaved = [](const Pipeline& p) { return p.interleave > 1; };
  return cost_.pipelines_per_node() == 1 && cost_.interleave() == 1 && base_ && base_->pipelines_per_node == 1 &&
         std::none_of(base_->pipelines.begin(), base_->pipelines.end(), interleaved);
}

ReconfigureOptions Controller::at_speeds(const std::vector<std::string>& added) const {
  if (!plans_at_speeds()) return {};
  std::vector<std::string> nodes = ranked_nodes(*base_);
  nodes.insert(nodes.end(), added.begin(), added.end());
  ReconfigureOptions options;
  options.node_speeds = speeds_of(nodes);
  return options;
}

bool Controller::commit_wanted() const { return current_ && !finished_ && !pending_joins_.empty(); }

bool Controller::survives_losing(const std::vector<std::string>& nodes) {
  std::vector<std::string> lost = lost_since_base_, added = added_since_base_.names;
  added.insert(added.end(), pending_joins_.names.begin(), pending_joins_.names.end());
  std::vector<std::string> left = members();
  for (const auto& node : nodes) {
    if (!erase_from(left, node)) continue;
    if (!erase_from(added, node)) lost.push_back(node);
  }
  try {
    if (!base_) return !plan_for(left).pipelines.empty();
    const int survivors = node_count(*base_) + static_cast<int>(added.size()) - static_cast<int>(lost.size());
    (void)reconfigure(cost_, templates_for(std::max(1, survivors)), *base_, lost, added);
    return true;
  } catch (const NoPlanError&) {
    return false;
  }
}

}  // namespace oobleck::recovery
