// The master of a live run: one thread, one event loop over the control
// channel, ordered decisions. It alone decides which steps happened (a step
// is committed once every trainer reported it ready, and never after a loss
// was seen), so a recovery always resumes from one well-defined state: the
// plan of the last generation that committed a step (the "base"), the nodes
// lost and added since, and the step after the last commit.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "oobleck/common/files.h"
#include "control.h"
#include "last_step.h"
#include "oobleck/executor/data.h"
#include "oobleck/executor/live.h"
#include "oobleck/executor/train.h"
#include "plan_seats.h"
#include "launch.h"

namespace oobleck::executor {
namespace {

using control::Json;
using Clock = std::chrono::steady_clock;

double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out.empty() ? "-" : out;
}

// "3+2": the node counts of a plan's pipelines.
std::string pipeline_shape(const Plan& plan) {
  std::string out;
  for (const auto& p : plan.pipelines) {
    if (!out.empty()) out += '+';
    out += std::to_string(p.nodes.size());
  }
  return out;
}

struct Node {
  std::string name;
  bool local = true;
  pid_t agent_pid = 0, worker_pid = 0;
  int agent_fd = -1, worker_fd = -1;
  double spawned_ms = 0, last_heartbeat_ms = 0;
  double killed_ms = -1;  // when an injection killed it
  bool alive = true;
  bool ready = false;  // its worker is connected
};

// One generation: a plan, its members, and how its recovery went.
struct Generation {
  int number = 0;
  Plan plan;
  std::vector<std::string> ranks;  // pipelines' nodes, then spares
  int trainers = 0;
  int resume_step = 0;
  std::vector<std::string> lost, added;  // since the base plan
  std::map<std::string, std::string> reasons;  // how each loss was noticed
  double failure_ms = -1, detected_ms = 0, planned_ms = 0, plan_ms = 0;
  int recovered = 0;
  double rebuild_ms = 0, copy_ms = 0, all_recovered_ms = 0;
  std::int64_t copy_bytes = 0;
  bool established = false;
};

struct Ready {
  double loss = 0;
  int first_sample = -1, samples = 0;
};

class Master {
 public:
  explicit Master(const MasterOptions& options);
  ~Master();
  int run();

 private:
  enum class Phase { Starting, Training, Finishing };

  // Processes.
  void start_node(const std::string& name);
  void kill_node(const std::string& name, const char* why, bool hang = false);
  void lose(const std::string& name, const std::string& reason);
  void reap();
  // Channel.
  void poll_once(double timeout_ms);
  void close_connection(int fd);
  void on_message(int fd, const Json& message);
  void send_worker(const std::string& name, const Json& message);
  // Decisions.
  void advance();
  void form_generation();
  void maybe_commit(int step);
  void finish_checkpoint(int step);
  void commit(int step);
  [[noreturn]] void no_plan(const std::string& why);
  void report_generation(const Generation& g, bool superseded);
  void finish();
  // Injections and chaos.
  void fire(Injection& event);
  void chaos_event();
  [[nodiscard]] std::vector<std::string> members_alive() const;
  [[nodiscard]] bool survivable_without(const std::string& victim);
  // Planner.
  const TemplateSet& templates_for(int nodes);
  [[nodiscard]] std::map<std::string, std::pair<int, int>> base_holdings() const;
  void emit(const Json& line);

  MasterOptions o_;
  Profile profile_;
  Plan initial_plan_;
  std::unique_ptr<CostModel> cost_;
  TemplateSet templates_;
  std::vector<std::string> hosts_;
  std::unique_ptr<control::Listener> listener_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  Json welcome_;
  std::ofstream metrics_;

  std::map<std::string, Node> nodes_;
  std::map<int, std::unique_ptr<control::Connection>> connections_;
  std::map<int, std::pair<std::string, std::string>> owners_;  // fd -> (node, role)
  std::set<pid_t> children_;

