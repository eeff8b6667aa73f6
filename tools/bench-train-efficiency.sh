#!/usr/bin/env bash
# oobleck-run --single-process against the same training written in plain
# PyTorch (tools/pytorch_gpt_reference.py), side by side in one run: the
# same model, initial weights, data order, batch and optimizer. Both sides
# run ROUNDS times, alternately, the side going first alternating by round;
# each run trains STEPS steps and its first WARMUP steps are left out. The
# summary (tools/oobleck-tools train-efficiency) gives tokens per second,
# the model FLOPs utilisation against PEAK_TFLOPS (when given), and
# oobleck's speed over each reference's; rows land in OUT/train-efficiency.json.
#
#   tools/bench-train-efficiency.sh [--short] [BUILD_DIR] [OUT_DIR] [MODEL:SEQ:MB:MICROBATCHES ...]
#       DEVICE=cpu|cuda THREADS=1 ROUNDS=3 STEPS=6 WARMUP=2 PEAK_TFLOPS= COMPILE=auto PYTHON=python3
#       REFERENCES=auto|none
#
# Default spec: gpt-mini:128:4:8 on the CPU, where the reference runs as
# PyTorch picks its BLAS kernels (eager) and, where oobleck picks others,
# with oobleck's choice too (eager-blas). On CUDA the profile is bf16 and
# the references are eager PyTorch with F.scaled_dot_product_attention and,
# when COMPILE is not 0 and PyTorch has it, the same under torch.compile.
# REFERENCES=none runs oobleck alone.
# --short: one round of 3 steps (a smoke run for the test command). Exit 0
# when every side ran, 2 when one failed or the input is bad.
set -euo pipefail
cd "$(dirname "$0")/.."
short=0
if [ "${1:-}" = --short ]; then
  short=1
  shift
fi
build=${1:-build}
out=${2:-$build/train-efficiency}
shift 2 2>/dev/null || shift $#
specs=("$@")
device=${DEVICE:-cpu} threads=${THREADS:-1} rounds=${ROUNDS:-3} steps=${STEPS:-6} warmup=${WARMUP:-2}
python=${PYTHON:-python3} compile=${COMPILE:-auto}
if ((short)); then rounds=1 steps=3 warmup=1; fi
((${#specs[@]})) || specs=(gpt-mini:128:4:8)
die() {
  echo "bench-train-efficiency: $*" >&2
  exit 2
}
bin=$build/bin
for program in oobleck-run oobleck-plan oobleck-profile; do
  [ -x "$bin/$program" ] || die "$bin/$program: not built"
done
case $device in cpu) dtype=fp32 ;; cuda) dtype=bf16 ;; *) die "DEVICE: expected cpu or cuda, got $device" ;; esac
references=(eager)
if [ "${REFERENCES:-auto}" = none ]; then references=(); fi
# The first Python that has PyTorch; on Debian, its python3-torch (the same
# libtorch as oobleck's), installed when missing and running as root.
if [ -z "${PYTHON:-}" ]; then
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch' 2>/dev/null; then
      python=$candidate
      break
    fi
  done
fi
if ((${#references[@]})) && ! "$python" -c 'import torch' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
    echo "bench-train-efficiency: installing Debian's python3-torch" >&2
    if ! apt-cache show python3-torch > /dev/null 2>&1; then apt-get update >&2; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-torch >&2
    python=/usr/bin/python3
  fi
  "$python" -c 'import torch' 2>/dev/null || die "$python: no PyTorch (on Debian: apt-get install python3-torch)"
fi
# On the CPU, oobleck's programs choose OpenBLAS's kernels by the CPU's
# instruction sets where OpenBLAS falls back to its oldest ones
# (executor/include/oobleck/executor/blas_kernels.h, the same rule); PyTorch
# is then also run with that choice (eager-blas), beside its default.
blas_core=
if [ "$device" = cpu ] && ((${#references[@]})) && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
  if has avx512f avx512bw avx512dq avx512vl; then
    blas_core=SkylakeX
  elif has avx2 fma; then
    blas_core=Haswell
  fi
  if [ -n "$blas_core" ]; then references+=(eager-blas); fi
fi
if ((${#references[@]})) && [ "$device" = cuda ] && [ "$compile" != 0 ] &&
  "$python" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null; then
  references+=(compile)
fi
mkdir -p "$out"
"$bin/oobleck-run" tokenize --text executor/data/corpus.txt --out "$out/tokens.bin" > /dev/null

runs=()
for spec in "${specs[@]}"; do
  IFS=: read -r model seq mb microbatches <<<"$spec"
  [ -n "$microbatches" ] || die "$spec: expected MODEL:SEQ:MB:MICROBATCHES"
  name=$model-s$seq-mb$mb-x$microbatches
  profile=$out/$name.profile.json plan=$out/$name.plan.json
  # The profile only carries the model, its dtype and the microbatch size.
  "$bin/oobleck-profile" analytic --model "$model" --hardware h200 --seq-len "$seq" --microbatch-size "$mb" \
    --dtype "$dtype" --out "$profile" > /dev/null
  "$bin/oobleck-plan" instantiate --profile "$profile" --nodes 1 --fault-tolerance 0 \
    --global-microbatches "$microbatches" --json "$plan" > /dev/null
  for ((round = 0; round < rounds; ++round)); do
    sides=(oobleck "${references[@]}")
    if ((round % 2)) && ((${#references[@]})); then sides=("${references[@]}" oobleck); fi
    for side in "${sides[@]}"; do
      result=$out/$name.$side.$round
      echo "== $name, round $((round + 1))/$rounds: $side" >&2
      case $side in
        oobleck)
          OMP_NUM_THREADS=$threads "$bin/oobleck-run" --single-process --plan "$plan" --profile "$profile" \
            --data "$out/tokens.bin" --steps "$steps" --device "$device" --threads "$threads" \
            --metrics "$result.jsonl" > "$result.log" 2>&1 || die "oobleck-run failed: $(tail -3 "$result.log")"
          ;;
        eager | eager-blas | compile)
          flags=() environment=()
          if [ "$side" = compile ]; then flags=(--compile); fi
          if [ "$side" = eager-blas ]; then environment=("OPENBLAS_CORETYPE=$blas_core"); fi
          env "${environment[@]}" OMP_NUM_THREADS=$threads "$python" tools/pytorch_gpt_reference.py --profile "$profile" --plan "$plan" \
            --data "$out/tokens.bin" --steps "$steps" --device "$device" --threads "$threads" "${flags[@]}" \
            --json "$result.json" > "$result.log" 2>&1 || die "the PyTorch reference ($side) failed: $(tail -3 "$result.log")"
          ;;
      esac
      runs+=("$name=$profile=$side=$result")
    done
  done
done
peak=()
if [ -n "${PEAK_TFLOPS:-}" ]; then peak=(--peak-tflops "$PEAK_TFLOPS"); fi
tools/oobleck-tools train-efficiency --warmup "$warmup" --device "$device" --threads "$threads" "${peak[@]}" \
  --json "$out/train-efficiency.json" "${runs[@]}"
