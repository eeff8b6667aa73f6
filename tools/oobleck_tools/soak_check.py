"""Checks a soak run of live recovery (tools/soak-live.sh).

What must hold however the failures fell:
  - at least --min-failures removals and --min-joins joins happened;
  - every step's loss equals the failure-free single-process run's
    (relative difference <= --tolerance);
  - the steps ran 0..STEPS-1, each once; every step trained the whole global
    batch, each sample exactly once, and the sample count grew by each step's
    samples;
  - no process of the run is left (those whose environment holds
    OOBLECK_SOAK_TAG=TAG).
Prints a summary; exits 1 on any problem.

  oobleck-tools soak-check LIVE.jsonl REFERENCE.jsonl PLAN.json --steps N [--process-tag TAG]
                           [--min-failures 50] [--min-joins 50] [--tolerance 1e-4]
"""
import glob
import os

from .common import InputError, read_json, read_metrics, relative_difference, require

TAG_VARIABLE = "OOBLECK_SOAK_TAG"


def add_arguments(parser):
    parser.add_argument("live", metavar="LIVE.jsonl", help="oobleck-run --metrics of the soak run")
    parser.add_argument("reference", metavar="REFERENCE.jsonl",
                        help="oobleck-run --single-process --metrics of the same steps")
    parser.add_argument("plan", metavar="PLAN.json", help="the plan the soak run started from")
    parser.add_argument("--steps", type=int, required=True, help="steps the run was asked for")
    parser.add_argument("--process-tag", metavar="TAG",
                        help=f"count the processes whose environment holds {TAG_VARIABLE}=TAG as left over")
    parser.add_argument("--min-failures", type=int, default=50, help="removals wanted (default: %(default)s)")
    parser.add_argument("--min-joins", type=int, default=50, help="joins wanted (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative loss difference accepted (default: %(default)g)")


def tagged_processes(tag):
    """Ids of the processes (this one aside) whose environment holds
    OOBLECK_SOAK_TAG=TAG; those this user cannot read are not seen."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        pid = int(path.split("/")[2])
        if pid == os.getpid():
            continue
        try:
            with open(path, "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        if marker in variables:
            found.append(pid)
    return found


def problems_of(steps, reference, batch, wanted_steps):
    """What is wrong with the run's step lines, as short sentences."""
    problems = []
    if [s["step"] for s in steps] != list(range(wanted_steps)):
        problems.append("steps are not 0..STEPS-1, each once")
    if any(s["step_samples"] != batch for s in steps):
        problems.append("a step did not train the whole batch once")
    counted = 0
    for s in steps:
        counted += s["step_samples"]
        if s["samples"] != counted:
            problems.append(f"sample count {s['samples']} at step {s['step']}, expected {counted}")
            break
    if steps and steps[-1]["samples"] != wanted_steps * batch:
        problems.append("sample count is off")
    missing = [s["step"] for s in steps if s["step"] not in reference]
    if missing:
        problems.append(f"the reference has no step {missing[0]}")
    return problems


def run(args):
    live = read_metrics(args.live, step_fields=("step", "loss", "samples", "step_samples"))
    reference = {s["step"]: s["loss"] for s in read_metrics(args.reference).steps}
    plan = read_json(args.plan)
    microbatches = require(plan, "global_microbatches", args.plan)
    microbatch_size = require(require(plan, "profile", args.plan, lambda v: isinstance(v, dict), "an object"),
                              "microbatch_size", f"{args.plan}: profile")
    batch = microbatches * microbatch_size
    if args.steps < 1:
        raise InputError("--steps must be at least 1")
    steps = live.steps
    # Every removal and join shows up in exactly one established reconfiguration.
    established = live.established()
    failures = sum(len(e["lost"]) for e in established)
    joins = sum(len(e["added"]) for e in established)
    worst = max((relative_difference(s["loss"], reference[s["step"]]) for s in steps if s["step"] in reference),
                default=0.0)
    left = len(tagged_processes(args.process_tag)) if args.process_tag else 0

    problems = problems_of(steps, reference, batch, args.steps)
    if worst > args.tolerance:
        problems.append(f"losses differ from the reference by {worst:.2e}")
    if failures < args.min_failures:
        problems.append(f"only {failures} failures (want {args.min_failures})")
    if joins < args.min_joins:
        problems.append(f"only {joins} joins (want {args.min_joins})")
    if left:
        problems.append(f"{left} processes left")

    recovery = sorted(e["recovery_ms"] for e in established if e["lost"])
    superseded = len(live.reconfigurations) - len(established)
    print(f"soak: {args.steps} steps, {failures} failures and {joins} joins in {len(established)} reconfigurations "
          f"({superseded} superseded by a newer failure mid-recovery)")
    if recovery:
        print(f"soak: recovery after a failure: median {recovery[len(recovery) // 2]:.0f} ms, "
              f"max {recovery[-1]:.0f} ms")
    print(f"soak: largest relative loss difference to the single-process run: {worst:.2e}")
    print(f"soak: processes left: {left}")
    if problems:
        print("soak: FAILED: " + "; ".join(problems))
        return 1
    print("soak: passed")
    return 0
