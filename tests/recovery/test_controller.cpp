// The recovery controller without processes: each row is a sequence of
// events and the actions expected for it, in order. The cluster: six
// one-GPU nodes whose memory holds at most three of the model's six layers,
// so every pipeline needs at least two nodes; f = 2 gives three 2-node
// pipelines.
#include <doctest/doctest.h>

#include <sstream>

#include "oobleck/recovery/controller.h"
#include "reference.h"

namespace {

using namespace oobleck;
using namespace oobleck::recovery;

constexpr Bytes kLayerState = 1'000'000'000;

struct Cluster {
  Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, kLayerState, 1'000'000, 3 * kLayerState + 100'000'000);
  CostModel cost{profile, 4};
  TemplateSet templates = build_templates(cost, 8);
  std::vector<std::string> nodes(int count) const {
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) out.push_back("node" + std::to_string(i));
    return out;
  }
  Plan plan(int count, int f) const { return instantiate(cost, templates, nodes(count), f, 12); }
  // Six nodes, f = 2, 12 microbatches: three 2-node pipelines.
  ControllerOptions six_nodes(int last_step = -1) const {
    ControllerOptions options;
    options.fault_tolerance = 2;
    options.global_microbatches = 12;
    options.initial_plan = plan(6, 2);
    options.last_step = last_step;
    return options;
  }
};

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return "[" + out + "]";
}

std::string describe(const Action& action) {
  std::ostringstream out;
  if (const auto* s = std::get_if<StartGeneration>(&action)) {
    const Generation& g = *s->generation;
    out << "start g" << g.number << " " << cause_name(g.cause) << " from " << source_name(g.source)
        << (g.rolled_back ? " rolled back" : "");
    if (g.rolled_back_from >= 0) out << " from step " << g.rolled_back_from;
    out << " at step " << g.resume_step;
    if (!g.lost.empty()) out << " lost " << list(g.lost);
    if (!g.added.empty()) out << " added " << list(g.added);
    out << ":";
    for (const auto& p : g.plan.pipelines) out << " " << list(p.nodes);
    if (!g.plan.spare_nodes.empty()) out << " spare " << list(g.plan.spare_nodes);
    if (!g.transfers.empty()) out << " copies " << g.transfers.size();
    if (g.cause == Cause::speeds) {
      out << " microbatches";
      for (const auto& p : g.plan.pipelines) out << " " << p.microbatches;
    }
  } else if (const auto* weighed = std::get_if<SpeedsWeighed>(&action)) {
    out << "weighed at step " << weighed->step << ": " << speed_choice_name(weighed->choice.chosen);
  } else if (const auto* c = std::get_if<CommitStep>(&action)) {
    out << "commit g" << c->generation << " step " << c->step << (c->establishes ? " establishes" : "")
        << (c->finish ? " finish" : "");
  } else if (const auto* w = std::get_if<WaitForNodes>(&action)) {
    out << "wait" << (w->rolled_back ? " rolled back" : "");
  } else if (const auto* r = std::get_if<RestartInPlace>(&action)) {
    out << "restart g" << r->generation << " in place at step " << r->resume_step << " for " << r->node;
  } else if (const auto* g = std::get_if<GiveUp>(&action)) {
    out << "give up " << (g->reason == GiveUp::Reason::no_plan ? "no plan" : "no progress") << " after step "
        << g->committed_step;
  }
  return out.str();
}

// Shorthands for the tables.
Event lost(std::vector<std::string> nodes, Milliseconds at = 0) { return NodesLost{std::move(nodes), at}; }
Event joined(std::vector<std::string> nodes, Milliseconds at = 0) { return NodesJoined{std::move(nodes), at}; }
Event ready(int generation) { return GenerationReady{generation, 0}; }
Event completed(int generation, int step) { return StepCompleted{generation, step, 0}; }
Event reported(int generation, int step, std::string node) {
  return StepReported{generation, step, std::move(node), 0};
}

struct Row {
  const char* name;
  std::vector<Event> events;
  std::vector<std::string> expected;  // "event index: action", in order
};

std::vector<std::string> play(Controller& controller, const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    for (const auto& action : controller.handle(events[i])) out.push_back(std::to_string(i) + ": " + describe(action));
  }
  return out;
}

void check_rows(const Cluster& cluster, const ControllerOptions& options, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    CAPTURE(row.name);
    Controller controller(cluster.cost, cluster.templates, options);
    const auto got = play(controller, row.events);
    std::string shown;
    for (const auto& line : got) shown += "  \"" + line + "\",\n";
    INFO("actions:\n" << shown);
    CHECK(got == row.expected);
  }
}

// A live run's: f = 1, and past f back to what was saved.
ControllerOptions live_past_f_options() {
  ControllerOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 12;
  options.when_no_plan = ControllerOptions::WhenNoPlan::restart_from_checkpoint;
  options.saves_reported = true;
  return options;
}

}  // namespace

