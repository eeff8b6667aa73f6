#!/usr/bin/env bash
# Sets up a small live run in folder OUT: a profile, a plan and the bundled
# corpus as tokens (OUT/profile.json, OUT/plan.json, OUT/tokens.bin; each
# program's output in OUT/*.txt).
#   tiny: GPT-tiny (or --model llama-tiny) on CPU-like nodes with too little
#         memory for the model on one node (OUT/hw.json), analytic profile; by
#         default six nodes with f = 2 (three 2-node pipelines) and 12
#         microbatches.
#   mini: GPT-mini measured on this CPU (1 thread, microbatch 4 x 128 tokens)
#         with 130 MB of memory per node (--memory-mb), so the model needs
#         two nodes; by default five nodes with f = 1 and 8 microbatches, 3
#         repeats.
#
#   tools/cluster-setup.sh tiny|mini OUT [--nodes N] [--fault-tolerance F]
#                          [--global-microbatches B] [--repeats R (mini)]
#                          [--memory-mb M (mini; 400 fits the model on one node)]
#                          [--gpus-per-node G (a worker process each; mini
#                          measures its profile as nodes of G)]
#                          [--model gpt-tiny|llama-tiny (tiny)]
#
# The programs are build/bin's, or OOBLECK_BIN's when set (another build).
set -euo pipefail
usage="usage: tools/cluster-setup.sh tiny|mini OUT [--nodes N] [--fault-tolerance F] [--global-microbatches B] [--repeats R] [--memory-mb M] [--gpus-per-node G] [--model gpt-tiny|llama-tiny]"
if [ $# -lt 2 ]; then echo "$usage" >&2; exit 2; fi
model=$1 out=$2
shift 2
case $model in
  tiny) nodes=6 f=2 microbatches=12 repeats= gpus=1 tiny_model=gpt-tiny ;;
  mini) nodes=5 f=1 microbatches=8 repeats=3 gpus=1 tiny_model= memory_mb=130 ;;
  *) echo "cluster-setup: unknown set-up '$model' (tiny or mini)" >&2; exit 2 ;;
esac
while [ $# -gt 0 ]; do
  if [ $# -lt 2 ]; then echo "cluster-setup: $1 needs a value" >&2; exit 2; fi
  case $1 in
    --nodes) nodes=$2 ;;
    --fault-tolerance) f=$2 ;;
    --global-microbatches) microbatches=$2 ;;
    --gpus-per-node) gpus=$2 ;;
    --model)
      case $model:$2 in
        tiny:gpt-tiny|tiny:llama-tiny) tiny_model=$2 ;;
        *) echo "cluster-setup: --model is gpt-tiny or llama-tiny, for tiny" >&2; exit 2 ;;
      esac ;;
    --memory-mb)
      if [ "$model" != mini ]; then echo "cluster-setup: --memory-mb is for mini" >&2; exit 2; fi
      memory_mb=$2 ;;
    --repeats)
      if [ "$model" != mini ]; then echo "cluster-setup: --repeats is for mini (tiny's profile is analytic)" >&2; exit 2; fi
      repeats=$2 ;;
    *) echo "cluster-setup: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
  shift 2
done
bin="${OOBLECK_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}"
corpus="$(cd "$(dirname "$0")/.." && pwd)/executor/data/corpus.txt"
mkdir -p "$out"

# Runs a program with its stdout in OUT/NAME.txt and its stderr in
# OUT/NAME.err, shown only when it fails.
quietly() {
  local name=$1
  shift
  if ! "$@" > "$out/$name.txt" 2> "$out/$name.err"; then
    echo "cluster-setup: $* failed:" >&2
    cat "$out/$name.err" >&2
    exit 1
  fi
}

if [ "$model" = tiny ]; then
  cat > "$out/hw.json" <<JSON
{"name": "small nodes", "gpus_per_node": $gpus, "gpu_memory_bytes": 4e6, "peak_fp32_flops_per_s": 1e11,
 "memory_bytes_per_s": 2e10, "intra_node_bytes_per_s": 2e9, "inter_node_bytes_per_s": 2e9, "latency_ms": 0.05}
JSON
  quietly profile "$bin/oobleck-profile" analytic --model "$tiny_model" --hardware "$out/hw.json" --microbatch-size 2 \
    --seq-len 32 --dtype fp32 --out "$out/profile.json"
else
  quietly profile "$bin/oobleck-profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --threads 1 \
    --repeats "$repeats" --gpus-per-node "$gpus" --memory-bytes "${memory_mb}000000" --out "$out/profile.json"
fi
quietly plan "$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes "$nodes" --fault-tolerance "$f" \
  --global-microbatches "$microbatches" --json "$out/plan.json"
quietly tokens "$bin/oobleck-run" tokenize --text "$corpus" --out "$out/tokens.bin"
