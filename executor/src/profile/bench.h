// One measuring run's device, clock and inputs (a microbatch of tokens and
// of hidden states drawn from the seed), shared by everything it times.
#pragma once

#include <memory>

#include "oobleck/executor/gpt.h"
#include "oobleck/executor/profiler.h"

namespace oobleck::executor {

class Bench {
 public:
  explicit Bench(const MeasureOptions& options);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Layer `index` alone, one training step's worth: forward with autograd
  // on, then backward from the loss (head) or from a gradient like the
  // output. Times, sizes and the activation bytes autograd kept. A shard of
  // a tensor-parallel layer sums over its group with `sum`.
  [[nodiscard]] LayerProfile measure_layer(int index, TensorShard shard = {}, const ShardSum& sum = {});
  // The whole model, where it fits on the device with one microbatch's
  // activations; false where it does not.
  bool time_whole_model(Measurement& out);
  // The device's practical peak: a 1024x1024 matrix product and a 256 MiB copy.
  void time_device_peak(Measurement& out);
  // The whole model's optimizer step as workers take it, its weights and
  // optimizer state being `state_bytes`: the rate it streams them at
  // (read and written once). False where they do not fit the device.
  bool time_optimizer_step(Measurement& out, double state_bytes);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace oobleck::executor
