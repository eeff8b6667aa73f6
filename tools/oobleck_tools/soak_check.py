"""Checks a soak run of live recovery (tools/soak-live.sh).

What must hold however the failures fell:
  - at least --min-failures removals and --min-joins joins happened, and at
    least --min-crashes workers restarted in place and --min-rollbacks
    rollbacks past f;
  - every step's loss equals the failure-free single-process run's
    (relative difference <= --tolerance), steps trained again after a
    rollback included;
  - the steps ran 0..STEPS-1, each once, except that a rollback record from
    step F to step T is followed by steps T+1, T+2, ... again (T <= F); every
    step trained the whole global batch, each sample exactly once, and the
    sample count is that of the steps up to it;
  - no process of the run is left (those whose environment holds
    OOBLECK_SOAK_TAG=TAG).
Prints a summary; exits 1 on any problem.

  oobleck-tools soak-check LIVE.jsonl REFERENCE.jsonl PLAN.json --steps N [--process-tag TAG]
                           [--min-failures 50] [--min-joins 50] [--min-crashes 0] [--min-rollbacks 0]
                           [--tolerance 1e-4]
"""
import glob
import os

from .common import InputError, read_json, read_json_lines, read_metrics, relative_difference, require

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
    parser.add_argument("--min-crashes", type=int, default=0,
                        help="workers restarted in place wanted (default: %(default)s)")
    parser.add_argument("--min-rollbacks", type=int, default=0,
                        help="rollbacks past f wanted (default: %(default)s)")
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


def rollbacks_of(path, lines):
    """The rollback records among a metrics file's (line number, object)
    LINES, in order: (line number, from_step, to_step, source)."""
    out = []
    for number, line in lines:
        if line.get("kind") != "rollback":
            continue
        fields = [line.get(k) for k in ("from_step", "to_step")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in fields) or fields[1] > fields[0]:
            raise InputError(f"{path}:{number}: a rollback record needs integers from_step >= to_step")
        out.append((number, fields[0], fields[1], str(line.get("source", "?"))))
    return out


def expected_steps(lines, wanted_steps):
    """The step numbers the metrics' step lines must show, in order: 0, 1, ...
    and after each rollback from F to T, T+1 again (taken from the file's
    (line number, object) LINES, so rollbacks interleave with steps as they
    happened)."""
    order, next_step = [], 0
    for _, line in lines:
        if line.get("kind") == "rollback" and isinstance(line.get("to_step"), int):
            next_step = line["to_step"] + 1
        elif line.get("kind") == "step":
            order.append(next_step)
            next_step += 1
    return order, next_step == wanted_steps


def problems_of(steps, reference, batch, wanted_steps, expected=None):
    """What is wrong with the run's step lines, as short sentences.
    `expected`: (step numbers in order, whether they end at the last step),
    as expected_steps gives; without it, 0..STEPS-1 each once."""
    problems = []
    order, complete = expected if expected else (list(range(wanted_steps)), True)
    if [s["step"] for s in steps] != order or not complete:
        problems.append("steps are not 0..STEPS-1, each once (a rollback's steps again)")
    if any(s["step_samples"] != batch for s in steps):
        problems.append("a step did not train the whole batch once")
    for s in steps:
        if s["samples"] != (s["step"] + 1) * batch:
            problems.append(f"sample count {s['samples']} at step {s['step']}, expected {(s['step'] + 1) * batch}")
            break
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

    lines = read_json_lines(args.live)
    rollbacks = rollbacks_of(args.live, lines)
    crashes = sum(1 for _, line in lines if line.get("kind") == "restart")
    problems = problems_of(steps, reference, batch, args.steps, expected_steps(lines, args.steps))
    if worst > args.tolerance:
        problems.append(f"losses differ from the reference by {worst:.2e}")
    if failures < args.min_failures:
        problems.append(f"only {failures} failures (want {args.min_failures})")
    if joins < args.min_joins:
        problems.append(f"only {joins} joins (want {args.min_joins})")
    if crashes < args.min_crashes:
        problems.append(f"only {crashes} workers restarted in place (want {args.min_crashes})")
    if len(rollbacks) < args.min_rollbacks:
        problems.append(f"only {len(rollbacks)} rollbacks (want {args.min_rollbacks})")
    if left:
        problems.append(f"{left} processes left")

    recovery = sorted(e["recovery_ms"] for e in established if e["lost"])
    superseded = len(live.reconfigurations) - len(established)
    print(f"soak: {args.steps} steps, {failures} failures and {joins} joins in {len(established)} reconfigurations "
          f"({superseded} superseded by a newer failure mid-recovery)")
    if crashes or rollbacks:
        sources = sorted({r[3] for r in rollbacks})
        retrained = sum(r[1] - r[2] for r in rollbacks)
        print(f"soak: {crashes} workers restarted in place; {len(rollbacks)} rollbacks past f "
              f"({retrained} steps trained again; from {', '.join(sources) or 'nowhere'})")
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