TEST_CASE("controller, live run: starts, losses, joins, recoveries interrupted, no plan") {
  const Cluster cluster;
  const ControllerOptions options = cluster.six_nodes(20);
  const auto all = cluster.nodes(6);
  // Generation 1 trains, commits step 0, establishes.
  const std::vector<Event> started = {joined(all), ready(1), completed(1, 0)};
  const std::vector<std::string> start_actions = {
      "0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]",
      "2: commit g1 step 0 establishes"};
  auto with_start = [&](std::vector<Event> more, std::vector<std::string> expected) {
    std::vector<Event> events = started;
    events.insert(events.end(), more.begin(), more.end());
    std::vector<std::string> out = start_actions;
    out.insert(out.end(), expected.begin(), expected.end());
    return std::pair{events, out};
  };
  std::vector<Row> rows;
  auto add = [&](const char* name, std::vector<Event> more, std::vector<std::string> expected) {
    auto [events, out] = with_start(std::move(more), std::move(expected));
    rows.push_back({name, std::move(events), std::move(out)});
  };
  rows.push_back({"the first generation waits for every node of the plan",
                  {joined({"node0", "node1", "node2"}), joined({"node3", "node4"}), joined({"node5"})},
                  {"2: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]"}});
  add("a loss: the survivors re-plan from the base, layers copied from replicas",
      {lost({"node1"}), ready(2), completed(2, 1), completed(2, 2)},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       "5: commit g2 step 1 establishes", "6: commit g2 step 2"});
  add("a loss during a recovery: planned from the base with both losses",
      {lost({"node1"}), lost({"node2"}), ready(3), completed(3, 1)},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       // From the base, node0 and node3 hold the two halves: no copy. (The
       // uncommitted plan of g2 would have counted node2 as holding them.)
       "4: start g3 loss from replicas at step 1 lost [node1,node2]: [node4,node5] [node0,node3]",
       "6: commit g3 step 1 establishes"});
  add("a loss after the recovery committed: planned from the new base",
      {lost({"node1"}), ready(2), completed(2, 1), lost({"node2"})},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       "5: commit g2 step 1 establishes",
       "6: start g3 loss from replicas at step 2 lost [node2]: [node0,node5] [node4,node3] copies 4"});
  add("a join waits for the next commit, then enters a generation", {joined({"node6"}), completed(1, 1)},
      {"4: commit g1 step 1",
       "4: start g2 join from replicas at step 2 added [node6]: [node4,node6,node5] [node0,node1] [node2,node3] "
       "copies 2"});
  add("a join during a recovery is taken in at the recovery's first commit",
      {lost({"node1"}), joined({"node6"}), ready(2), completed(2, 1)},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       "6: commit g2 step 1 establishes",
       "6: start g3 join from replicas at step 2 added [node6]: [node2,node3] [node0,node5] [node4,node6] copies 7"});
  add("a join, then a loss before the commit: one recovery takes both", {joined({"node6"}), lost({"node1"})},
      {"4: start g2 loss from replicas at step 1 lost [node1] added [node6]: [node2,node3] [node4,node5] [node0,node6] "
       "copies 3"});
  add("losses and joins seen separately: the losses recover, the joins wait for the next commit",
      {lost({"node1", "node3"}, 5), joined({"node6", "node7"}, 5), ready(2), completed(2, 1)},
      {"3: start g2 loss from replicas at step 1 lost [node1,node3]: [node4,node5] [node0,node2] copies 3",
       "6: commit g2 step 1 establishes",
       "6: start g3 join from replicas at step 2 added [node6,node7]: [node4,node5] [node0,node2] [node6,node7] "
       "copies 6"});
  add("losses and joins in the same millisecond: one recovery, the losses first, then the joins",
      {NodesChanged{{"node1", "node3", "node6"}, {"node6", "node7"}, 5}},
      {"3: start g2 loss from replicas at step 1 lost [node1,node3] added [node6,node7]: [node4,node5] [node0,node6] "
       "[node2,node7] copies 6"});
  add("a loss once the recovery is ready (its copies done), before its first commit: planned from its plan",
      {lost({"node1"}), ready(2), lost({"node2"})},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       "5: start g3 loss from replicas at step 1 lost [node2]: [node0,node5] [node4,node3] copies 4"});
  add("a loss that leaves a layer without any replica: give up, naming the last committed step",
      {lost({"node0", "node2", "node4"})}, {"3: give up no plan after step 0"});
  add("too few nodes for any pipeline: give up", {lost({"node0", "node1", "node2", "node3", "node4"})},
      {"3: give up no plan after step 0"});
  add("a node unknown to the job, or lost twice, changes nothing", {lost({"node9"}), lost({"node1"}), lost({"node1"})},
      {"4: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1"});
  add("reports of an older generation are ignored; a step commits once every trainer reported it",
      {lost({"node1"}), completed(1, 1), reported(2, 1, "node0"), reported(2, 1, "node2"), reported(2, 1, "node3"),
       reported(2, 1, "node4"), reported(2, 1, "node4"), reported(2, 1, "node5")},
      {"3: start g2 loss from replicas at step 1 lost [node1]: [node0,node4,node5] [node2,node3] copies 1",
       "10: commit g2 step 1 establishes"});
  add("a scripted join holds the step's commit until the node is there",
      {JoinAwaited{"node6"}, completed(1, 1), joined({"node6"})},
      {"5: commit g1 step 1",
       "5: start g2 join from replicas at step 2 added [node6]: [node4,node6,node5] [node0,node1] [node2,node3] "
       "copies 2"});
  add("an awaited join that dies before it arrives releases the commit",
      {JoinAwaited{"node6"}, completed(1, 1), lost({"node6"})}, {"5: commit g1 step 1"});
  add("the last step's commit finishes; nothing happens after", {completed(1, 20), lost({"node1"})},
      {"3: commit g1 step 20 finish"});
  check_rows(cluster, options, rows);
}

TEST_CASE("controller: until the first generation is ready the state is the seed's, so a loss plans afresh") {
  const Cluster cluster;
  ControllerOptions options = cluster.six_nodes();
  check_rows(cluster, options,
             {{"a loss during the first step",
               {joined(cluster.nodes(6)), lost({"node1"}), lost({"node2"}), completed(3, 0)},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]",
                "1: start g2 loss from initial at step 0 lost [node1]: [node0,node2,node3] [node4,node5]",
                "2: start g3 loss from initial at step 0 lost [node1,node2]: [node0,node3] [node4,node5]",
                "3: commit g3 step 0 establishes"}}});
  options.first_source = StateSource::checkpoint;
  options.first_step = 7;
  check_rows(cluster, options,
             {{"resumed from a checkpoint, until the first commit",
               {joined(cluster.nodes(6)), lost({"node5"}), completed(2, 7), lost({"node4"})},
               {"0: start g1 start from checkpoint at step 7: [node0,node1] [node2,node3] [node4,node5]",
                "1: start g2 loss from checkpoint at step 7 lost [node5]: [node0,node1,node2] [node3,node4]",
                "2: commit g2 step 7 establishes",
                "3: start g3 loss from replicas at step 8 lost [node4]: [node0,node1] [node3,node2] copies 4"}}});
}