  Phase phase_ = Phase::Starting;
  double started_ms_ = 0, training_start_ms_ = 0, finish_deadline_ms_ = 0;
  int generations_ = 0;
  Generation current_;
  Plan base_;
  bool base_trained_ = false;  // whether base_ committed a step (holdings count)
  std::vector<std::string> lost_since_base_, added_since_base_, pending_joins_;
  std::map<std::string, std::string> loss_reasons_;  // how each loss was noticed
  std::set<std::string> awaited_joins_;  // injected at a step: that step's commit waits for them
  int deferred_commit_ = -1;
  bool recovery_needed_ = false;
  double chain_failure_ms_ = -1, chain_detected_ms_ = -1;
  int committed_ = -1;
  double step_start_ms_ = 0, last_iteration_ms_ = 0;
  std::map<int, std::map<int, Ready>> ready_;  // step -> rank -> report
  std::map<int, Json> timelines_;              // rank -> last step, at the end
  std::set<int> done_ranks_;
  double comm_error_deadline_ms_ = -1;
  std::string last_comm_error_;
  int reforms_without_progress_ = 0;
  std::int64_t samples_ = 0;
  int resume_from_step_ = -1;  // a checkpoint's step
  int last_checkpoint_ = -1;
  std::string resume_folder_;
  std::map<int, std::set<std::string>> saves_pending_;  // step -> nodes yet to write their layers
  std::string token_;  // every process of this job says it in its hello
  std::vector<Injection> injections_;
  std::vector<bool> fired_;
  // Chaos.
  std::mt19937_64 chaos_rng_;
  int chaos_left_ = 0, chaos_kills_ = 0, chaos_joins_ = 0;
  double chaos_next_ms_ = -1;
  bool chaos_kill_in_recovery_ = false;
  bool done_ = false;
};

Master::Master(const MasterOptions& options) : o_(options), injections_(options.injections) {
  for (const auto& [flag, value] : {std::pair{"--plan", o_.plan_path}, std::pair{"--profile", o_.profile_path},
                                    std::pair{"--data", o_.data_path}}) {
    if (value.empty()) throw InputError(std::string(flag) + ": required");
  }
  profile_ = load_profile(o_.profile_path);
  const ModelConfig model = model_of_profile(profile_);
  {
    TrainOptions device_check;
    apply_profile(device_check, profile_, o_.device);  // refuses a device the workers cannot train on
  }
  initial_plan_ = parse_plan(read_text_file(o_.plan_path), o_.plan_path, profile_);
  (void)seats_of(initial_plan_);  // refuses what the workers cannot run, before anything starts
  const auto tokens = read_tokens(o_.data_path);
  for (std::uint16_t t : tokens) {
    if (t >= model.vocab) {
      throw InputError(o_.data_path + ": token " + std::to_string(t) + " is outside the model's vocabulary of " +
                       std::to_string(model.vocab));
    }
  }
  (void)step_sequences(tokens, o_.seed, 0, 0, 1, model.seq_len);  // long enough for one sequence
  require_output_path("--metrics", o_.metrics_path);
  require_output_path("--chrome-trace", o_.chrome_trace_path);
  if (!o_.hostfile.empty()) {
    hosts_ = parse_hostfile(read_text_file(o_.hostfile), o_.hostfile, profile_.hardware.gpus_per_node);
    for (const auto& n : ranked_nodes(initial_plan_)) {
      if (std::find(hosts_.begin(), hosts_.end(), n) == hosts_.end()) {
        throw InputError(o_.hostfile + ": the plan's node " + n + " is not listed");
      }
    }
  }
  // Injections name nodes of the plan or nodes an earlier line adds.
  std::set<std::string> known;
  for (const auto& n : ranked_nodes(initial_plan_)) known.insert(n);
  for (const auto& e : injections_) {
    if (e.action == Injection::Action::Add) {
      known.insert(e.node);
      if (!hosts_.empty() && std::find(hosts_.begin(), hosts_.end(), e.node) == hosts_.end()) {
        throw InputError("--inject line " + std::to_string(e.line) + ": node " + e.node + " is not in " + o_.hostfile);
      }
    } else if (!known.count(e.node)) {
      throw InputError("--inject line " + std::to_string(e.line) + ": node " + e.node +
                       " is neither in the plan nor added by an earlier line");
    }
  }
  fired_.assign(injections_.size(), false);
  if (!o_.checkpoint_dir.empty() && o_.checkpoint_every == 0) {
    throw InputError("--checkpoint " + o_.checkpoint_dir + ": needs --checkpoint-every K");
  }
  if (o_.checkpoint_every > 0) {
    if (o_.checkpoint_dir.empty()) throw InputError("--checkpoint-every needs --checkpoint DIR");
    std::filesystem::create_directories(o_.checkpoint_dir);
  }
  if (!o_.resume_dir.empty()) {
    const std::string latest = o_.resume_dir + "/latest.json";
    const Json manifest = Json::parse(read_text_file(latest), nullptr, false);
    if (manifest.is_discarded() || !manifest.contains("step") || !manifest.contains("folder")) {
      throw InputError(latest + ": expected a checkpoint manifest {format, step, folder, ...}");
    }
    if (manifest.value("layers", -1) != static_cast<int>(profile_.layers.size()) ||
        manifest.value("seed", std::uint64_t{0}) != o_.seed) {
      throw InputError(latest + ": saved for another model or seed (layers " +
                       std::to_string(manifest.value("layers", -1)) + ", seed " +
                       std::to_string(manifest.value("seed", std::uint64_t{0})) + ")");
    }
    resume_from_step_ = manifest.at("step");
    resume_folder_ = (std::filesystem::path(o_.resume_dir) / manifest.at("folder").get<std::string>()).string();
    committed_ = resume_from_step_;
    samples_ = static_cast<std::int64_t>(committed_ + 1) * initial_plan_.global_microbatches * profile_.microbatch_size;
  }
  if (committed_ + 1 >= o_.steps) throw InputError("--steps " + std::to_string(o_.steps) + ": nothing left to train");
  cost_ = std::make_unique<CostModel>(profile_, initial_plan_.template_microbatches);
  if (o_.chaos.enabled) {
    chaos_rng_.seed(o_.chaos.seed);
    chaos_left_ = o_.chaos.events;
  }

  std::random_device entropy;
  char token[33];
  std::snprintf(token, sizeof token, "%08x%08x%08x%08x", entropy(), entropy(), entropy(), entropy());
  token_ = token;
  listener_ = std::make_unique<control::Listener>(o_.master_addr, 0);
  c10d::TCPStoreOptions store_options;
  store_options.port = 0;
  store_options.isServer = true;
  store_options.waitWorkers = false;
  store_options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o_.comm_timeout_s * 1000));
  store_ = c10::make_intrusive<c10d::TCPStore>(o_.master_addr, store_options);
  welcome_ = {{"type", "welcome"},
              {"profile", profile_to_json(profile_)},
              {"profile_origin", o_.profile_path},
              {"data", std::filesystem::absolute(o_.data_path).string()},
              {"steps", o_.steps},
              {"seed", o_.seed},
              {"threads", o_.threads},
              {"device", o_.device},
              {"store_port", store_->getPort()},
              {"comm_timeout_ms", static_cast<std::int64_t>(o_.comm_timeout_s * 1000)}};
  if (!o_.metrics_path.empty()) {
    metrics_.open(o_.metrics_path, std::ios::trunc);
    if (!metrics_) throw InputError("--metrics " + o_.metrics_path + ": cannot write");
  }
}

