"""Searches a memory budget per node that splits a model into pipelines of given sizes.

Used by tools/run-gpu.sh to make a model that fits one GPU need several nodes
per pipeline.

Lowers the profile's gpu_memory_bytes from the whole model's need (weights,
optimizer state, and activations of 4 microbatches in flight) in 5 % steps
until oobleck-plan instantiates NODES nodes as pipelines of exactly the
wanted sizes; writes that profile and plan. Exits 1 when no budget does.

  oobleck-tools memory-budget PROFILE.json OUT_PROFILE.json OUT_PLAN.json [--nodes 5]
                              [--fault-tolerance 1] [--global-microbatches 8] [--pipelines 2 3]
                              [--oobleck-plan build/bin/oobleck-plan]
"""
import os
import subprocess
import sys
import tempfile

from .common import REPOSITORY, ProgramError, copy_file, read_json, require, write_json

# The activations of this many microbatches are counted as in flight at once.
MICROBATCHES_IN_FLIGHT = 4
# Budgets tried, as a share of the whole model's need: 100 %, 95 %, ... 10 %.
SHARES = [percent / 100 for percent in range(100, 5, -5)]


def add_arguments(parser):
    parser.add_argument("profile", metavar="PROFILE.json", help="a profile of the model on one node")
    parser.add_argument("out_profile", metavar="OUT_PROFILE.json", help="the profile with the budget found")
    parser.add_argument("out_plan", metavar="OUT_PLAN.json", help="its plan")
    parser.add_argument("--nodes", type=int, default=5, help="nodes to plan (default: %(default)s)")
    parser.add_argument("--fault-tolerance", type=int, default=1, help="f (default: %(default)s)")
    parser.add_argument("--global-microbatches", type=int, default=8, help="B (default: %(default)s)")
    parser.add_argument("--pipelines", type=int, nargs="+", default=[2, 3], metavar="NODES",
                        help="the pipeline sizes wanted, in nodes (default: 2 3)")
    parser.add_argument("--oobleck-plan", default=str(REPOSITORY / "build/bin/oobleck-plan"), metavar="PATH",
                        help="the oobleck-plan program (default: build/bin/oobleck-plan in this repository)")


def model_need(doc, path):
    """Bytes the whole model needs on one node."""
    layers = require(doc, "layers", path, lambda v: isinstance(v, list) and v, "a non-empty list")
    need = 0
    for index, layer in enumerate(layers):
        where = f"{path}: layers[{index}]"
        need += (require(layer, "param_bytes", where) + require(layer, "optimizer_bytes", where)
                 + MICROBATCHES_IN_FLIGHT * require(layer, "activation_bytes", where))
    return need


def run(args):
    doc = read_json(args.profile)
    require(doc, "hardware", args.profile, lambda v: isinstance(v, dict), "an object")
    need = model_need(doc, args.profile)
    wanted = sorted(args.pipelines)
    with tempfile.TemporaryDirectory() as folder:
        profile, plan = os.path.join(folder, "profile.json"), os.path.join(folder, "plan.json")
        for share in SHARES:
            doc["hardware"]["gpu_memory_bytes"] = int(need * share)
            write_json(profile, doc)
            try:
                result = subprocess.run([args.oobleck_plan, "instantiate", "--profile", profile, "--nodes",
                                         str(args.nodes), "--fault-tolerance", str(args.fault_tolerance),
                                         "--global-microbatches", str(args.global_microbatches), "--json", plan],
                                        capture_output=True, text=True)
            except OSError as error:
                raise ProgramError(f"cannot run {args.oobleck_plan}: {error.strerror}") from None
            if result.returncode != 0:
                continue  # no plan at this budget: try a smaller one
            pipelines = require(read_json(plan), "pipelines", plan, lambda v: isinstance(v, list), "a list")
            sizes = sorted(len(require(p, "nodes", f"{plan}: a pipeline", lambda v: isinstance(v, list), "a list"))
                           for p in pipelines)
            if sizes == wanted:
                copy_file(profile, args.out_profile)
                copy_file(plan, args.out_plan)
                print(f"memory per node: {share:.0%} of the model's: pipelines of "
                      f"{' and '.join(map(str, wanted))} nodes", file=sys.stderr)
                return 0
    print(f"memory-budget: no memory budget gives pipelines of {' and '.join(map(str, wanted))} nodes",
          file=sys.stderr)
    return 1