TEST_CASE("controller: spares, communication failures and the timer") {
  const Cluster cluster;
  ControllerOptions options = cluster.six_nodes();
  options.initial_plan->spare_nodes = {"node6"};  // a node the plan leaves idle
  options.communication_grace_ms = 100;
  options.restarts_without_progress = 1;
  const std::vector<Event> started = {joined(cluster.nodes(7)), ready(1), completed(1, 0)};
  const std::vector<std::string> start_actions = {
      "0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5] spare [node6]",
      "2: commit g1 step 0 establishes"};
  auto row = [&](const char* name, std::vector<Event> more, std::vector<std::string> expected) {
    Row r{name, started, start_actions};
    r.events.insert(r.events.end(), more.begin(), more.end());
    r.expected.insert(r.expected.end(), expected.begin(), expected.end());
    return r;
  };
  check_rows(
      cluster, options,
      {row("a spare lost while training is dropped, and stays lost for the next recovery",
           {lost({"node6"}), completed(1, 1), lost({"node1"})},
           {"4: commit g1 step 1",
            "5: start g2 loss from replicas at step 2 lost [node6,node1]: [node0,node4,node5] [node2,node3] copies 1"}),
       row("a spare lost while a recovery is under way starts it over: it takes part in the state copies",
           {lost({"node1"}), lost({"node6"})},
           {"3: start g2 loss from replicas at step 1 lost [node1]: [node2,node3] [node4,node5] [node0,node6] copies 3",
            "4: start g3 loss from replicas at step 1 lost [node1,node6]: [node0,node4,node5] [node2,node3] copies 1"}),
       row("a communication failure with no loss: after the grace time the same members start over, then give up",
           {CommunicationFailed{1, 1000}, Timer{1050}, Timer{1100}, CommunicationFailed{2, 2000}, Timer{2100}},
           // (The planner puts the idle node to work when it plans again.)
           {"5: start g2 communication from replicas at step 1: [node4,node6,node5] [node0,node1] [node2,node3] "
            "copies 2",
            "7: give up no progress after step 0"}),
       row("a loss found within the grace time makes the recovery; the timer then does nothing",
           {CommunicationFailed{1, 1000}, lost({"node3"}, 1040), Timer{1100}},
           {"4: start g2 loss from replicas at step 1 lost [node3]: [node0,node1] [node4,node5] [node2,node6] "
            "copies 3"})});
}

TEST_CASE("controller, simulator: restarts from the checkpoint and waits when no plan exists") {
  const Cluster cluster;
  ControllerOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 12;
  options.when_no_plan = ControllerOptions::WhenNoPlan::restart_from_checkpoint;
  check_rows(
      cluster, options,
      {{"planned for the nodes present; too few: wait, then start when enough are back",
        {joined({"node0"}), joined({"node1", "node2", "node3"}), ready(1), completed(1, 4),
         lost({"node0", "node1", "node2"}), joined({"node4"}), ready(2)},
        {"0: wait", "1: start g1 start from initial at step 0: [node0,node1] [node2,node3]",
         "3: commit g1 step 4 establishes", "4: wait rolled back",
         // Two nodes make one pipeline: less redundancy rather than none at all.
         "5: start g2 nodes_back from checkpoint at step 5: [node3,node4]"}},
       {"the replicas no longer cover a layer: restart from the checkpoint on the nodes present",
        {joined(cluster.nodes(4)), ready(1), completed(1, 0), lost({"node0", "node2"})},
        {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]", "2: commit g1 step 0 establishes",
         "3: start g2 loss from checkpoint rolled back at step 1 lost [node0,node2]: [node1,node3]"}}});
}

TEST_CASE("controller, live run: past f, back to the newest save; without one, give up") {
  const Cluster cluster;
  const ControllerOptions options = live_past_f_options();
  const Event saved0 = StateSaved{0, 0}, saved1 = StateSaved{1, 0};
  check_rows(
      cluster, options,
      {{"the replicas no longer cover a layer: the steps after the newest save are trained again",
        {joined(cluster.nodes(4)), ready(1), completed(1, 0), saved0, completed(1, 1), completed(1, 2),
         lost({"node0", "node2"})},
        {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]", "2: commit g1 step 0 establishes",
         "4: commit g1 step 1", "5: commit g1 step 2",
         "6: start g2 loss from checkpoint rolled back from step 2 at step 1 lost [node0,node2]: [node1,node3]"}},
       {"a loss during the rollback plans again from the same save",
        {joined(cluster.nodes(6)), ready(1), completed(1, 0), completed(1, 1), saved1, completed(1, 2),
         lost({"node0", "node3"}), lost({"node1"})},
        {"0: start g1 start from initial at step 0: [node0,node1,node2] [node3,node4,node5]",
         "2: commit g1 step 0 establishes", "3: commit g1 step 1", "5: commit g1 step 2",
         "6: start g2 loss from checkpoint rolled back from step 2 at step 2 lost [node0,node3]: [node1,node2] [node4,node5]",
         "7: start g3 loss from checkpoint rolled back from step 2 at step 2 lost [node0,node3,node1]: [node2,node4,node5]"}},
       {"nothing saved once a step was committed: give up as before",
        {joined(cluster.nodes(4)), ready(1), completed(1, 0), lost({"node0", "node2"})},
        {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]", "2: commit g1 step 0 establishes",
         "3: give up no plan after step 0"}},
       {"nothing committed yet: start again from the seed",
        {joined(cluster.nodes(4)), lost({"node0", "node2"})},
        {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]",
         "1: start g2 loss from initial at step 0 lost [node0,node2]: [node1,node3]"}}});
}