// Agents not yet reaped are killed (their workers die with them); a pid
// that was reaped may belong to someone else by now, so it is left alone.
Master::~Master() {
  connections_.clear();
  for (pid_t child : children_) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
}

void Master::emit(const Json& line) {
  if (!metrics_.is_open()) return;
  metrics_ << line.dump() << "\n";
  metrics_.flush();
}

// ---------------------------------------------------------------- processes

void Master::start_node(const std::string& name) {
  Node node;
  node.name = name;
  node.local = hosts_.empty() || is_local_host(name);
  node.spawned_ms = now_ms();
  std::vector<std::string> args = {o_.program, "agent", "--node", name, "--master-addr", o_.master_addr,
                                   "--control-port", std::to_string(listener_->port()), "--token", token_,
                                   "--heartbeat-ms", std::to_string(std::max(10.0, o_.heartbeat_timeout_ms / 5))};
  if (node.local) {
    args.push_back("--parent-pid");
    args.push_back(std::to_string(::getpid()));
  } else {
    args = over_ssh(name, args);
  }
  node.agent_pid = spawn_process(args);
  children_.insert(node.agent_pid);
  nodes_[name] = node;
}

void Master::kill_node(const std::string& name, const char* why, bool hang) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || !it->second.alive) {
    std::fprintf(stderr, "oobleck-run: %s: node %s is not running; nothing to %s\n", why, name.c_str(),
                 hang ? "stop" : "remove");
    return;
  }
  Node& node = it->second;
  std::fprintf(stderr, "oobleck-run: %s: %s node %s\n", why, hang ? "stopping" : "killing", name.c_str());
  node.killed_ms = now_ms();
  if (node.local) {
    const int signal = hang ? SIGSTOP : SIGKILL;
    if (node.worker_pid > 0 && node.worker_fd >= 0) ::kill(node.worker_pid, signal);  // connected: alive
    if (children_.count(node.agent_pid)) ::kill(node.agent_pid, signal);
  } else if (node.agent_fd >= 0) {
    connections_.at(node.agent_fd)->send({{"type", hang ? "hang" : "kill"}});
  }
}

// A node is gone: fence it (kill what is left of it, close its channels) and
// note what its loss means for the generation in hand.
void Master::lose(const std::string& name, const std::string& reason) {
  Node& node = nodes_.at(name);
  if (!node.alive) return;
  node.alive = false;
  const double detected = now_ms();
  // Fence it: whatever is left of it must not act again. The agent's death
  // takes its worker (stopped ones too: SIGKILL ends them).
  if (node.local && children_.count(node.agent_pid)) {
    ::kill(node.agent_pid, SIGKILL);
  } else if (!node.local && node.agent_fd >= 0) {
    connections_.at(node.agent_fd)->send({{"type", "kill"}});
  }
  for (int fd : {node.agent_fd, node.worker_fd}) {
    if (fd >= 0) close_connection(fd);
  }
  if (phase_ == Phase::Finishing) return;
  if (phase_ == Phase::Starting) {
    throw std::runtime_error("node " + name + " failed before training started (" + reason + ")");
  }
  std::fprintf(stderr, "oobleck-run: node %s lost: %s\n", name.c_str(), reason.c_str());
  const bool member = std::find(current_.ranks.begin(), current_.ranks.end(), name) != current_.ranks.end();
  if (awaited_joins_.erase(name) && deferred_commit_ >= 0) maybe_commit(deferred_commit_);
  if (auto j = std::find(pending_joins_.begin(), pending_joins_.end(), name); j != pending_joins_.end()) {
    pending_joins_.erase(j);
    return;
  }
  if (!member) return;
  if (auto a = std::find(added_since_base_.begin(), added_since_base_.end(), name); a != added_since_base_.end()) {
    added_since_base_.erase(a);  // it held nothing the base counts
  } else {
    lost_since_base_.push_back(name);
    loss_reasons_[name] = reason;
  }
  const double failed = node.killed_ms >= 0 ? node.killed_ms : node.last_heartbeat_ms;
  if (chain_failure_ms_ < 0 || failed < chain_failure_ms_) chain_failure_ms_ = failed;
  if (chain_detected_ms_ < 0) chain_detected_ms_ = detected;
  recovery_needed_ = true;
}

void Master::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    children_.erase(pid);
  }
}

// ---------------------------------------------------------------- channel

void Master::close_connection(int fd) {
  auto owner = owners_.find(fd);
  if (owner != owners_.end()) {
    Node& node = nodes_.at(owner->second.first);
    (owner->second.second == "agent" ? node.agent_fd : node.worker_fd) = -1;
    owners_.erase(owner);
  }
  connections_.erase(fd);
}

