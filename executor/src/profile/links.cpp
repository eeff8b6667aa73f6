#include "oobleck/executor/links.h"

#include <signal.h>
#include <sys/prctl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "profile/helper_processes.h"

namespace oobleck::executor {
namespace {

using Clock = std::chrono::steady_clock;

// Message sizes in bytes, and how often each is repeated.
constexpr std::int64_t kSizes[] = {1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 25};
constexpr int kRepeats = 7;

constexpr std::chrono::seconds kTimeout{60};

c10::intrusive_ptr<c10d::ProcessGroupGloo> connect(int rank, const c10::intrusive_ptr<c10d::TCPStore>& store) {
  auto gloo = c10d::ProcessGroupGloo::Options::create();
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  gloo->timeout = kTimeout;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, gloo);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Both processes run this; rank 0 keeps the times (ms) per size.
std::pair<std::vector<double>, std::vector<double>> exchange(c10d::ProcessGroupGloo& group, int rank) {
  std::vector<double> p2p, allreduce;
  for (std::int64_t bytes : kSizes) {
    std::vector<at::Tensor> buffer = {torch::ones({bytes / 4}, torch::kFloat32)};
    std::vector<double> one_way, reduce;
    for (int r = 0; r < kRepeats + 1; ++r) {
      const auto start = Clock::now();
      if (rank == 0) {
        group.send(buffer, 1, 0)->wait();
        group.recv(buffer, 1, 1)->wait();
      } else {
        group.recv(buffer, 0, 0)->wait();
        group.send(buffer, 0, 1)->wait();
      }
      const double round_trip = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      const auto reduce_start = Clock::now();
      group.allreduce(buffer)->wait();
      const double reduced = std::chrono::duration<double, std::milli>(Clock::now() - reduce_start).count();
      if (r > 0) {  // the first run sets up connections
        one_way.push_back(round_trip / 2);
        reduce.push_back(reduced);
      }
    }
    p2p.push_back(median(one_way));
    allreduce.push_back(median(reduce));
  }
  return {p2p, allreduce};
}

// time = latency + bytes / bandwidth, least squares on relative error.
LinkFit fit(const std::vector<double>& times_ms) {
  const int n = static_cast<int>(times_ms.size());
  Eigen::MatrixXd A(n, 2);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(n);
  for (int i = 0; i < n; ++i) {
    A(i, 0) = 1.0 / times_ms[i];
    A(i, 1) = static_cast<double>(kSizes[i]) / times_ms[i];
  }
  Eigen::Vector2d x = A.colPivHouseholderQr().solve(y);
  x(0) = std::max(0.0, x(0));
  if (x(1) <= 0) x(1) = 1e-12;
  LinkFit out;
  out.latency_ms = x(0);
  out.bytes_per_s = 1000.0 / x(1);
  out.rms_relative_error = std::sqrt((A * x - y).squaredNorm() / n);
  return out;
}

}  // namespace

LinkMeasurement measure_local_links(const std::string& program, const Progress& progress) {
  auto store = local_store_server(kTimeout);
  const std::string port = std::to_string(store->getPort());
  HelperProcesses peer(program);
  peer.start({"comm-peer", "--port", port}, "the link measurement");
  if (progress) progress("links: point-to-point and all-reduce with a second process (port " + port + ")");
  LinkMeasurement out;
  auto group = connect(0, store);
  const auto [p2p, allreduce] = exchange(*group, 0);
  out.point_to_point = fit(p2p);
  out.allreduce = fit(allreduce);
  for (std::size_t i = 0; i < allreduce.size(); ++i) {
    out.allreduce_points.push_back({2, static_cast<double>(kSizes[i]), allreduce[i]});
  }
  peer.wait("the link measurement");
  return out;
}

int run_comm_peer(int port) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the measuring process
  auto group = connect(1, local_store_client(port, kTimeout));
  (void)exchange(*group, 1);
  return 0;
}

}  // namespace oobleck::executor
