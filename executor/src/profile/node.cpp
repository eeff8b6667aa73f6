// A node of G GPUs measured as G local worker processes, as oobleck-run
// trains on CPU (each worker `threads` threads standing for one GPU).
//
// For every degree t dividing G, the G workers form G/t tensor-parallel
// groups of t (worker r holds shard r mod t of group r / t) and all of them
// time every layer at once: worker 0's times are the profile's. So the
// degree-1 times are those of a worker whose node is busy, not of one
// process alone on the machine, and the degree-t times hold the group's
// all-reduces (Gloo, between processes) as a training step has them.
//
// The embedding and the LM head are replicated at every degree (gpt.h):
// each worker of their stage computes them whole, exactly as at degree 1,
// so their degree-t entries repeat the degree-1 times rather than a second,
// noisier measurement of the same work.
//
// The measuring process is worker 0; it starts the others
// (`node-peer --port P --rank R`) and hands them its options through the
// rendezvous store.
#include <sys/prctl.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/host_memory.h"
#include "oobleck/executor/profiler.h"
#include "profile/bench.h"
#include "profile/helper_processes.h"
#include "profile/node.h"

namespace oobleck::executor {
namespace {

using json = nlohmann::json;

constexpr char kHost[] = "127.0.0.1";
constexpr char kOptionsKey[] = "node measurement options";
// A worker waits this long for the others (they time the same layers).
constexpr std::chrono::milliseconds kTimeout{std::chrono::minutes(10)};

std::string options_json(const MeasureOptions& o) {
  return json{{"model", json::parse(model_json(o.model, o.dtype))},
              {"microbatch_size", o.microbatch_size},
              {"threads", o.threads},
              {"warmup", o.warmup},
              {"repeats", o.repeats},
              {"seed", o.seed},
              {"gpus_per_node", o.gpus_per_node}}
      .dump();
}

MeasureOptions options_of(const std::string& text) {
  const json j = json::parse(text);
  MeasureOptions o;
  o.model = parse_model_config(j.at("model").dump(), "node measurement");
  o.dtype = "fp32";
  o.microbatch_size = j.at("microbatch_size");
  o.threads = j.at("threads");
  o.warmup = j.at("warmup");
  o.repeats = j.at("repeats");
  o.seed = j.at("seed");
  o.gpus_per_node = j.at("gpus_per_node");
  return o;
}

// Every worker runs this; worker 0's result is the measurement.
std::vector<NodeDegreeTimes> time_as_worker(const MeasureOptions& o, int rank,
                                            const c10::intrusive_ptr<c10d::Store>& store,
                                            const Progress& progress) {
  if (o.threads > 0) torch::set_num_threads(o.threads);
  const int gpus = o.gpus_per_node;
  const auto node = make_gloo_communicator(store, "node", rank, gpus, kHost, kTimeout);
  Bench bench(o);
  const int layers = pipeline_layers(o.model);
  std::vector<NodeDegreeTimes> out;
  for (int degree = 1; degree <= gpus; ++degree) {
    if (gpus % degree != 0 || !tensor_parallel_fits(o.model, degree)) continue;
    const TensorShard shard{degree, rank % degree};
    std::unique_ptr<Communicator> group;
    if (degree > 1) {
      group = make_gloo_communicator(
          store, "degree " + std::to_string(degree) + " group " + std::to_string(rank / degree), shard.index, degree,
          kHost, kTimeout);
    }
    const ShardSum sum = group ? ShardSum([&group](torch::Tensor& t) { group->allreduce_sum(t); }) : ShardSum();
    NodeDegreeTimes times{degree, {}};
    for (int i = 0; i < layers; ++i) {
      if (degree > 1 && (i == 0 || i == layers - 1)) {  // replicated: degree 1's work
        times.layers.push_back(out.front().layers[static_cast<std::size_t>(i)]);
        continue;
      }
      node->barrier();
      if (rank == 0 && progress) {
        progress("node of " + std::to_string(gpus) + " workers, degree " + std::to_string(degree) + ": layer " +
                 std::to_string(i + 1) + "/" + std::to_string(layers) + " (" + layer_name(o.model, i) + ")");
      }
      const LayerProfile measured = bench.measure_layer(i, shard, sum);
      times.layers.push_back({measured.forward_ms, measured.backward_ms, measured.activation_bytes});
    }
    out.push_back(std::move(times));
  }
  node->barrier();
  return out;
}

}  // namespace

std::vector<NodeDegreeTimes> measure_node(const MeasureOptions& options, const Progress& progress) {
  if (options.device != "cpu") {
    throw InputError("--gpus-per-node " + std::to_string(options.gpus_per_node) +
                     ": a node of several GPUs is measured on CPU only (as that many worker processes); on CUDA, "
                     "measure one GPU and let the planner derive the tensor-parallel times");
  }
  if (options.program.empty()) throw std::logic_error("measure_node: no program to start the node's workers with");
  auto store = local_store_server(kTimeout);
  const std::string text = options_json(options);
  store->set(kOptionsKey, std::vector<std::uint8_t>(text.begin(), text.end()));
  HelperProcesses workers(options.program);
  const std::string port = std::to_string(store->getPort());
  for (int rank = 1; rank < options.gpus_per_node; ++rank) {
    workers.start({"node-peer", "--port", port, "--rank", std::to_string(rank)}, "the node measurement");
  }
  auto out = time_as_worker(options, 0, store, progress);
  workers.wait("the node measurement");
  return out;
}

int run_node_peer(int port, int rank) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the measuring process
  auto store = local_store_client(port, kTimeout);
  const auto bytes = store->get(kOptionsKey);
  keep_freed_host_memory();
  const MeasureOptions options = options_of(std::string(bytes.begin(), bytes.end()));
  (void)time_as_worker(options, rank, store, {});
  return 0;
}

}  // namespace oobleck::executor
