#!/usr/bin/env bash
# The installed package as another project sees it:
#   - `cmake --install` of the built tree into a fresh prefix holds the
#     programs, the CMake package and the bundled profiles, and names neither
#     the build nor the source tree (nor the build-only warnings target);
#   - the installed oobleck-plan runs and prints the project's version;
#   - tests/consumer, configured with find_package(oobleck) against that
#     prefix alone, builds, plans 13 A100 nodes for GPT-3 175B with f = 1
#     through oobleck::plan_cluster (13 is prime: its two or more pipelines
#     cannot all be alike) and plays the plan in the simulator: at
#     least f+1 pipelines, each covering every layer once and in order, every
#     node and microbatch handed out, the same pipeline sizes as the installed
#     oobleck-plan's, and an iteration that takes time;
#   - where this tree built the executor, its programs and headers are
#     installed and the consumer links oobleck::executor as well;
#   - where it built the Python module, `import oobleck` from the prefix
#     plans as the installed oobleck-plan does.
# Usage: install-consumer.sh BUILD [SCRATCH]
#   BUILD: the configured and built tree; SCRATCH: where the prefix and the
#   consumer's build go (default BUILD/install-consumer-test), remade each run.
# CMAKE_COMMAND, CMAKE_GENERATOR, CXX, CMAKE_CXX_COMPILER_LAUNCHER,
# CMAKE_PREFIX_PATH (where the prefix is searched first), CXXFLAGS and
# LDFLAGS, when set, are what the consumer is configured with (CTest sets
# them from BUILD's configuration).
# OOBLECK_WITH_EXECUTOR (ON or OFF; CTest sets it) says whether BUILD was
# configured with the executor; unset, the executor is not checked.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 BUILD [SCRATCH]" >&2; exit 2; }
build="$(cd "$1" && pwd)"
scratch="${2:-$build/install-consumer-test}"
cmake="${CMAKE_COMMAND:-cmake}"
rm -rf "$scratch"
mkdir -p "$scratch"
scratch="$(cd "$scratch" && pwd)"
prefix="$scratch/prefix"
failed=0
fail() {
  echo "FAILED: $*"
  failed=1
}

echo "== cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$scratch/install.txt"
for file in bin/oobleck-plan bin/oobleck-sim include/oobleck/planner.h include/oobleck/sim/iteration.h \
            share/oobleck/profiles/gpt3-175b-a100.analytic.json; do
  [ -e "$prefix/$file" ] || fail "$file is not installed"
done
# The executor's programs and headers exactly where this tree built them
# (a program left in BUILD/bin by an earlier configuration does not count).
with_executor="${OOBLECK_WITH_EXECUTOR:-}"
for file in bin/oobleck-run bin/oobleck-profile include/oobleck/executor/gpt.h; do
  if [ "$with_executor" = ON ] && [ ! -e "$prefix/$file" ]; then fail "$file is not installed"; fi
  if [ "$with_executor" = OFF ] && [ -e "$prefix/$file" ]; then fail "$file is installed without the executor"; fi
done
config="$(find "$prefix" -name oobleckConfig.cmake)"
[ -n "$config" ] || fail "no oobleckConfig.cmake under $prefix"
[ -n "$(find "$prefix" -name oobleckConfigVersion.cmake)" ] || fail "no oobleckConfigVersion.cmake under $prefix"
if grep -rlF -e "$build" -e "$root/" "$(dirname "$config")"; then
  fail "the CMake package above names the build or the source tree"
fi
if grep -rl oobleck_warnings "$(dirname "$config")"; then
  fail "the exported targets above hand on oobleck_warnings"
fi

echo "== the installed oobleck-plan --version"
version="$(sed -n 's/^project(oobleck VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
printed="$("$prefix/bin/oobleck-plan" --version)"
[ "$printed" = "oobleck-plan $version" ] || fail "oobleck-plan --version printed '$printed', not 'oobleck-plan $version'"

echo "== tests/consumer: find_package(oobleck), build, run"
"$cmake" -S "$root/tests/consumer" -B "$scratch/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" > "$scratch/consumer-configure.txt" 2>&1 ||
  { cat "$scratch/consumer-configure.txt"; fail "the consumer does not configure"; exit 1; }
found_executor=OFF
if grep -q "oobleck::executor found" "$scratch/consumer-configure.txt"; then found_executor=ON; fi
if [ -n "$with_executor" ] && [ "$found_executor" != "$with_executor" ]; then
  fail "the consumer found oobleck::executor: $found_executor, built: $with_executor"