void Master::poll_once(double timeout_ms) {
  std::vector<pollfd> fds = {{listener_->fd(), POLLIN, 0}};
  for (const auto& [fd, connection] : connections_) fds.push_back({fd, POLLIN, 0});
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::max(0.0, timeout_ms))));
  if (ready <= 0) return;
  if (fds[0].revents) {
    while (auto connection = listener_->accept()) {
      const int fd = connection->fd();
      connections_[fd] = std::move(connection);
    }
  }
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    const int fd = fds[i].fd;
    auto it = connections_.find(fd);
    if (it == connections_.end()) continue;  // closed while handling an earlier one
    std::vector<Json> messages;
    const bool open = it->second->receive(messages);
    for (const auto& m : messages) {
      if (!connections_.count(fd)) break;
      try {
        on_message(fd, m);
      } catch (const nlohmann::json::exception& e) {
        // A malformed message: its sender is broken; if it is a node's, so
        // is the node.
        std::fprintf(stderr, "oobleck-run: a malformed control message (%s)\n", e.what());
        auto owner = owners_.find(fd);
        if (owner == owners_.end()) {
          connections_.erase(fd);
        } else {
          const std::string name = owner->second.first;
          lose(name, "it sent a malformed control message");
        }
        break;
      }
    }
    if (!open && connections_.count(fd)) {
      auto owner = owners_.find(fd);
      if (owner == owners_.end()) {
        connections_.erase(fd);
      } else {
        const auto [name, role] = owner->second;
        close_connection(fd);
        lose(name, "its " + role + "'s connection closed");
      }
    }
  }
}

void Master::send_worker(const std::string& name, const Json& message) {
  const Node& node = nodes_.at(name);
  if (node.worker_fd >= 0) connections_.at(node.worker_fd)->send(message);
}

void Master::on_message(int fd, const Json& m) {
  if (!m.is_object()) throw nlohmann::json::type_error::create(302, "a control message that is not an object", &m);
  const std::string type = m.value("type", "");
  if (type == "hello") {
    const std::string name = m.at("node"), role = m.at("role");
    auto it = nodes_.find(name);
    // Not of this job, a node already declared lost, or a second connection
    // for a role already connected: refused.
    if (m.value("token", "") != token_ || (role != "agent" && role != "worker") || it == nodes_.end() ||
        !it->second.alive || (role == "agent" ? it->second.agent_fd : it->second.worker_fd) >= 0) {
      connections_.erase(fd);
      return;
    }
    Node& node = it->second;
    owners_[fd] = {name, role};
    if (role == "agent") {
      node.agent_fd = fd;
      node.worker_pid = m.value("worker_pid", 0);
      node.last_heartbeat_ms = now_ms();
    } else {
      node.worker_fd = fd;
      node.ready = true;
      connections_.at(fd)->send(welcome_);
      if (phase_ == Phase::Training) pending_joins_.push_back(name);
      awaited_joins_.erase(name);
      if (deferred_commit_ >= 0) maybe_commit(deferred_commit_);
    }
    return;
  }
  auto owner = owners_.find(fd);
  if (owner == owners_.end()) return;
  const std::string name = owner->second.first;
  Node& node = nodes_.at(name);
  if (owner->second.second == "agent") {
    node.last_heartbeat_ms = now_ms();
    if (type == "worker_exit" && m.value("status", 1) != 0) {
      lose(name, "its worker exited with status " + std::to_string(m.value("status", 1)));
    }
    return;
  }
  const int generation = m.value("generation", -1);
  if (type == "saved") {  // whatever generation it is in now
    const int step = m.at("step");
    auto pending = saves_pending_.find(step);
    if (pending == saves_pending_.end()) return;
    pending->second.erase(name);
    if (pending->second.empty()) {
      saves_pending_.erase(pending);
      finish_checkpoint(step);
    }
    return;
  }
  if (type == "done") {
    const auto rank = std::find(current_.ranks.begin(), current_.ranks.end(), name) - current_.ranks.begin();
    done_ranks_.insert(static_cast<int>(rank));
    if (m.contains("timeline")) timelines_[static_cast<int>(rank)] = m.at("timeline");
    return;
  }
  if (generation != current_.number) return;  // about a generation that is over
  const int rank =
      static_cast<int>(std::find(current_.ranks.begin(), current_.ranks.end(), name) - current_.ranks.begin());
  if (type == "ready") {
    Ready r;
    r.loss = m.at("loss");
    if (m.contains("samples")) {
      r.first_sample = m.at("samples")[0];
      r.samples = m.at("samples")[1];
    }
    const int step = m.at("step");
    ready_[step][rank] = r;
    maybe_commit(step);
  } else if (type == "started") {
    for (std::size_t i = 0; i < injections_.size(); ++i) {
      if (!fired_[i] && injections_[i].when == Injection::When::DuringStep && injections_[i].index == m.at("step")) {
        fired_[i] = true;
        fire(injections_[i]);
      }
    }
  } else if (type == "recovering") {
    if (current_.number < 2 || current_.recovered > 0) return;
    const int recovery = current_.number - 1;
    for (std::size_t i = 0; i < injections_.size(); ++i) {
      if (!fired_[i] && injections_[i].when == Injection::When::DuringRecovery && injections_[i].index == recovery) {
        fired_[i] = true;
        fire(injections_[i]);
      }
    }
    if (chaos_kill_in_recovery_) {
      chaos_kill_in_recovery_ = false;
      std::vector<std::string> candidates = members_alive();
      std::shuffle(candidates.begin(), candidates.end(), chaos_rng_);
      for (const auto& victim : candidates) {
        if (survivable_without(victim)) {
          kill_node(victim, "chaos, during a recovery");
          ++chaos_kills_;
          break;
        }
      }
    }
  } else if (type == "recovered") {
    ++current_.recovered;
    current_.rebuild_ms = std::max(current_.rebuild_ms, m.at("rebuild_ms").get<double>());
    current_.copy_ms = std::max(current_.copy_ms, m.at("copy_ms").get<double>());
    current_.copy_bytes += m.at("copy_bytes").get<std::int64_t>();
    if (current_.recovered == static_cast<int>(current_.ranks.size())) {
      current_.all_recovered_ms = now_ms();
      step_start_ms_ = current_.all_recovered_ms;
    }
  } else if (type == "comm_error") {
    last_comm_error_ = name + ": " + m.value("what", std::string("?"));
    if (comm_error_deadline_ms_ < 0) comm_error_deadline_ms_ = now_ms() + o_.heartbeat_timeout_ms;
  }
}

