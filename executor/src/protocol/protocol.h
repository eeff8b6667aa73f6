// The control protocol of a live run: every message between the master and
// the agents and workers, one struct each, and its JSON line on the wire.
// No message type is spelled anywhere else.
//
//   agent  -> master  Hello, Heartbeat, WorkerExit, WorkerRestarted,
//                     SnapshotStored
//   master -> agent   Kill, Hang, Crash, Slow (failure injection),
//                     MirrorTo
//   worker -> master  Hello, Recovering, Recovered, Started, Passed, Ready,
//                     CommunicationFailed, RestoreFailed, Saved, Done
//   master -> worker  Welcome, NewGeneration, Commit, Finish
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "channel.h"

namespace oobleck::executor::protocol {

enum class Role { agent, worker };

// A worker's snapshot sealed in this agent's memory (snapshot_store.h):
// its own node's (mirrored false) or another node's, mirrored here.
struct SnapshotStored {
  std::string owner;
  int gpu = 0, step = 0, layer_begin = 0, layer_end = 0, degree = 1, shard = 0;
  bool mirrored = false;
};

// The first message on every connection; `token` proves it is of this job.
// Agents and workers say it again to a restarted master, with what that
// one must know: a worker the generation (wire number) it is in (0: none
// yet, it holds no state), an agent the snapshots it holds.
struct Hello {
  Role role = Role::agent;
  std::string node, token;
  std::int64_t pid = 0;
  int gpu = 0;                            // a worker's GPU on its node
  std::vector<std::int64_t> worker_pids;  // an agent's workers, by GPU
  int snapshot_port = 0;                  // an agent's snapshot server
  int generation = 0;                     // a worker's
  std::vector<SnapshotStored> snapshots;  // an agent's, to a restarted master
};
struct Heartbeat {};
// The agent's worker of GPU `gpu` ended with `status`.
struct WorkerExit {
  int gpu = 0;
  int status = 0;
};
struct Kill {};
struct Hang {};
// Kill the worker of GPU `gpu` alone (SIGKILL); the agent restarts it.
struct Crash {
  int gpu = 0;
};
// Throttle this node's workers to `factor` of their CPU time (1: no more),
// as a throttled GPU or a noisy neighbour would slow them.
struct Slow {
  double factor = 1;
};
// The agent restarted its worker of GPU `gpu`, which had died of `status`
// (128 + signal); the new one is `pid`.
struct WorkerRestarted {
  int gpu = 0, status = 0;
  std::int64_t pid = 0;
  bool standby = false;  // the new worker was a standby, started ahead
};
// Forward this node's snapshots to the agent at host:port (0: nowhere).
struct MirrorTo {
  std::string host;
  int port = 0;
  int every = 1;  // the snapshots of steps s with (s + 1) % every == 0
};

// The job's configuration, sent to a worker once it said hello.
struct Welcome {
  std::string profile;  // the profile, as JSON text
  std::string profile_origin, data, device;
  int steps = 0, threads = 1, store_port = 0;
  std::uint64_t seed = 0;
  std::int64_t comm_timeout_ms = 0;
  double learning_rate = 3e-3;
  int snapshot_every = 0;  // steps between snapshots in the agent's memory (0: none)
  bool deterministic = false;  // use_deterministic_kernels on a GPU
};

// One shard of a layer's state (shard from_shard of from_degree) sent from
// worker rank `from` to worker rank `to` of the generation.
struct LayerCopy {
  int layer = 0, from = 0, to = 0;
  int from_degree = 1, from_shard = 0;
  friend bool operator==(const LayerCopy&, const LayerCopy&) = default;
};
// One shard of a layer in a snapshot server's memory: host:port holds it
// under `owner`.
struct SnapshotSource {
  int layer = 0, degree = 1, shard = 0;
  std::string owner, host;
  int port = 0;
  friend bool operator==(const SnapshotSource&, const SnapshotSource&) = default;
};
// The gradient sums of layer `layer` kept for the resumed step, sent from
// worker rank `from` (which held them in its pipeline of the generation
// before) to worker rank `to` (whose seat's shard they are).
struct SumCopy {
  int layer = 0, from = 0, to = 0;
  friend bool operator==(const SumCopy&, const SumCopy&) = default;
};
// A generation: its plan, its nodes in rank order (worker rank = node rank
// x gpus_per_node + GPU), the step it resumes at, what this worker holds of
// the state after the step before (shard holds_shard of holds_degree of
// layers [holds_begin, holds_end)) and the copies that complete it, or the
// snapshot or checkpoint to read. A worker that does not hold its layers
// (restarted in place) and every worker of a rollback (`discard_held`)
// reads them from the snapshot of `snapshot_step` in `snapshot`, or from
// the checkpoint.
//
// The step it resumes at is trained on the plan's split of the global batch,
// unless `step_listed`: then this worker's pipeline trains the microbatches
// `step_microbatches` (of the global batch) instead, and where
// `kept_microbatches` is not empty its gradient sums already hold those,
// from the generation before, whose passes it finished: it keeps them, each
// layer's its own or, where `sum_copies` names it as the receiver, sent by
// the worker that held that layer (recovery::kept_sum_copies).
struct NewGeneration {
  int generation = 0;
  std::string plan;  // the plan, as JSON text
  std::vector<std::string> ranks;
  int resume_step = 0;
  int holds_begin = 0, holds_end = 0;
  int holds_degree = 1, holds_shard = 0;
  std::vector<LayerCopy> copies;
  std::string checkpoint_folder;  // empty: the state is the replicas' (or the seed's)
  int snapshot_step = -1;
  std::vector<SnapshotSource> snapshot;
  bool discard_held = false;
  bool step_listed = false;
  std::vector<int> step_microbatches, kept_microbatches;
  std::vector<SumCopy> sum_copies;
};

// Save the state after `step` into `folder`, each layer by its first holder.
struct Save {
  std::string folder;
  int step = 0;
};
// Apply `step`. `pause`: a new generation follows at this boundary.
struct Commit {
  int generation = 0, step = 0;
  bool pause = false, finish = false;
  std::optional<Save> save;
};
struct Finish {};

struct Recovering {
  int generation = 0;
};
struct Recovered {
  int generation = 0;
  double rebuild_ms = 0, copy_ms = 0;
  std::int64_t copy_bytes = 0;
};
// The first forward pass of `step` ran (rank 0 says it).
struct Started {
  int generation = 0, step = 0;
};
// A trainer's forward and backward passes of `step` are over: its gradient
// sums hold them until it begins the next step.
struct Passed {
  int generation = 0, step = 0;
};
// Samples [first, first + count) of the global batch.
struct SampleRange {
  int first = 0, count = 0;
};
// A trainer finished `step` and waits for its commit; `loss` is its share.
struct Ready {
  int generation = 0, step = 0;
  double loss = 0;
  std::vector<SampleRange> samples;  // first stages: what they consumed
  // The step's forward and backward passes, waits for neighbours left out:
  // what the master's straggler detector compares with the profile.
  double compute_ms = 0;
  // The optimizer step that ended the step before (with the wait for that
  // step's snapshot, which reads what it changes): the node's own work
  // after the passes, which a slow node also does slowly. 0: none timed.
  double optimizer_ms = 0;
};
struct CommunicationFailed {
  int generation = 0;
  std::string what;
  // A snapshot the worker was to read is not at its holder: the step, and
  // the holder's snapshot port (-1, 0: not this kind of failure).
  int missing_snapshot_step = -1;
  int missing_snapshot_port = 0;
  // The gradient sums the generation let it keep changed (it had begun
  // training again in the generation before): the master must not count on them.
  bool sums_lost = false;
};
// The checkpoint the generation restores from does not read back (a file
// missing, truncated or of another model): `what` names the file.
struct RestoreFailed {
  int generation = 0;
  std::string what;
};
struct Saved {
  int generation = 0, step = 0;
};

// The last step as a worker timed it: each pass and the optimizer step.
struct TimedOp {
  // F forward, B backward, O optimizer; T and t: a tensor-parallel
  // all-reduce within the forward or the backward pass
  char kind = 'F';
  int index = 0;    // the microbatch
  double start_ms = 0, end_ms = 0;
};
struct StepTimeline {
  double step_start_ms = 0, compute_ms = 0, wait_ms = 0, sync_ms = 0, optimizer_ms = 0;
  double tensor_parallel_ms = 0;  // all-reduces within the passes (part of compute_ms)
  std::vector<TimedOp> ops;
};
struct Done {
  int generation = 0;
  std::optional<StepTimeline> timeline;
};

using Message = std::variant<Hello, Heartbeat, WorkerExit, Kill, Hang, Welcome, NewGeneration, Commit, Finish,
                             Recovering, Recovered, Started, Ready, CommunicationFailed, Saved, Done, Crash,
                             WorkerRestarted, SnapshotStored, MirrorTo, Slow, RestoreFailed, Passed>;

// A line that is not a message of this protocol.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One line of JSON (no newline), and back. decode throws ProtocolError.
[[nodiscard]] std::string encode(const Message& message);
[[nodiscard]] Message decode(std::string_view line);
[[nodiscard]] std::string_view type_name(const Message& message);

// Over a connection. send: false when the peer is gone. receive: as
// Connection::receive, decoding each line; a line that does not decode is
// reported through `malformed` (its error), or dropped without one.
bool send(channel::Connection& connection, const Message& message);
bool receive(channel::Connection& connection, std::vector<Message>& out, std::chrono::milliseconds timeout,
             std::vector<std::string>* malformed = nullptr);

}  // namespace oobleck::executor::protocol
