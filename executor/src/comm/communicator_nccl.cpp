// NCCL through its own API. The unique id travels through the rendezvous
// store. Sends and receives run on their own streams, ordered after the
// compute stream's work, so that a send waiting for its peer never holds up
// a receive (1F1B sends and receives in both directions at once).
#include "communicator.h"

#ifdef OOBLECK_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <stdexcept>

namespace oobleck::executor {
namespace {

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw CommunicationError(std::string(what) + ": " + ncclGetErrorString(result));
}
void check(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw CommunicationError(std::string(what) + ": " + cudaGetErrorString(result));
}

ncclDataType_t nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kInt64: return ncclInt64;
    default: throw std::invalid_argument("nccl: unsupported tensor type");
  }
}

class NcclPending final : public PendingOp {
 public:
  NcclPending(cudaEvent_t done, torch::Tensor keep) : done_(done), keep_(std::move(keep)) {}
  ~NcclPending() override { cudaEventDestroy(done_); }
  void wait() override { check(cudaEventSynchronize(done_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t done_;
  torch::Tensor keep_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                   int device)
      : rank_(rank), size_(size) {
    check(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    const std::string key = name + "/nccl-unique-id";
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store->set(key, std::vector<std::uint8_t>(id.internal, id.internal + sizeof id.internal));
    } else {
      const auto bytes = store->get(key);
      std::copy(bytes.begin(), bytes.end(), id.internal);
    }
    ncclComm_t comm = nullptr;
    check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    comm_ = comm;
    check(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&recv_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    if (ncclComm_t comm = comm_.exchange(nullptr)) ncclCommDestroy(comm);
    cudaStreamDestroy(send_stream_);
    cudaStreamDestroy(recv_stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int peer, int /*tag*/) override {
    usable();
    auto t = tensor.contiguous();
    after_compute(send_stream_);
    check(ncclSend(t.data_ptr(), t.numel(), nccl_type(t), peer, comm_, send_stream_), "ncclSend");
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, send_stream_), "cudaEventRecord");
    return std::make_unique<NcclPending>(done, t);
  }
  void recv(torch::Tensor& tensor, int peer, int /*tag*/) override {
    usable();
    after_compute(recv_stream_);
    check(ncclRecv(tensor.data_ptr(), tensor.numel(), nccl_type(tensor), peer, comm_, recv_stream_), "ncclRecv");
    before_compute(recv_stream_);
  }
  // Ordered before the compute stream's next work: nothing to wait for here.
  void allreduce_sum(torch::Tensor& tensor) override { (void)start_allreduce_sum(tensor); }
  std::unique_ptr<PendingOp> start_allreduce_sum(torch::Tensor& tensor) override {
    usable();
    after_compute(recv_stream_);
    check(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor), ncclSum, comm_,
                        recv_stream_),
          "ncclAllReduce");
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, recv_stream_), "cudaEventRecord");
    before_compute(recv_stream_);
    return std::make_unique<NcclPending>(done, tensor);
  }
  void barrier() override {
    auto one = torch::ones({1}, torch::TensorOptions().device(torch::kCUDA));
    allreduce_sum(one);
    check(cudaStreamSynchronize(recv_stream_), "cudaStreamSynchronize");
  }
  void abort() override {
    if (ncclComm_t comm = comm_.exchange(nullptr)) ncclCommAbort(comm);
  }

 private:
  void usable() const {
    if (comm_ == nullptr) throw CommunicationAborted();
  }
  // The compute stream is the legacy default stream, where libtorch runs
  // unless told otherwise.
  static void after_compute(cudaStream_t stream) {
    cudaEvent_t ready;
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(ready, nullptr), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
  }
  static void before_compute(cudaStream_t stream) {
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(nullptr, done, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(done);
  }

  int rank_, size_;
  std::atomic<ncclComm_t> comm_{nullptr};  // null once aborted
  cudaStream_t send_stream_ = nullptr, recv_stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& name, int rank, int size, int device) {
  return std::make_unique<NcclCommunicator>(store, name, rank, size, device);
}

}  // namespace oobleck::executor

#else

namespace oobleck::executor {

std::unique_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>&, const std::string&, int,
                                                     int, int) {
  throw std::runtime_error("this build has no NCCL: rebuild where CUDA and NCCL are found, or train on CPU (Gloo)");
}

}  // namespace oobleck::executor

#endif