fi
"$cmake" --build "$scratch/consumer" > "$scratch/consumer-build.txt" 2>&1 ||
  { cat "$scratch/consumer-build.txt"; fail "the consumer does not build"; exit 1; }

profile="$prefix/share/oobleck/profiles/gpt3-175b-a100.analytic.json"
nodes=13 f=1 batch=64
"$scratch/consumer/plan_pipelines" "$profile" "$nodes" "$f" "$batch" > "$scratch/consumer.txt"
cat "$scratch/consumer.txt"
# Each pipeline's stages must run from layer 0 to the last, each starting
# where the one before ended.
awk -v f="$f" -v batch="$batch" -v nodes="$nodes" '
  $1 == "layers" { layers = $2 }
  $1 == "pipelines" { declared = $2 }
  $1 == "spare_nodes" { used = $2 }
  $1 == "microbatches" { handed = $2 }
  $1 == "pipeline" {
    seen++; used += $4
    n = split($8, stages, ","); at = 0
    for (i = 1; i <= n; i++) {
      split(stages[i], range, "-")
      if (range[1] != at || range[2] <= range[1]) { print "FAILED: pipeline " $2 " stage " stages[i] " after layer " at; bad = 1 }
      at = range[2]
    }
    if (at != layers) { print "FAILED: pipeline " $2 " ends at layer " at ", not " layers; bad = 1 }
  }
  $1 == "planned_ms" && !($4 > 0) { print "FAILED: the simulated iteration takes " $4 " ms"; bad = 1 }
  END {
    if (layers <= 0) { print "FAILED: no layers"; bad = 1 }
    if (seen != declared) { print "FAILED: " seen " pipelines printed, " declared " declared"; bad = 1 }
    if (seen < f + 1) { print "FAILED: " seen " pipelines cannot survive " f " failures"; bad = 1 }
    if (used != nodes) { print "FAILED: " used " nodes in pipelines and spare, not " nodes; bad = 1 }
    if (handed != batch) { print "FAILED: " handed " microbatches handed out, not " batch; bad = 1 }
    exit bad
  }' "$scratch/consumer.txt" || failed=1

# Linked with the executor (libtorch loaded), the same program plans alike.
if [ -x "$scratch/consumer/plan_pipelines_with_executor" ]; then
  "$scratch/consumer/plan_pipelines_with_executor" "$profile" "$nodes" "$f" "$batch" > "$scratch/consumer-executor.txt"
  cmp -s "$scratch/consumer.txt" "$scratch/consumer-executor.txt" ||
    fail "linked with oobleck::executor, the consumer printed something else (consumer-executor.txt)"
fi

# The library called from outside and the installed program agree.
"$prefix/bin/oobleck-plan" instantiate --profile "$profile" --nodes "$nodes" --fault-tolerance "$f" \
  --global-microbatches "$batch" --json - > "$scratch/oobleck-plan.json"
from_program="$(grep -o '"template_nodes": *[0-9]*' "$scratch/oobleck-plan.json" | grep -o '[0-9]*$' | xargs)"
from_library="$(awk '$1 == "pipeline" { print $4 }' "$scratch/consumer.txt" | xargs)"
[ -n "$from_library" ] && [ "$from_program" = "$from_library" ] ||
  fail "oobleck-plan instantiate makes pipelines of ($from_program) nodes, the consumer of ($from_library)"

# The Python module, where this tree built it: imported from the prefix
# alone, it plans as the installed program does.
module="$(find "$prefix" -name 'oobleck.cpython-*.so' | head -1)"
if [ -n "$module" ]; then
  echo "== import oobleck from $(dirname "$module")"
  from_module="$(cd "$scratch" && PYTHONPATH="$(dirname "$module")" /usr/bin/python3 -c '
import sys, oobleck
plan = oobleck.plan_cluster(oobleck.load_profile(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
print(" ".join(str(p["template_nodes"]) for p in plan.pipelines))' "$profile" "$nodes" "$f" "$batch")" ||
    fail "the installed module does not import or plan"
  [ "$from_module" = "$from_program" ] ||
    fail "the installed module makes pipelines of ($from_module) nodes, oobleck-plan of ($from_program)"
fi

if [ "$failed" -ne 0 ]; then exit 1; fi
echo "install-consumer: passed"