TEST_CASE("controller, live run: past f, the newest snapshot the nodes left hold; memory, then mirrors, then disk") {
  const Cluster cluster;
  const ControllerOptions options = live_past_f_options();
  const int layers = cluster.cost.layers();
  // Two pipelines [node0,node1] [node2,node3]; each node's snapshot is
  // mirrored by the next one in rank order. `split` is where the stages meet.
  const auto snapshot = [&](int step) {
    const int split = layers / 2;
    Snapshot s{step, {}};
    for (int l = 0; l < layers; ++l) {
      SnapshotPiece p{l, 1, 0, {}, {}};
      p.own = l < split ? std::vector<std::string>{"node0", "node2"} : std::vector<std::string>{"node1", "node3"};
      p.mirrors = l < split ? std::vector<std::string>{"node1", "node3"} : std::vector<std::string>{"node2", "node0"};
      s.pieces.push_back(p);
    }
    return s;
  };
  const Event held = SnapshotsHeld{{snapshot(2), snapshot(1)}, 0};
  Snapshot unmirrored = snapshot(2);
  for (auto& p : unmirrored.pieces) p.mirrors.clear();
  const Event held_unmirrored = SnapshotsHeld{{unmirrored}, 0};
  Snapshot by_node0 = unmirrored;
  for (auto& p : by_node0.pieces) p.own = {"node0"};
  const Event held_by_node0 = SnapshotsHeld{{by_node0}, 0};
  const Event saved0 = StateSaved{0, 0}, saved2 = StateSaved{2, 0};
  const std::vector<Event> started = {joined(cluster.nodes(4)), ready(1), completed(1, 0), saved0, completed(1, 1),
                                      completed(1, 2), completed(1, 3)};
  const std::vector<std::string> start = {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]",
                                          "2: commit g1 step 0 establishes", "4: commit g1 step 1",
                                          "5: commit g1 step 2", "6: commit g1 step 3"};
  const auto row = [&](const char* name, std::vector<Event> more, const std::string& expected) {
    std::vector<Event> events = started;
    events.insert(events.end(), more.begin(), more.end());
    std::vector<std::string> out = start;
    out.push_back(expected);
    return Row{name, events, out};
  };
  check_rows(cluster, options,
             {row("the first stages lost: their mirrors hold the newest snapshot", {held, lost({"node0", "node2"})},
                  "8: start g2 loss from mirror rolled back from step 3 at step 3 lost [node0,node2]: [node1,node3]"),
              row("a disk checkpoint as new as the snapshot comes after it", {held, saved2, lost({"node0", "node2"})},
                  "9: start g2 loss from mirror rolled back from step 3 at step 3 lost [node0,node2]: [node1,node3]"),
              row("the second stages lost: their mirrors", {held, lost({"node1", "node3"})},
                  "8: start g2 loss from mirror rolled back from step 3 at step 3 lost [node1,node3]: [node0,node2]"),
              row("a snapshot of an older plan, whose holders survive: every piece from them",
                  {held_by_node0, lost({"node1", "node3"})},
                  "8: start g2 loss from memory rolled back from step 3 at step 3 lost [node1,node3]: [node0,node2]"),
              row("a snapshot no node left holds: the checkpoint", {held_unmirrored, lost({"node0", "node2"})},
                  "8: start g2 loss from checkpoint rolled back from step 3 at step 1 lost [node0,node2]: [node1,node3]"),
              row("no snapshot reported: the checkpoint", {lost({"node0", "node2"})},
                  "7: start g2 loss from checkpoint rolled back from step 3 at step 1 lost [node0,node2]: [node1,node3]")});
  // A loss during the rollback, before its generation is ready, chooses
  // again among what the nodes left hold: the mirrors went too.
  Snapshot after_loss = snapshot(2);
  for (auto& p : after_loss.pieces) {
    std::erase_if(p.own, [](const std::string& n) { return n == "node0" || n == "node2"; });
    std::erase_if(p.mirrors, [](const std::string& n) { return n == "node0" || n == "node2"; });
  }
  std::vector<Event> events = started;
  for (const Event& e : {held, lost({"node0", "node2"}), Event{SnapshotsHeld{{after_loss}, 0}},
                         Event{NodesChanged{{"node1", "node3"}, {"node4", "node5"}, 0}}})
    events.push_back(e);
  std::vector<std::string> expected = start;
  expected.push_back("8: start g2 loss from mirror rolled back from step 3 at step 3 lost [node0,node2]: [node1,node3]");
  expected.push_back(
      "10: start g3 loss from checkpoint rolled back from step 3 at step 1 lost [node0,node2,node1,node3] added "
      "[node4,node5]: [node4,node5]");
  check_rows(cluster, options, {{"the mirrors lost during the rollback: the checkpoint", events, expected}});
}

