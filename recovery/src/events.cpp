#include "oobleck/recovery/events.h"

#include <nlohmann/json.hpp>

namespace oobleck::recovery {

std::string_view source_name(StateSource source) {
  switch (source) {
    case StateSource::replicas:
      return "replicas";
    case StateSource::initial:
      return "initial";
    case StateSource::checkpoint:
      return "checkpoint";
    case StateSource::memory:
      return "memory";
    case StateSource::mirror:
      return "mirror";
  }
  return "?";
}

std::string_view cause_name(Cause cause) {
  switch (cause) {
    case Cause::start:
      return "start";
    case Cause::loss:
      return "loss";
    case Cause::join:
      return "join";
    case Cause::communication:
      return "communication";
    case Cause::nodes_back:
      return "nodes_back";
    case Cause::master_restart:
      return "master_restart";
    case Cause::speeds:
      return "speeds";
  }
  return "?";
}

std::optional<StateSource> source_named(std::string_view name) {
  for (const StateSource s : {StateSource::replicas, StateSource::initial, StateSource::checkpoint,
                              StateSource::memory, StateSource::mirror}) {
    if (source_name(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<Cause> cause_named(std::string_view name) {
  for (const Cause c :
       {Cause::start, Cause::loss, Cause::join, Cause::communication, Cause::nodes_back, Cause::master_restart,
        Cause::speeds}) {
    if (cause_name(c) == name) return c;
  }
  return std::nullopt;
}

std::string_view speed_choice_name(SpeedChoice::Kind kind) {
  switch (kind) {
    case SpeedChoice::Kind::keep:
      return "keep";
    case SpeedChoice::Kind::resplit:
      return "resplit";
    case SpeedChoice::Kind::replan:
      return "replan";
    case SpeedChoice::Kind::drop:
      return "drop";
    case SpeedChoice::Kind::readmit:
      return "readmit";
  }
  return "?";
}

namespace {

nlohmann::ordered_json choice_json(const SpeedChoice& c) {
  nlohmann::ordered_json out = {{"chosen", speed_choice_name(c.chosen)},
                                {"speeds", c.speeds},
                                {"keep_ms", c.keep_ms},
                                {"resplit_ms", c.resplit_ms},
                                {"replan_ms", c.replan_ms},
                                {"replan_copy_bytes", c.replan_copy_bytes},
                                {"replan_copy_ms", c.replan_copy_ms}};
  if (!c.dropped.empty()) out.update({{"dropped", c.dropped}, {"drop_ms", c.drop_ms}, {"drop_copy_ms", c.drop_copy_ms}});
  if (!c.readmitted.empty()) {
    out.update({{"readmitted", c.readmitted}, {"readmit_ms", c.readmit_ms}, {"readmit_copy_ms", c.readmit_copy_ms}});
  }
  return out;
}

}  // namespace

std::string speeds_record(const SpeedsWeighed& weighed, Milliseconds at_ms) {
  nlohmann::ordered_json record = {{"kind", "speeds"}, {"at_ms", at_ms}, {"step", weighed.step}};
  record.update(choice_json(weighed.choice));
  return record.dump();
}

std::string generation_record(const Generation& g, Milliseconds at_ms) {
  nlohmann::ordered_json pipelines = nlohmann::ordered_json::array(), microbatches = nlohmann::ordered_json::array();
  for (const auto& p : g.plan.pipelines) {
    pipelines.push_back(p.nodes);
    microbatches.push_back(p.microbatches);
  }
  nlohmann::ordered_json record = {{"kind", "generation"},
                                         {"at_ms", at_ms},
                                         {"generation", g.number},
                                         {"cause", cause_name(g.cause)},
                                         {"source", source_name(g.source)},
                                         {"base_generation", g.base_generation},
                                         {"rolled_back", g.rolled_back},
                                         {"resume_step", g.resume_step},
                                         {"lost", g.lost},
                                         {"added", g.added},
                                         {"pipelines", pipelines},
                                         {"microbatches", microbatches},
                                         {"spare_nodes", g.plan.spare_nodes},
                                         {"copy_bytes", g.copy_bytes}};
  if (g.rolled_back_from >= 0) record["rolled_back_from"] = g.rolled_back_from;
  if (g.speed_choice) record["speed_choice"] = choice_json(*g.speed_choice);
  return record.dump();
}

}  // namespace oobleck::recovery
