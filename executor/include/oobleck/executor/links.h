// Communication measured among local processes with the project's
// communicator (Gloo through libtorch's c10d on CPU): point-to-point and
// all-reduce, each fitted as time = latency + bytes / bandwidth.
#pragma once

#include <string>
#include <vector>

#include "oobleck/planner.h"

namespace oobleck::executor {

struct LinkFit {
  double bytes_per_s = 0;
  Milliseconds latency_ms = 0;
  double rms_relative_error = 0;
};

struct LinkMeasurement {
  LinkFit point_to_point;  // one message, one way
  LinkFit allreduce;       // between two processes
  std::vector<AllreducePoint> allreduce_points;  // the medians the fit was made from
};

// Starts a second process (`program` with the arguments `comm-peer --port P`)
// and measures between it and this one.
[[nodiscard]] LinkMeasurement measure_local_links(const std::string& program, const Progress& progress = {});

// The second process's side; returns its exit status.
int run_comm_peer(int port);

}  // namespace oobleck::executor
