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
       {Cause::start, Cause::loss, Cause::join, Cause::communication, Cause::nodes_back, Cause::master_restart}) {
    if (cause_name(c) == name) return c;
  }
  return std::nullopt;
}

std::string generation_record(const Generation& g, Milliseconds at_ms) {
  nlohmann::ordered_json pipelines = nlohmann::ordered_json::array();
  for (const auto& p : g.plan.pipelines) pipelines.push_back(p.nodes);
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
                                         {"spare_nodes", g.plan.spare_nodes},
                                         {"copy_bytes", g.copy_bytes}};
  if (g.rolled_back_from >= 0) record["rolled_back_from"] = g.rolled_back_from;
  return record.dump();
}

}  // namespace oobleck::recovery
