// One pipeline's passes played in 1F1B order, as `oobleck-sim iteration`
// plays them: what a plan's price rests on, where T(M) = first + (M - 1) x
// period (steady_period.h, what the template and composition searches
// weigh) only bounds it.
//
// Stage s runs its passes one at a time in the order of one_f_one_b(s, S,
// M), each once its input is there: a forward once the activation has
// arrived from s - 1 (stage 0: at once), a backward once the gradient has
// arrived from s + 1 (the last stage: after its own forward, which comes
// first in its order). Each boundary has a link per direction that carries
// one transfer at a time, in the order the sending stage finished its
// passes: a transfer leaves at max(the pass's end, the link's last
// arrival) and arrives C later. Every start is the latest of what it waits
// for, so the passes taken in any order where each follows what it waits
// for compute the whole schedule, with nothing guessed: such an order
// depends only on (devices, chunks, microbatches) and is made once per
// shape (played_pipeline.cpp).
//
// With one microbatch this is first_microbatch_ms; as M grows its
// increments settle on the steady period. It is mostly shorter than first
// + (M - 1) x period: the first microbatches' round trip through the later
// stages overlaps passes that the formula counts one after another
// (GPT-mini's four stages of 50-86 ms: 30 ms shorter from M = 2 on). Where
// links are slow it can be a little longer: a link carries one transfer at
// a time, and the formula's period does not queue them.
#pragma once

#include <vector>

#include "oobleck/planner.h"

namespace oobleck::detail {

struct PlayedPipeline {
  Milliseconds end_ms = 0;                     // the last pass ends
  std::vector<Milliseconds> last_backward_ms;  // per stage, its last backward's end
};

// forward_ms, backward_ms: per stage, one microbatch's pass; transfer_ms:
// per boundary s | s + 1, one way (S - 1 of them). With `interleave` v > 1
// the stages are virtual, S = D v of them, stage s on device s mod D, and
// each device runs its passes one at a time in the order of
// interleaved_one_f_one_b (common/one_f_one_b.h); each boundary between
// virtual stages has its own links.
[[nodiscard]] PlayedPipeline play_pipeline(const std::vector<Milliseconds>& forward_ms,
                                           const std::vector<Milliseconds>& backward_ms,
                                           const std::vector<Milliseconds>& transfer_ms, int microbatches,
                                           int interleave = 1);

// The same play by sweeps over the devices, each running the passes it
// can, until none can: what play_pipeline does for shapes too large to
// keep an order of (2 S M over 2^18 passes), and its tests' reference.
[[nodiscard]] PlayedPipeline play_pipeline_by_sweeps(const std::vector<Milliseconds>& forward_ms,
                                                     const std::vector<Milliseconds>& backward_ms,
                                                     const std::vector<Milliseconds>& transfer_ms, int microbatches,
                                                     int interleave = 1);

// `stages` as the cost model prices them, each stage's passes divided by
// its speed (null: all at 1).
[[nodiscard]] PlayedPipeline play_pipeline(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                                           const std::vector<double>* stage_speeds = nullptr, int interleave = 1);

// Their ends alone, the same values: what a search weighs, without
// keeping each stage's last backward (a store a pass).
[[nodiscard]] Milliseconds played_end_ms(const std::vector<Milliseconds>& forward_ms,
                                         const std::vector<Milliseconds>& backward_ms,
                                         const std::vector<Milliseconds>& transfer_ms, int microbatches,
                                         int interleave = 1);
[[nodiscard]] Milliseconds played_end_ms(const CostModel& cost, const std::vector<Stage>& stages, int microbatches,
                                         int interleave = 1);

}  // namespace oobleck::detail