// Every layer of the state after `step` is on disk: the manifest makes it a
// checkpoint, latest.json points at it, and older ones go.
void Master::finish_checkpoint(int step) {
  const std::string folder = "step-" + std::to_string(step);
  const Json manifest = {{"format", "oobleck.checkpoint.v1"},
                         {"step", step},
                         {"folder", folder},
                         {"layers", profile_.layers.size()},
                         {"seed", o_.seed},
                         {"profile_fingerprint", profile_fingerprint(profile_)}};
  sync_folder(std::filesystem::path(o_.checkpoint_dir) / folder);
  write_file_atomically(std::filesystem::path(o_.checkpoint_dir) / folder / "manifest.json", manifest.dump(2) + "\n");
  write_file_atomically(std::filesystem::path(o_.checkpoint_dir) / "latest.json", manifest.dump(2) + "\n");
  last_checkpoint_ = step;
  std::vector<std::filesystem::path> older;  // (a later one may be in the making: it stays)
  for (const auto& entry : std::filesystem::directory_iterator(o_.checkpoint_dir)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step-", 0) == 0 && std::atoi(n.c_str() + 5) < step) {
      older.push_back(entry.path());
    }
  }
  for (const auto& path : older) remove_tree(path);
}

// ---------------------------------------------------------------- decisions

void Master::advance() {
  const double now = now_ms();
  if (phase_ == Phase::Starting) {
    bool all = true;
    for (const auto& [name, node] : nodes_) all = all && node.ready;
    if (all) {
      training_start_ms_ = now;
      phase_ = Phase::Training;
      form_generation();
    } else if (now - started_ms_ > 120000) {
      throw std::runtime_error("the workers did not all connect within 120 s");
    }
    return;
  }
  if (phase_ == Phase::Finishing) {
    bool all = true;
    for (int r = 0; r < static_cast<int>(current_.ranks.size()); ++r) {
      all = all && (done_ranks_.count(r) || !nodes_.at(current_.ranks[r]).alive);
    }
    if (all || now > finish_deadline_ms_) {
      finish();
      done_ = true;
    }
    return;
  }
  if (recovery_needed_) {
    recovery_needed_ = false;
    comm_error_deadline_ms_ = -1;
    form_generation();
    return;
  }
  if (comm_error_deadline_ms_ >= 0 && now >= comm_error_deadline_ms_) {
    // A worker's communication failed and no node was lost: the same
    // members start over in a new generation from the last commit.
    comm_error_deadline_ms_ = -1;
    if (++reforms_without_progress_ > 3) {
      throw std::runtime_error("training makes no progress: " + last_comm_error_);
    }
    std::fprintf(stderr, "oobleck-run: communication failed without a lost node (%s); restarting the step\n",
                 last_comm_error_.c_str());
    chain_failure_ms_ = chain_detected_ms_ = now;
    form_generation();
  }
}

const TemplateSet& Master::templates_for(int nodes) {
  if (templates_.max_nodes < nodes) templates_ = build_templates(*cost_, std::max(nodes, 2 * templates_.max_nodes));
  return templates_;
}

// The layers each node holds by the master's account: its layers in the base
// plan once that plan has trained a step, nothing before (state is then
// (seed, layer) and needs no copy).
std::map<std::string, std::pair<int, int>> Master::base_holdings() const {
  std::map<std::string, std::pair<int, int>> out;
  if (!base_trained_) return out;
  const auto seats = seats_of(base_);
  const auto ranked = ranked_nodes(base_);
  for (std::size_t r = 0; r < seats.size(); ++r) out[ranked[r]] = {seats[r].layer_begin, seats[r].layer_end};
  return out;
}

