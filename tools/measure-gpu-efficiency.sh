#!/usr/bin/env bash
# Everything profiles/<gpu>/train-efficiency.json and its README section
# report, measured on this machine's CUDA GPU in one go, most important
# first, each part given what is left of DEADLINE_S seconds:
#   1. builds with tools/build-cuda.sh (only what changed, where BUILD_DIR was built before);
#   2. the model's GPU tests: fused against plain attention, the padded head,
#      the fused AdamW step, the norms, snapshot copies on a stream of their own;
#   3. tools/run-gpu.sh: a live run, its workers sharing the GPU, against the
#      simulator, with deterministic kernels (losses bit for bit), and the
#      same run with snapshots every step against none;
#   4. tools/bench-train-efficiency.sh: GPT-3 1.3B (2048 tokens) and GPT-2 XL
#      (1024 tokens), one process, bf16, against eager PyTorch (and GPT-3
#      1.3B against torch.compile);
#   5. the per-layer profile of GPT-3 1.3B (tools/measure-gpu.sh), for
#      refitting the analytic model;
#   6. eager PyTorch's and torch.compile's steps on GPT-3 1.3B, operator by
#      operator (tools/pytorch_gpt_reference.py --kernel-table);
#   7. GPT-2 XL's per-layer profile;
#   8. oobleck on GPT-3 1.3B with OOBLECK_PLAIN_KERNELS=1, to show what the
#      fused kernels bring;
#   9. GPT-2 XL under torch.compile (its compilation takes longest).
# Logs and results land in OUT_DIR; each part's log is OUT_DIR/NN-part.log.
#
#   tools/measure-gpu-efficiency.sh [BUILD_DIR] [OUT_DIR]     DEADLINE_S=540 PEAK_TFLOPS=989
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-cuda}
out=${2:-$build/gpu-efficiency}
deadline=$((SECONDS + ${DEADLINE_S:-540}))
peak=${PEAK_TFLOPS:-989}  # dense bf16 of an H100 or H200 (SXM)
mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
tag=gpu
case $gpu in *H200*) tag=h200 ;; *H100*) tag=h100 ;; esac
echo "measure-gpu-efficiency: $gpu ($tag), results in $out" >&2
nvidia-smi > "$out/nvidia-smi.txt" 2>&1

# part NAME COMMAND...: runs it with what time is left, logs it, and notes
# its status and duration in OUT_DIR/parts.txt.
part() {
  local name=$1
  shift
  local left=$((deadline - SECONDS))
  if ((left < 20)); then
    echo "$name: skipped (no time left)" | tee -a "$out/parts.txt" >&2
    return 1
  fi
  local began=$SECONDS status=0
  echo "== $name ($left s left)" >&2
  timeout --kill-after=5 "$left" "$@" > "$out/$name.log" 2>&1 || status=$?
  echo "$name: exit $status after $((SECONDS - began)) s" | tee -a "$out/parts.txt" >&2
  tail -4 "$out/$name.log" >&2
  return $status
}

# Always: a build folder left by an earlier call is brought up to date.
TARGETS="oobleck-run oobleck-profile oobleck-plan oobleck-sim executor_tests" part 01-build tools/build-cuda.sh "$build" ||
  exit 2
part 02-tests "$build/bin/executor_tests" -tc="model:*,communicator: NCCL*,snapshot copies:*"
STEPS=12 SNAPSHOT_ROUNDS=${SNAPSHOT_ROUNDS:-2} part 03-live-run tools/run-gpu.sh "$build" "$out/live-run"
DEVICE=cuda THREADS=8 ROUNDS=1 STEPS=5 WARMUP=2 PEAK_TFLOPS=$peak \
  part 04-efficiency-gpt3-1.3b tools/bench-train-efficiency.sh "$build" "$out/efficiency-gpt3-1.3b" gpt3-1.3b:2048:4:4
DEVICE=cuda THREADS=8 ROUNDS=1 STEPS=5 WARMUP=2 PEAK_TFLOPS=$peak COMPILE=0 \
  part 04-efficiency-gpt2-xl tools/bench-train-efficiency.sh "$build" "$out/efficiency-gpt2-xl" gpt2-xl:1024:8:4
part 05-profile-gpt3-1.3b tools/measure-gpu.sh "$build" "$out/profiles" "$tag" gpt3-1.3b:2048:4:bf16
# Where eager PyTorch and torch.compile spend the step, operator by operator,
# on the profile and plan of part 4.
spec=$out/efficiency-gpt3-1.3b/gpt3-1.3b-s2048-mb4-x4
for mode in eager compile; do
  flags=()
  if [ "$mode" = compile ]; then flags=(--compile); fi
  part "06-kernels-$mode-gpt3-1.3b" python3 tools/pytorch_gpt_reference.py --profile "$spec.profile.json" \
    --plan "$spec.plan.json" --data "$out/efficiency-gpt3-1.3b/tokens.bin" --steps 3 --device cuda --threads 8 \
    "${flags[@]}" --kernel-table "$out/kernels-$mode-gpt3-1.3b.txt"
done
part 07-profile-gpt2-xl tools/measure-gpu.sh "$build" "$out/profiles" "$tag" gpt2-xl:1024:8:bf16
OOBLECK_PLAIN_KERNELS=1 DEVICE=cuda THREADS=8 ROUNDS=1 STEPS=4 WARMUP=2 PEAK_TFLOPS=$peak REFERENCES=none \
  part 08-plain-kernels-gpt3-1.3b tools/bench-train-efficiency.sh "$build" "$out/plain-gpt3-1.3b" gpt3-1.3b:2048:4:4
# torch.compile of GPT-2 XL's 48 blocks takes longest (more than the minute
# left on 2026-11-27 and 11-28): it goes last.
DEVICE=cuda THREADS=8 ROUNDS=1 STEPS=5 WARMUP=2 PEAK_TFLOPS=$peak \
  part 09-compiled-gpt2-xl tools/bench-train-efficiency.sh "$build" "$out/compiled-gpt2-xl" gpt2-xl:1024:8:4
echo "measure-gpu-efficiency: done in $SECONDS s" >&2