TEST_CASE("controller, live run: chaos asks whether a rollback past f would find a complete state") {
  const Cluster cluster;
  const ControllerOptions options = live_past_f_options();
  const int split = cluster.cost.layers() / 2;
  // [node0,node1] [node2,node3]; the first stages' snapshot of step 1 is
  // held by node0 and node2 and mirrored by node1; the second stages' by
  // node1 and node3, unmirrored.
  Snapshot s{1, {}};
  for (int l = 0; l < cluster.cost.layers(); ++l) {
    SnapshotPiece p{l, 1, 0, {}, {}};
    p.own = l < split ? std::vector<std::string>{"node0", "node2"} : std::vector<std::string>{"node1", "node3"};
    if (l < split) p.mirrors = {"node1"};
    s.pieces.push_back(p);
  }
  Controller controller(cluster.cost, cluster.templates, options);
  CHECK(controller.can_roll_back_losing({"node0", "node1", "node2", "node3"}));  // nothing trained: the seed
  for (const Event& e : {joined(cluster.nodes(4)), ready(1), completed(1, 0), completed(1, 1)}) {
    (void)controller.handle(e);
  }
  CHECK(!controller.can_roll_back_losing({"node0", "node2"}));  // no snapshot reported, nothing saved
  (void)controller.handle(SnapshotsHeld{{s}, 0});
  CHECK(controller.can_roll_back_losing({"node0", "node2"}));   // node1's mirror
  CHECK(!controller.can_roll_back_losing({"node0", "node1", "node2"}));
  CHECK(!controller.can_roll_back_losing({"node1", "node3"}));  // the second stages were not mirrored
  (void)controller.handle(StateSaved{0, 0});
  CHECK(controller.can_roll_back_losing({"node1", "node3"}));   // the checkpoint of step 0
  CHECK(controller.can_roll_back_losing({"node0", "node1", "node2", "node3"}));
  CHECK(controller.committed_step() == 1);  // asking changes nothing
}

TEST_CASE("controller, live run: a process restarted in place keeps the generation") {
  const Cluster cluster;
  ControllerOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 12;
  const Event restarted = WorkerRestarted{"node1", 0};
  check_rows(cluster, options,
             {{"once a step is committed: the same generation trains the next step again",
               {joined(cluster.nodes(4)), ready(1), completed(1, 0), reported(1, 1, "node0"), restarted,
                reported(1, 1, "node0"), reported(1, 1, "node1"), reported(1, 1, "node2"), reported(1, 1, "node3")},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]",
                "2: commit g1 step 0 establishes", "4: restart g1 in place at step 1 for node1", "8: commit g1 step 1"}},
              {"before any commit of the generation: nothing (the driver treats it as a loss)",
               {joined(cluster.nodes(4)), restarted},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3]"}}});
}

TEST_CASE("controller: chaos asks whether a loss would still be survivable") {
  const Cluster cluster;
  const ControllerOptions options = cluster.six_nodes();
  Controller controller(cluster.cost, cluster.templates, options);
  (void)controller.handle(joined(cluster.nodes(6)));
  (void)controller.handle(completed(1, 0));
  CHECK(controller.survives_losing({"node0"}));
  CHECK(controller.survives_losing({"node0", "node2"}));
  CHECK(!controller.survives_losing({"node0", "node2", "node4"}));  // layers [0, 3) gone
  CHECK(!controller.survives_losing({"node0", "node1", "node2", "node3", "node4"}));
  CHECK(controller.survives_losing({"node9"}));  // not a member: nothing changes
  CHECK(controller.trains("node3"));
  CHECK(controller.committed_step() == 0);
  CHECK(!controller.commit_wanted());
}

namespace {

// The decisions of a controller rebuilt from another's kept state, after
// MasterRestarted{lost}, beside the first one's after the same losses: the
// same plans, copies and steps; only the cause differs.
std::vector<std::string> restarted(const Cluster& cluster, const ControllerOptions& options,
                                   const std::vector<Event>& before, std::vector<std::string> lost_meanwhile,
                                   const std::vector<Event>& after) {
  Controller first(cluster.cost, cluster.templates, options);
  (void)play(first, before);
  ControllerOptions resumed = options;
  resumed.resumed = first.state();
  Controller second(cluster.cost, cluster.templates, resumed);
  CHECK(second.committed_step() == first.committed_step());
  std::vector<Event> events = {MasterRestarted{std::move(lost_meanwhile), 0}};
  events.insert(events.end(), after.begin(), after.end());
  return play(second, events);
}

}  // namespace

TEST_CASE("controller: a restarted master goes on from the kept state, where the nodes hold it") {
  const Cluster cluster;
  ControllerOptions options = live_past_f_options();
  options.fault_tolerance = 2;
  options.initial_plan = cluster.plan(6, 2);
  options.last_step = 20;
  const auto all = cluster.nodes(6);
  const std::vector<Event> trained = {joined(all), ready(1), completed(1, 0), completed(1, 1)};

  SUBCASE("while training: the same plan and members, nothing copied, the step in flight again") {
    CHECK(restarted(cluster, options, trained, {}, {ready(2), completed(2, 2)}) ==
          std::vector<std::string>{
              "0: start g2 master_restart from replicas at step 2: [node0,node1] [node2,node3] [node4,node5]",
              "2: commit g2 step 2 establishes"});
  }
  SUBCASE("a node that did not come back is lost: planned from the base as a loss would be") {
    std::vector<Event> with_loss = trained;
    with_loss.push_back(lost({"node1"}));
    Controller oracle(cluster.cost, cluster.templates, options);
    const auto by_loss = play(oracle, with_loss);
    REQUIRE(by_loss.back() ==
            "4: start g2 loss from replicas at step 2 lost [node1]: [node0,node4,node5] [node2,node3] copies 1");
    CHECK(restarted(cluster, options, trained, {"node1"}, {}) ==
          std::vector<std::string>{"0: start g2 master_restart from replicas at step 2 lost [node1]: "
                                   "[node0,node4,node5] [node2,node3] copies 1"});
  }
  SUBCASE("during a recovery: planned from its base again, with its losses and those since") {
    std::vector<Event> recovering = trained;
    recovering.push_back(lost({"node1"}));
    // g2 (lost node1) had not become ready; node2 is lost while the master is away.
    CHECK(restarted(cluster, options, recovering, {"node2"}, {ready(3), completed(3, 2)}) ==
          std::vector<std::string>{
              "0: start g3 master_restart from replicas at step 2 lost [node1,node2]: [node4,node5] [node0,node3]",
              "2: commit g3 step 2 establishes"});
  }
  SUBCASE("a join waiting for the next commit is taken in") {
    std::vector<Event> waiting = trained;
    waiting.push_back(joined({"node6"}));
    const auto got = restarted(cluster, options, waiting, {}, {});
    REQUIRE(got.size() == 1);
    CHECK(got[0].starts_with("0: start g2 master_restart from replicas at step 2 added [node6]: "));
  }
  SUBCASE("past f, waiting for nodes: still waiting, then back to the checkpoint when they come") {
    std::vector<Event> waiting = trained;
    waiting.push_back(StateSaved{0, 0});
    waiting.push_back(lost({"node0", "node1", "node2", "node3", "node4"}));
    Controller oracle(cluster.cost, cluster.templates, options);
    const auto by_loss = play(oracle, waiting);
    REQUIRE(by_loss.back() == "5: wait rolled back");
    CHECK(restarted(cluster, options, waiting, {}, {joined({"node6"}), ready(2), completed(2, 1)}) ==
          std::vector<std::string>{
              "0: wait",
              "1: start g2 nodes_back from checkpoint rolled back from step 1 at step 1: [node5,node6]",
              "3: commit g2 step 1 establishes"});
  }
}