void Master::form_generation() {
  if (current_.number > 1 && !current_.established) report_generation(current_, true);
  Generation g;
  g.number = ++generations_;
  g.resume_step = committed_ + 1;
  g.lost = lost_since_base_;
  g.added = added_since_base_;
  for (const auto& n : g.lost) g.reasons[n] = loss_reasons_[n];
  g.failure_ms = chain_failure_ms_;
  g.detected_ms = chain_detected_ms_;
  const double plan_start = now_ms();
  std::vector<Transfer> transfers;
  if (g.number == 1) {
    g.plan = initial_plan_;
    base_ = initial_plan_;
  } else {
    int survivors = static_cast<int>(ranked_nodes(base_).size() + added_since_base_.size() - lost_since_base_.size());
    try {
      Reconfiguration r = reconfigure(*cost_, templates_for(std::max(1, survivors)), base_, lost_since_base_,
                                      added_since_base_);
      g.plan = std::move(r.plan);
      transfers = std::move(r.transfers);
    } catch (const NoPlanError& e) {
      if (base_trained_) no_plan(e.what());
      // Nothing trained yet: the state is (seed, layer), so any plan of the
      // survivors will do.
      std::vector<std::string> alive;
      for (const auto& n : ranked_nodes(base_)) {
        if (std::find(lost_since_base_.begin(), lost_since_base_.end(), n) == lost_since_base_.end()) {
          alive.push_back(n);
        }
      }
      alive.insert(alive.end(), added_since_base_.begin(), added_since_base_.end());
      try {
        g.plan = instantiate(*cost_, templates_for(static_cast<int>(alive.size())), alive,
                             initial_plan_.fault_tolerance, initial_plan_.global_microbatches);
      } catch (const NoPlanError& again) {
        no_plan(again.what());
      }
      if (g.plan.pipelines.empty()) no_plan("too few nodes left for any pipeline template");
    }
  }
  g.plan_ms = now_ms() - plan_start;
  g.ranks = ranked_nodes(g.plan);
  g.trainers = static_cast<int>(seats_of(g.plan).size());
  auto rank_of = [&](const std::string& n) {
    return static_cast<int>(std::find(g.ranks.begin(), g.ranks.end(), n) - g.ranks.begin());
  };
  Json copies = Json::array();
  if (base_trained_) {
    for (const auto& t : transfers) copies.push_back({{"layer", t.layer}, {"from", rank_of(t.from_node)}, {"to", rank_of(t.to_node)}});
  }
  const std::string plan_text = plan_to_json(g.plan, templates_for(static_cast<int>(g.ranks.size())), profile_);
  const auto holdings = base_holdings();
  for (const auto& name : g.ranks) {
    const auto held = holdings.find(name);
    const auto [begin, end] = held == holdings.end() ? std::pair{0, 0} : held->second;
    Json message = {{"type", "generation"},  {"generation", g.number}, {"plan", plan_text},
                    {"ranks", g.ranks},      {"resume_step", g.resume_step}, {"holds", {begin, end}},
                    {"copies", copies}};
    // Until a step is committed after a resume, the checkpoint is the state.
    if (!base_trained_ && resume_from_step_ >= 0) message["checkpoint"] = {{"folder", resume_folder_}};
    send_worker(name, message);
  }
  g.planned_ms = now_ms();
  current_ = std::move(g);
  deferred_commit_ = -1;
  ready_.clear();
  step_start_ms_ = current_.planned_ms;
  if (current_.number > 1) {
    const std::string shape = pipeline_shape(current_.plan);
    std::fprintf(stderr, "oobleck-run: generation %d: lost %s, added %s; pipelines %s; resuming at step %d\n",
                 current_.number, join(current_.lost).c_str(), join(current_.added).c_str(), shape.c_str(),
                 current_.resume_step);
  }
}

// What the planner could not recover from, and what a checkpoint would need.
void Master::no_plan(const std::string& why) {
  const int next = committed_ + 1;
  const Bytes state = cost_->state_bytes(0, cost_->layers());
  const std::string message =
      why + ". The layers' training state after step " + std::to_string(committed_) +
      " is gone. To go on, a checkpoint must hold the state after step " + std::to_string(committed_) +
      ": the weights and AdamW state (both moments, step count) of all " + std::to_string(cost_->layers()) +
      " layers (" + std::to_string(state) + " bytes in the profile's accounting), and the step to resume at (" +
      std::to_string(next) + ") with the seed (" + std::to_string(o_.seed) +
      "): the data order depends on nothing else";
  emit({{"event", "no_plan"},
        {"generation", generations_ + 1},
        {"lost", lost_since_base_},
        {"added", added_since_base_},
        {"resume_step", next},
        {"checkpoint_bytes", state},
        {"message", message}});
  throw NoPlanError(message);
}

void Master::report_generation(const Generation& g, bool superseded) {
  const double now = now_ms();
  const double resume_ms =
      superseded ? 0.0 : std::max(0.0, now - g.planned_ms - g.rebuild_ms - g.copy_ms);
  const std::string shape = pipeline_shape(g.plan);
  Json line = {{"event", "reconfigured"},
               {"generation", g.number},
               {"lost", g.lost},
               {"added", g.added},
               {"reasons", g.reasons},
               {"resume_step", g.resume_step},
               {"pipelines", shape},
               {"detect_ms", g.failure_ms >= 0 ? g.detected_ms - g.failure_ms : 0.0},
               {"plan_ms", g.plan_ms},
               {"communicators_ms", g.rebuild_ms},
               {"copy_ms", g.copy_ms},
               {"copy_bytes", g.copy_bytes},
               {"resume_ms", resume_ms},
               {"recovery_ms", g.failure_ms >= 0 ? now - g.failure_ms : now - g.planned_ms},
               {"superseded", superseded}};
  emit(line);
  if (superseded) {
    std::printf("generation %d superseded before it trained (lost %s, added %s)\n", g.number, join(g.lost).c_str(),
                join(g.added).c_str());
  } else {
    std::printf(
        "reconfigured (generation %d): lost %s, added %s -> pipelines %s; detect %.1f ms, plan %.1f ms, "
        "communicators %.1f ms, copy %.1f ms (%lld bytes), resume %.1f ms; recovery %.1f ms\n",
        g.number, join(g.lost).c_str(), join(g.added).c_str(), shape.c_str(), line["detect_ms"].get<double>(),
        g.plan_ms, g.rebuild_ms, g.copy_ms, static_cast<long long>(g.copy_bytes), resume_ms,
        line["recovery_ms"].get<double>());
  }
  std::fflush(stdout);
}

