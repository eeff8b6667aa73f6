// A node's agent: starts the node's workers (one per GPU; on CPU each a
// process standing for one), sends the master a heartbeat, owns the node's
// snapshots in host memory (snapshots/snapshot_store.h) and reports a
// worker's end. The workers die with it (the parent-death signal).
//
// When the master goes (its connection closes), the agent and its workers
// keep their training state and wait up to master_wait_ms for a restarted
// master at the same address and port (--resume-master), and say hello to
// it again: the agent with the snapshots it holds. A master that does not
// want this node (it fenced it, or the job is over) answers Kill; with no
// master by then, the agent stops its workers and ends.
//
// With a CPU quota (--cpus, cpu_quota.h) the agent and its workers run in a
// cgroup of their own, within that many cores. A slowdown injected on
// purpose (Slow) scales that quota; without one, the agent throttles the
// workers as a quota would: in every 10 ms they run for factor x 10 ms and
// are stopped (SIGSTOP) for the rest. Either way everything they do takes
// longer, and what the master sees is only their measured times.
//
// A worker killed by a signal (a crash) is restarted in place: the new one
// reads its layers back from this agent's memory and the master has the
// generation's workers start its communicators over. With --standby-worker
// every worker, the first ones and the restarted, is forked from the
// node's worker zygote (worker_starter.h), which loaded the worker program
// once: a restart does not wait for a process to load its libraries (about
// 0.8 s of CPU for libtorch), and no such load competes with training or a
// recovery for the node's cores. A worker that exits with a failure of its own
// takes its node with it: the agent reports it, stops the others and ends.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>

#include "cpu_quota.h"
#include "launch.h"
#include "worker_starter.h"
#include "oobleck/executor/live.h"
#include "protocol/protocol.h"
#include "snapshots/snapshot_store.h"

namespace oobleck::executor {
namespace {

constexpr int kRestartsPerWorker = 16;

// SIGCHLD wakes the loop through a pipe, so that a worker's death is seen
// at once, not at the next heartbeat.
int child_pipe[2] = {-1, -1};
void wake() {
  if (child_pipe[1] >= 0) (void)!::write(child_pipe[1], "c", 1);
}
void on_child(int) {
  const int saved = errno;
  wake();
  errno = saved;
}

void watch_children() {
  if (::pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("agent: pipe");
  struct sigaction action {};
  action.sa_handler = on_child;
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &action, nullptr);
}

class Agent {
 public:
  explicit Agent(const NodeProcessOptions& options)
      : o_(options),
        channel_(channel::connect_to(options.master_addr, options.control_port, std::chrono::seconds(60))),
        snapshots_(options.master_addr == "127.0.0.1" || options.master_addr == "localhost" ? "127.0.0.1" : "0.0.0.0",
                   options.token, [this](const SnapshotSeal& s, bool mirrored) {
                     // At once: the master's ledger must not fall behind
                     // what this agent keeps (kSnapshotsKept).
                     send(protocol::SnapshotStored{s.owner, s.gpu, s.step, s.layer_begin, s.layer_end, s.degree,
                                                   s.shard, mirrored});
                   }) {}