TEST_CASE("controller: the kept state, rebuilt, is the state it was kept from") {
  const Cluster cluster;
  ControllerOptions options = live_past_f_options();
  options.fault_tolerance = 2;
  options.initial_plan = cluster.plan(6, 2);
  Controller first(cluster.cost, cluster.templates, options);
  (void)play(first, {joined(cluster.nodes(6)), ready(1), completed(1, 0), StateSaved{0, 0}, lost({"node1"}),
                     joined({"node6"})});
  ControllerOptions resumed = options;
  resumed.resumed = first.state();
  const Controller second(cluster.cost, cluster.templates, resumed);
  const ControllerState a = first.state(), b = second.state();
  CHECK(b.generations == a.generations);
  REQUIRE(b.current.has_value());
  CHECK(describe(StartGeneration{std::make_shared<Generation>(*b.current), nullptr}) ==
        describe(StartGeneration{std::make_shared<Generation>(*a.current), nullptr}));
  CHECK(b.gone == a.gone);
  CHECK(b.ready == a.ready);
  CHECK(b.established == a.established);
  CHECK(b.committed == a.committed);
  REQUIRE(b.base.has_value());
  CHECK(ranked_nodes(*b.base) == ranked_nodes(*a.base));
  CHECK(b.base_generation == a.base_generation);
  CHECK(b.lost_since_base == std::vector<std::string>{"node1"});
  CHECK(b.pending_joins == std::vector<std::string>{"node6"});
  CHECK(b.saved_step == std::optional<int>(0));
  CHECK(second.counts_state_on("node0"));
  CHECK_FALSE(second.counts_state_on("node1"));  // lost since the base
  CHECK_FALSE(second.counts_state_on("node6"));  // joined since
}

TEST_CASE("controller: node speeds are weighed at commits; a slow node's pipeline takes fewer microbatches, then its share back") {
  const Cluster cluster;
  const ControllerOptions options = cluster.six_nodes(40);
  const auto all = cluster.nodes(6);
  const Event slow = NodeSpeedsMeasured{{{"node2", 0.4}}, 0};
  const Event normal = NodeSpeedsMeasured{{}, 0};
  const Event mild = NodeSpeedsMeasured{{{"node2", 0.98}}, 0};
  check_rows(cluster, options,
             {{"slow, then recovered",
               {joined(all), ready(1), completed(1, 0), slow, completed(1, 1), ready(2), completed(2, 2),
                completed(2, 3), normal, completed(2, 4), completed(3, 5)},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]",
                "2: commit g1 step 0 establishes", "4: commit g1 step 1",
                // node2 at 0.4 makes its pipeline 2.5x as slow: it trains 2 of 12.
                "4: weighed at step 1: resplit",
                "4: start g2 speeds from replicas at step 2: [node0,node1] [node2,node3] [node4,node5] microbatches 5 2 5",
                "6: commit g2 step 2 establishes", "7: commit g2 step 3", "9: commit g2 step 4",
                "9: weighed at step 4: resplit",
                "9: start g3 speeds from replicas at step 5: [node0,node1] [node2,node3] [node4,node5] microbatches 4 4 4",
                "10: commit g3 step 5 establishes"}},
              {"a small change is kept",
               {joined(all), ready(1), completed(1, 0), mild, completed(1, 1), completed(1, 2)},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]",
                "2: commit g1 step 0 establishes", "4: commit g1 step 1", "4: weighed at step 1: keep",
                "5: commit g1 step 2"}},
              {"a loss while slow: the recovery is planned at the speeds, its first commit keeps it",
               {joined(all), ready(1), completed(1, 0), slow, lost({"node5"}), ready(2), completed(2, 1)},
               {"0: start g1 start from initial at step 0: [node0,node1] [node2,node3] [node4,node5]",
                "2: commit g1 step 0 establishes",
                "4: start g2 loss from replicas at step 1 lost [node5]: [node2,node4,node3] [node0,node1] copies 1",
                "6: commit g2 step 1 establishes", "6: weighed at step 1: keep"}}});
}