// A step is committed once every trainer has reported it and no loss is
// pending. A node that an injection at this step adds is waited for, so that
// it joins at this boundary: scripted failures stay where the script put them.
void Master::maybe_commit(int step) {
  deferred_commit_ = -1;
  auto it = ready_.find(step);
  if (it == ready_.end() || static_cast<int>(it->second.size()) != current_.trainers || recovery_needed_) return;
  if (!awaited_joins_.empty()) {
    deferred_commit_ = step;
    return;
  }
  commit(step);
}

void Master::commit(int step) {
  const int mb = profile_.microbatch_size, expected = initial_plan_.global_microbatches * mb;
  // Every sample of the step's global batch, each exactly once.
  std::vector<std::pair<int, int>> ranges;
  double loss = 0;
  for (const auto& [rank, r] : ready_.at(step)) {
    loss += r.loss;
    if (r.first_sample >= 0) ranges.emplace_back(r.first_sample, r.samples);
  }
  std::sort(ranges.begin(), ranges.end());
  int covered = 0;
  for (const auto& [first, count] : ranges) {
    if (first != covered) {
      throw std::runtime_error("step " + std::to_string(step) + ": the pipelines' samples do not tile the batch (" +
                               std::to_string(first) + " where " + std::to_string(covered) + " was expected)");
    }
    covered += count;
  }
  if (covered != expected) {
    throw std::runtime_error("step " + std::to_string(step) + ": " + std::to_string(covered) + " samples, expected " +
                             std::to_string(expected));
  }
  const double now = now_ms();
  committed_ = step;
  samples_ += covered;
  reforms_without_progress_ = 0;
  comm_error_deadline_ms_ = -1;  // progress: an earlier communication error is moot
  const bool establishes = !current_.established;
  if (establishes) {
    current_.established = true;
    base_ = current_.plan;
    base_trained_ = true;
    lost_since_base_.clear();
    added_since_base_.clear();
  }
  const bool finish = step == o_.steps - 1;
  const bool pause = !finish && !pending_joins_.empty();
  Json message = {{"type", "commit"}, {"generation", current_.number}, {"step", step}, {"pause", pause}, {"finish", finish}};
  if (o_.checkpoint_every > 0 && ((step + 1) % o_.checkpoint_every == 0 || finish)) {
    const auto folder = std::filesystem::path(o_.checkpoint_dir) / ("step-" + std::to_string(step));
    std::filesystem::create_directories(folder);
    message["save"] = {{"folder", std::filesystem::absolute(folder).string()}, {"step", step}};
    saves_pending_[step] = std::set<std::string>(current_.ranks.begin(), current_.ranks.begin() + current_.trainers);
  }
  for (int r = 0; r < current_.trainers; ++r) send_worker(current_.ranks[r], message);
  ready_.erase(step);
  const double iteration_ms = now - step_start_ms_;
  last_iteration_ms_ = iteration_ms;
  step_start_ms_ = now;
  emit({{"step", step},
        {"loss", loss},
        {"samples", samples_},
        {"step_samples", covered},
        {"iteration_ms", iteration_ms},
        {"elapsed_ms", now - training_start_ms_},
        {"generation", current_.number}});
  std::printf("step %3d  loss %.6f  samples %lld  %.1f ms\n", step, loss, static_cast<long long>(samples_),
              iteration_ms);
  std::fflush(stdout);
  if (establishes && current_.number > 1) {
    report_generation(current_, false);
    chain_failure_ms_ = chain_detected_ms_ = -1;
  }
  if (finish) {
    phase_ = Phase::Finishing;
    finish_deadline_ms_ = now + 30000;
    for (const auto& [name, node] : nodes_) {
      if (node.alive) send_worker(name, {{"type", "finish"}});
    }
    return;
  }
  if (pause) {
    added_since_base_.insert(added_since_base_.end(), pending_joins_.begin(), pending_joins_.end());
    pending_joins_.clear();
    chain_failure_ms_ = -1;
    chain_detected_ms_ = now;
    form_generation();
  }
}

void Master::finish() {
  if (o_.checkpoint_every > 0 && last_checkpoint_ != committed_) {
    std::fprintf(stderr, "oobleck-run: warning: the checkpoint after step %d is incomplete (a node was lost while "
                 "saving); the latest complete one is after step %d\n", committed_, last_checkpoint_);
  }
  if (!o_.chrome_trace_path.empty() || !timelines_.empty()) {
    const LastStepReport report = last_step_report(current_.plan, timelines_, last_iteration_ms_);
    if (!o_.chrome_trace_path.empty()) write_file_atomically(o_.chrome_trace_path, report.chrome_trace);
    std::fputs(report.stage_summary.c_str(), stdout);
  }
  // Agents end once their worker has; wait for them a while, then make sure.
  const double deadline = now_ms() + 10000;
  while (!children_.empty() && now_ms() < deadline) {
    reap();
    if (!children_.empty()) ::usleep(10000);
  }
}

// ---------------------------------------------------------------- injections

void Master::fire(Injection& event) {
  if (event.action != Injection::Action::Add) {
    kill_node(event.node, ("--inject line " + std::to_string(event.line)).c_str(),
              event.action == Injection::Action::Hang);
    return;
  }
  if (auto it = nodes_.find(event.node); it != nodes_.end() && it->second.alive) {
    std::fprintf(stderr, "oobleck-run: --inject line %d: node %s is already running\n", event.line,
                 event.node.c_str());
    return;
  }
  if (phase_ == Phase::Finishing) return;
  std::fprintf(stderr, "oobleck-run: --inject line %d: starting node %s\n", event.line, event.node.c_str());
  start_node(event.node);
  if (event.when == Injection::When::DuringStep) awaited_joins_.insert(event.node);
}