  int run() {
    if (o_.cpus > 0) {
      try {
        quota_ = std::make_unique<CpuQuota>(
            cpu_group_name(o_.parent_pid > 0 ? o_.parent_pid : static_cast<int>(::getppid()), o_.node), o_.cpus);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "oobleck-run agent %s: --cpus %.2f: %s\n", o_.node.c_str(), o_.cpus, e.what());
        return kExitFailure;
      }
    }
    watch_children();
    starter_.emplace([this](std::vector<std::string> role) { return worker_command(std::move(role)); }, o_.token,
                     o_.standby);
    for (int gpu = 0; gpu < o_.gpus; ++gpu) workers_.push_back(starter_->start(gpu).pid);
    restarts_.assign(workers_.size(), 0);
    send(hello());
    const auto interval = std::chrono::milliseconds(static_cast<int>(o_.heartbeat_interval_ms));
    auto next_beat = std::chrono::steady_clock::now();
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_beat) {
        if (connected()) send(protocol::Heartbeat{});
        next_beat = now + interval;
      }
      auto until = next_beat;
      if (slow_factor_ < 1) until = std::min(until, next_toggle_);
      int wait_ms =
          std::max(0, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1);
      if (!connected()) wait_ms = std::min(wait_ms, 50);  // the next attempt to reach a restarted master
      pollfd watched[2] = {{child_pipe[0], POLLIN, 0}, {connected() ? channel_->fd() : -1, POLLIN, 0}};
      ::poll(watched, 2, wait_ms);
      char drained[64];
      while (::read(child_pipe[0], drained, sizeof drained) > 0) {
      }
      bool open = true;
      if (connected()) {
        std::vector<protocol::Message> messages;
        open = protocol::receive(*channel_, messages, std::chrono::milliseconds(0));
        for (const auto& m : messages) obey(m);
      }
      throttle();
      if (const auto status = reap()) {
        starter_->end();
        return *status;
      }
      if (!open) lose_master();
      if (!connected() && !reach_master()) {
        std::fprintf(stderr, "oobleck-run agent %s: no master came back within %.0f s; ending\n", o_.node.c_str(),
                     o_.master_wait_ms / 1000);
        kill_all(SIGKILL);
        int status = 0;
        while (::waitpid(-1, &status, 0) > 0) {
        }
        return kExitFailure;
      }
    }
  }

 private:
  std::vector<std::string> worker_command(std::vector<std::string> role) const {
    std::vector<std::string> args = {o_.program, "worker", "--node", o_.node, "--master-addr", o_.master_addr,
                                     "--control-port", std::to_string(o_.control_port),
                                     "--parent-pid", std::to_string(::getpid()), "--snapshot-port",
                                     std::to_string(snapshots_.port()), "--master-wait-ms",
                                     std::to_string(static_cast<std::int64_t>(o_.master_wait_ms))};
    args.insert(args.end(), role.begin(), role.end());
    return args;
  }

  // The workers, and with SIGKILL the zygote.
  void kill_all(int signal) {
    for (pid_t w : workers_) {
      if (w > 0) ::kill(w, signal);
    }
    if (signal == SIGKILL && starter_) starter_->kill();
  }

  [[nodiscard]] bool connected() const { return channel_ != nullptr; }

  protocol::Hello hello() const {
    protocol::Hello hello;
    hello.role = protocol::Role::agent;
    hello.node = o_.node;
    hello.token = o_.token;
    hello.pid = ::getpid();
    hello.worker_pids.assign(workers_.begin(), workers_.end());
    hello.snapshot_port = snapshots_.port();
    return hello;
  }

  void send(const protocol::Message& m) {
    const std::lock_guard lock(send_mutex_);
    if (channel_) protocol::send(*channel_, m);
  }

  // The master's connection closed: until a restarted one answers, what
  // the snapshot server seals is told to it in the hello instead.
  void lose_master() {
    const std::lock_guard lock(send_mutex_);
    channel_.reset();
    // A connection that ends at once was made to a master on its way out
    // (its listening socket goes last): the wait goes on from the loss.
    const auto now = std::chrono::steady_clock::now();
    if (reconnected_ && now - *reconnected_ < std::chrono::seconds(1)) return;
    master_gone_ = now;
    std::fprintf(stderr, "oobleck-run agent %s: the master went away; waiting up to %.0f s for it to come back\n",
                 o_.node.c_str(), o_.master_wait_ms / 1000);
  }

  // One attempt to reach a restarted master; false once waiting is over.
  bool reach_master() {
    auto connection = channel::try_connect(o_.master_addr, o_.control_port, std::chrono::milliseconds(200));
    if (!connection) {
      const auto waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - master_gone_);
      return waited.count() < o_.master_wait_ms;
    }
    const std::lock_guard lock(send_mutex_);
    protocol::Hello again = hello();
    for (const auto& s : snapshots_.seals()) {
      again.snapshots.push_back(
          {s.owner, s.gpu, s.step, s.layer_begin, s.layer_end, s.degree, s.shard, s.owner != o_.node});
    }
    if (protocol::send(*connection, again)) {
      channel_ = std::move(connection);
      reconnected_ = std::chrono::steady_clock::now();
    }
    return true;
  }

  void obey(const protocol::Message& m) {
    if (const auto* mirror = std::get_if<protocol::MirrorTo>(&m)) {
      snapshots_.mirror_to(mirror->host, mirror->port, mirror->every);
    } else if (const auto* crash = std::get_if<protocol::Crash>(&m)) {
      if (crash->gpu >= 0 && crash->gpu < static_cast<int>(workers_.size()) && workers_[crash->gpu] > 0)
        ::kill(workers_[crash->gpu], SIGKILL);
    } else if (const auto* slow = std::get_if<protocol::Slow>(&m)) {
      if (quota_) {
        const double factor = std::min(1.0, slow->factor);
        try {
          quota_->scale(factor);
          std::fprintf(stderr, "oobleck-run agent %s: CPU quota scaled to %.2f of %.2f cores\n", o_.node.c_str(),
                       factor, o_.cpus);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "oobleck-run agent %s: cannot slow down: %s\n", o_.node.c_str(), e.what());
        }
        return;
      }
      slow_factor_ = slow->factor;
      if (slow_factor_ >= 1 && workers_stopped_) {
        kill_all(SIGCONT);
        workers_stopped_ = false;
      }
      next_toggle_ = std::chrono::steady_clock::now();
      std::fprintf(stderr, "oobleck-run agent %s: workers throttled to %.2f of their CPU time\n", o_.node.c_str(),
                   slow_factor_);
    } else if (std::holds_alternative<protocol::Kill>(m) || std::holds_alternative<protocol::Hang>(m)) {
      // Failure injection on another host: the workers and this agent stop.
      const int signal = std::holds_alternative<protocol::Kill>(m) ? SIGKILL : SIGSTOP;
      kill_all(signal);
      ::raise(signal);
    }
  }

  // Under Slow: the workers run and stop in turn, factor of every period
  // running.
  void throttle() {
    if (slow_factor_ >= 1) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_toggle_) return;
    workers_stopped_ = !workers_stopped_;
    kill_all(workers_stopped_ ? SIGSTOP : SIGCONT);
    const double share = workers_stopped_ ? 1 - slow_factor_ : slow_factor_;
    next_toggle_ = now + std::chrono::microseconds(static_cast<std::int64_t>(share * kThrottlePeriodUs));
  }

  // Workers that ended: a crash restarts the worker; a failure of its own
  // ends the node. Returns the agent's exit status once it must end.
  std::optional<int> reap() {
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      if (starter_->reaped(pid)) continue;  // (its workers are started anew from now on)
      const auto it = std::find(workers_.begin(), workers_.end(), pid);
      if (it == workers_.end()) continue;
      const int gpu = static_cast<int>(it - workers_.begin());
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (WIFSIGNALED(status) && ++restarts_[static_cast<std::size_t>(gpu)] <= kRestartsPerWorker) {
        const WorkerStarter::Started restarted = starter_->start(gpu);
        *it = restarted.pid;
        send(protocol::WorkerRestarted{gpu, code, *it, restarted.forked});
        continue;
      }
      *it = 0;
      const bool all_done = std::all_of(workers_.begin(), workers_.end(), [](pid_t w) { return w == 0; });
      if (code != 0 || all_done) send(protocol::WorkerExit{gpu, code});
      if (code != 0) {
        kill_all(SIGKILL);
        return kExitFailure;
      }
      if (all_done) return kExitSuccess;
    }
    return std::nullopt;
  }

  NodeProcessOptions o_;
  std::unique_ptr<CpuQuota> quota_;  // with --cpus; destroyed last of what run() uses
  std::unique_ptr<channel::Connection> channel_;  // null while the master is away
  std::chrono::steady_clock::time_point master_gone_;
  std::optional<std::chrono::steady_clock::time_point> reconnected_;
  std::mutex send_mutex_;  // the loop and the snapshot server's threads; guards channel_ when it changes
  SnapshotServer snapshots_;
  std::vector<pid_t> workers_;  // by GPU; 0 once ended
  std::vector<int> restarts_;
  std::optional<WorkerStarter> starter_;  // from run() on
  static constexpr double kThrottlePeriodUs = 10000;
  double slow_factor_ = 1;  // Slow
  bool workers_stopped_ = false;
  std::chrono::steady_clock::time_point next_toggle_;
};

}  // namespace

int run_agent(const NodeProcessOptions& options) {
  Agent agent(options);
  return agent.run();
}

}  // namespace oobleck::executor