TEST_CASE("controller: a recovery while a node is slow is planned at the measured speeds") {
  // As the last row above: node2 at 0.4 when node5 is lost. The recovery
  // gives the slow node's pipeline fewer microbatches at once, priced at
  // the speeds, where a speed-blind recovery would split 6 and 6.
  const Cluster cluster;
  const ControllerOptions options = cluster.six_nodes(40);
  Controller controller(cluster.cost, cluster.templates, options);
  (void)controller.handle(NodesJoined{cluster.nodes(6), 0});
  (void)controller.handle(GenerationReady{1, 0});
  (void)controller.handle(StepCompleted{1, 0, 0});
  (void)controller.handle(NodeSpeedsMeasured{{{"node2", 0.4}, {"node5", 0.9}}, 0});  // node5's is ignored
  const Actions actions = controller.handle(NodesLost{{"node5"}, 0});
  REQUIRE(actions.size() == 1);
  const Generation& g = *std::get<StartGeneration>(actions[0]).generation;
  REQUIRE(g.plan.pipelines.size() == 2);
  CHECK(g.plan.pipelines[0].nodes == std::vector<std::string>{"node2", "node4", "node3"});
  CHECK(g.plan.pipelines[0].microbatches == 5);
  CHECK(g.plan.pipelines[1].microbatches == 7);
  CHECK(g.plan.iteration_ms == doctest::Approx(iteration_ms_at_speeds(cluster.cost, g.plan, {{"node2", 0.4}})));
  const Reconfiguration blind = reconfigure(cluster.cost, cluster.templates, *options.initial_plan, {"node5"}, {});
  CHECK(g.plan.iteration_ms < iteration_ms_at_speeds(cluster.cost, blind.plan, {{"node2", 0.4}}));
}