std::vector<std::string> Master::members_alive() const {
  std::vector<std::string> out;
  for (const auto& n : current_.ranks) {
    if (nodes_.at(n).alive && nodes_.at(n).killed_ms < 0) out.push_back(n);
  }
  return out;
}

// Whether the planner still finds a plan once `victim` is lost too.
bool Master::survivable_without(const std::string& victim) {
  if (!base_trained_) return members_alive().size() > 1;
  std::vector<std::string> lost = lost_since_base_, added = added_since_base_;
  for (const auto& [name, node] : nodes_) {  // killed, not yet detected
    if (node.killed_ms >= 0 && node.alive) {
      if (std::find(added.begin(), added.end(), name) != added.end()) {
        added.erase(std::find(added.begin(), added.end(), name));
      } else if (std::find(lost.begin(), lost.end(), name) == lost.end()) {
        lost.push_back(name);
      }
    }
  }
  if (auto a = std::find(added.begin(), added.end(), victim); a != added.end()) {
    added.erase(a);
  } else {
    lost.push_back(victim);
  }
  try {
    const int survivors = static_cast<int>(ranked_nodes(base_).size() + added.size() - lost.size());
    (void)reconfigure(*cost_, templates_for(std::max(1, survivors)), base_, lost, added);
    return true;
  } catch (const NoPlanError&) {
    return false;
  } catch (const InputError&) {
    return false;
  }
}

void Master::chaos_event() {
  --chaos_left_;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int initial = static_cast<int>(ranked_nodes(initial_plan_).size());
  std::vector<std::string> candidates = members_alive();
  int alive = 0;  // members, and nodes still starting or waiting to join
  for (const auto& [name, node] : nodes_) alive += node.alive && node.killed_ms < 0;
  // Keep the node count between initial - f and initial, and otherwise
  // kills and joins even, so that a long run has as many of each.
  bool kill = alive >= initial                                       ? true
              : alive <= initial - initial_plan_.fault_tolerance ? false
              : chaos_kills_ != chaos_joins_                       ? chaos_kills_ < chaos_joins_
                                                                   : unit(chaos_rng_) < 0.5;
  if (kill) {
    std::shuffle(candidates.begin(), candidates.end(), chaos_rng_);
    kill = false;
    for (const auto& victim : candidates) {
      if (survivable_without(victim)) {
        kill_node(victim, "chaos");
        ++chaos_kills_;
        chaos_kill_in_recovery_ = unit(chaos_rng_) < 0.25;
        kill = true;
        break;
      }
    }
  }
  if (!kill) {
    const std::string name = "chaos-" + std::to_string(++chaos_joins_);
    std::fprintf(stderr, "oobleck-run: chaos: starting node %s\n", name.c_str());
    start_node(name);
  }
  std::exponential_distribution<double> gap(1.0 / o_.chaos.mean_interval_ms);
  chaos_next_ms_ = chaos_left_ > 0 ? now_ms() + gap(chaos_rng_) : -1;
}

int Master::run() {
  started_ms_ = now_ms();
  for (const auto& name : ranked_nodes(initial_plan_)) start_node(name);
  std::fprintf(stderr, "oobleck-run: %zu nodes (%zu pipelines), one agent and one worker each, steps %d..%d\n",
               nodes_.size(), initial_plan_.pipelines.size(), committed_ + 1, o_.steps - 1);
  while (!done_) {
    double wait = 50;
    const double now = now_ms();
    if (phase_ == Phase::Training) {
      for (std::size_t i = 0; i < injections_.size(); ++i) {
        if (fired_[i] || injections_[i].when != Injection::When::AtTime) continue;
        const double due = training_start_ms_ + injections_[i].time_ms;
        if (now >= due) {
          fired_[i] = true;
          fire(injections_[i]);
        } else {
          wait = std::min(wait, due - now);
        }
      }
      if (o_.chaos.enabled && chaos_left_ > 0) {
        if (chaos_next_ms_ < 0) {
          std::exponential_distribution<double> gap(1.0 / o_.chaos.mean_interval_ms);
          chaos_next_ms_ = now + gap(chaos_rng_);
        }
        if (now >= chaos_next_ms_ && current_.established) {
          chaos_event();
        } else if (now < chaos_next_ms_) {
          wait = std::min(wait, chaos_next_ms_ - now);
        }
      }
    }
    poll_once(wait);
    reap();
    const double after = now_ms();
    for (auto& [name, node] : nodes_) {
      if (!node.alive) continue;
      if (node.agent_fd >= 0 && after - node.last_heartbeat_ms > o_.heartbeat_timeout_ms) {
        lose(name, "no heartbeat for " + std::to_string(static_cast<int>(after - node.last_heartbeat_ms)) + " ms");
      } else if (!node.ready && after - node.spawned_ms > 120000) {
        lose(name, "its worker did not connect within 120 s");
      }
    }
    advance();
  }
  std::fprintf(stderr, "oobleck-run: %d steps done, %d generations\n", committed_ + 1, generations_);
  return 0;
}

}  // namespace

int run_master(const MasterOptions& options) {
  Master master(options);
  return master.run();
}

}  // namespace oobleck::executor