TEST_CASE("controller: a re-plan for speeds moves the slow node to the lightest place and copies its layers") {
  // Stages of unequal weight: two-node pipelines where the first stage is
  // lighter; a slow node on the heavy stage is worth moving.
  Profile profile = test::uniform_profile(6, 1, 1.0, 2.0, 1'000'000, 1'000, 3'500'000);
  for (int l = 0; l < 3; ++l) profile.layers[static_cast<std::size_t>(l)].forward_ms *= 0.25;
  const CostModel cost(profile, 4);
  const TemplateSet templates = build_templates(cost, 8);
  ControllerOptions options;
  options.fault_tolerance = 1;
  options.global_microbatches = 8;
  options.initial_plan = instantiate(cost, templates, {"a", "b", "c", "d"}, 1, 8);
  options.last_step = 40;
  REQUIRE(options.initial_plan->pipelines.size() == 2);
  REQUIRE(options.initial_plan->pipelines[0].nodes.size() == 2);
  Controller controller(cost, templates, options);
  (void)controller.handle(NodesJoined{{"a", "b", "c", "d"}, 0});
  (void)controller.handle(GenerationReady{1, 0});
  (void)controller.handle(StepCompleted{1, 0, 0});
  // The node on the heavier place of pipeline 0, slowed down.
  const Pipeline& first = options.initial_plan->pipelines[0];
  const std::string heavy = first.nodes[static_cast<std::size_t>(first.stages.back().node)];
  (void)controller.handle(NodeSpeedsMeasured{{{heavy, 0.5}}, 0});
  const Actions actions = controller.handle(StepCompleted{1, 1, 0});
  REQUIRE(actions.size() == 3);
  const auto& weighed = std::get<SpeedsWeighed>(actions[1]);
  CHECK(weighed.choice.chosen == SpeedChoice::Kind::replan);
  CHECK(weighed.choice.replan_ms < weighed.choice.resplit_ms);
  CHECK(weighed.choice.resplit_ms < weighed.choice.keep_ms);
  const Generation& g = *std::get<StartGeneration>(actions[2]).generation;
  CHECK(g.cause == Cause::speeds);
  CHECK(g.plan.pipelines[0].nodes[static_cast<std::size_t>(g.plan.pipelines[0].stages.front().node)] == heavy);
  CHECK_FALSE(g.transfers.empty());
  for (const auto& t : g.transfers) CHECK((t.to_node == heavy || t.from_node == heavy || t.to_node != t.from_node));
}

// Three nodes a, b, c that each fit the model: three one-node pipelines,
// 6 microbatches, established with step 0 committed.
struct OneNodePipelines {
  explicit OneNodePipelines(int fault_tolerance)
      : profile(test::uniform_profile(4, 1, 1.0, 2.0, 1'000'000, 1'000, 1'000'000'000)),
        cost(profile, 4),
        templates(build_templates(cost, 4)),
        controller(cost, templates, options_for(fault_tolerance)) {
    (void)controller.handle(NodesJoined{{"a", "b", "c"}, 0});
    (void)controller.handle(GenerationReady{1, 0});
    (void)controller.handle(StepCompleted{1, 0, 0});
  }
  ControllerOptions options_for(int fault_tolerance) const {
    ControllerOptions options;
    options.fault_tolerance = fault_tolerance;
    options.global_microbatches = 6;
    options.initial_plan = instantiate(cost, templates, {"a", "b", "c"}, fault_tolerance, 6);
    options.last_step = 40;
    REQUIRE(options.initial_plan->pipelines.size() == 3);
    return options;
  }
  Profile profile;
  CostModel cost;
  TemplateSet templates;
  Controller controller;
};

TEST_CASE("controller: a node too slow to be worth its place is dropped as a spare, and readmitted once it recovers") {
  // The model fits one node: three one-node pipelines. At 0.1 of its speed
  // node b would take one microbatch in ten units; two pipelines train the
  // batch in three.
  OneNodePipelines cluster(1);
  Controller& controller = cluster.controller;
  (void)controller.handle(NodeSpeedsMeasured{{{"b", 0.1}}, 0});
  Actions actions = controller.handle(StepCompleted{1, 1, 0});
  REQUIRE(actions.size() == 3);
  const auto& dropped = std::get<SpeedsWeighed>(actions[1]).choice;
  CHECK(dropped.chosen == SpeedChoice::Kind::drop);
  CHECK(dropped.dropped == std::vector<std::string>{"b"});
  CHECK(dropped.drop_ms < dropped.resplit_ms);
  CHECK(dropped.resplit_ms < dropped.keep_ms);
  const Generation& without = *std::get<StartGeneration>(actions[2]).generation;
  CHECK(without.cause == Cause::speeds);
  CHECK(without.plan.pipelines.size() == 2);
  CHECK(without.plan.spare_nodes == std::vector<std::string>{"b"});
  CHECK(without.transfers.empty());  // a one-node pipeline holds every layer
  CHECK_FALSE(controller.trains("b"));
  CHECK(controller.state().dropped_for_speed == std::vector<std::string>{"b"});
  // Still slow: nothing changes.
  (void)controller.handle(GenerationReady{2, 0});
  actions = controller.handle(StepCompleted{2, 2, 0});
  REQUIRE(actions.size() == 1);
  // Recovered: back in a pipeline of its own, with the layers copied to it.
  (void)controller.handle(NodeSpeedsMeasured{{}, 0});
  actions = controller.handle(StepCompleted{2, 3, 0});
  REQUIRE(actions.size() == 3);
  const auto& back = std::get<SpeedsWeighed>(actions[1]).choice;
  CHECK(back.chosen == SpeedChoice::Kind::readmit);
  CHECK(back.readmitted == std::vector<std::string>{"b"});
  const Generation& with = *std::get<StartGeneration>(actions[2]).generation;
  CHECK(with.plan.pipelines.size() == 3);
  CHECK(with.plan.spare_nodes.empty());
  CHECK(std::all_of(with.transfers.begin(), with.transfers.end(), [](const Transfer& t) { return t.to_node == "b"; }));
  CHECK_FALSE(with.transfers.empty());
  CHECK(controller.trains("b"));
  CHECK(controller.state().dropped_for_speed.empty());
}

TEST_CASE("controller: a slow node is not dropped when that would leave fewer than f + 1 pipelines") {
  OneNodePipelines cluster(2);
  Controller& controller = cluster.controller;
  (void)controller.handle(NodeSpeedsMeasured{{{"b", 0.1}}, 0});
  const Actions actions = controller.handle(StepCompleted{1, 1, 0});
  REQUIRE(actions.size() == 3);
  const auto& c = std::get<SpeedsWeighed>(actions[1]).choice;
  CHECK(c.chosen == SpeedChoice::Kind::resplit);
  CHECK(c.dropped.empty());
  CHECK(controller.trains("b"));
}

// Two one-GPU pipelines on each of `nodes` 2-GPU nodes (the model fits one
// GPU), f = 1, the first step committed.
struct SharedNodePipelines {
  explicit SharedNodePipelines(const std::vector<std::string>& nodes)
      : profile(test::uniform_profile(4, 2, 1.0, 2.0, 1'000'000, 1'000, 1'000'000'000)),
        cost(shared_cost(profile)),
        templates(shared_templates(cost)),
        controller(cost, templates, options_for(nodes)) {
    (void)controller.handle(NodesJoined{nodes, 0});
    (void)controller.handle(GenerationReady{1, 0});
    (void)controller.handle(StepCompleted{1, 0, 0});
  }
  static CostModel shared_cost(const Profile& profile) {
    CostModel cost(profile, 2);
    cost.set_pipelines_per_node(2);
    return cost;
  }
  static TemplateSet shared_templates(const CostModel& cost) {
    const auto shared = build_shared_node_template(cost, 1);
    REQUIRE(shared);
    TemplateSet out;
    out.templates = {*shared};
    out.max_nodes = 1;
    out.microbatches = cost.microbatches();
    return out;
  }
  ControllerOptions options_for(const std::vector<std::string>& nodes) const {
    ControllerOptions options;
    options.fault_tolerance = 1;
    options.global_microbatches = 12;
    options.initial_plan = instantiate_sharing_nodes(cost, templates.templates.front(), nodes, 1, 12);
    options.last_step = 40;
    options.speeds_may_replan = true;
    REQUIRE(options.initial_plan->pipelines.size() == 2 * nodes.size());
    return options;
  }
  Profile profile;
  CostModel cost;
  TemplateSet templates;
  Controller controller;
};

TEST_CASE("controller: where pipelines share nodes, a slow node is kept or dropped, never re-split nor re-placed") {
  SharedNodePipelines cluster({"a", "b", "c"});
  Controller& controller = cluster.controller;
  (void)controller.handle(NodeSpeedsMeasured{{{"b", 0.1}}, 0});
  const Actions actions = controller.handle(StepCompleted{1, 1, 0});
  REQUIRE(actions.size() == 3);
  const auto& c = std::get<SpeedsWeighed>(actions[1]).choice;
  CHECK(c.resplit_ms == c.keep_ms);
  CHECK(c.replan_ms == c.keep_ms);
  CHECK(c.chosen == SpeedChoice::Kind::drop);
  CHECK(c.dropped == std::vector<std::string>{"b"});
  const Generation& without = *std::get<StartGeneration>(actions[2]).generation;
  CHECK(without.plan.pipelines_per_node == 2);
  CHECK(without.plan.pipelines.size() == 4);
  CHECK(without.plan.spare_nodes == std::vector<std::string>{"b"});
  CHECK_FALSE(controller.trains("b"));
}

TEST_CASE("controller: where pipelines share nodes, a slow node is not dropped when fewer than f + 1 nodes would "
          "hold pipelines") {
  // Dropping b would leave a's two pipelines: two pipelines, but one node,
  // whose loss takes both.
  SharedNodePipelines cluster({"a", "b"});
  Controller& controller = cluster.controller;
  (void)controller.handle(NodeSpeedsMeasured{{{"b", 0.1}}, 0});
  const Actions actions = controller.handle(StepCompleted{1, 1, 0});
  REQUIRE(!actions.empty());
  for (const auto& action : actions) {
    if (const auto* weighed = std::get_if<SpeedsWeighed>(&action)) {
      CHECK(weighed->choice.chosen == SpeedChoice::Kind::keep);
      CHECK(weighed->choice.dropped.empty());
    }
    CHECK_FALSE(std::holds_alternative<StartGeneration>(action));
  }
  CHECK(controller.trains("b"));
}
