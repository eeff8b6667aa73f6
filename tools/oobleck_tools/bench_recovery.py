"""Recovery by cause against a restart of the whole job from a checkpoint (tools/bench-recovery.sh).

Reads oobleck-run metrics:
  LIVE.jsonl          node losses within f (reconfiguration lines after a
                      loss: states copied from surviving replicas) and worker
                      crashes restarted in place (restart lines: the new
                      process reads its state from its agent's memory);
  --past-f SOURCE METRICS LABEL  (repeatable) a run that lost more than f
                      and rolled back (rollback lines) to SOURCE: memory (the
                      snapshots of the nodes that took them), mirror or
                      checkpoint; LABEL names its row.
  --crashes-without-standby METRICS  a run whose workers crashed with
                      --no-standby-workers (each restarted as a new process):
                      a row beside LIVE.jsonl's crashes.
  --master-restart METRICS STATE ERR  a run whose master killed itself
                      (kill-master: ERR, its standard error, says when) and
                      was resumed at once with --resume-master STATE: from
                      the kill to the restarted master's generation (its
                      process, the reconnections), and to the next
                      completed step.
then times REPEATS restarts: oobleck-run --resume CHECKPOINT launched with
RUN_ARGS, from launch to its first completed step (watched in its metrics).
A restart costs the detection measured live plus that launch.

For each cause, the median of: detection; restore, the slowest worker's state
load (copied from replicas within f, read from memory, mirrors or disk past
f; for a crash, the new worker's read from its agent's memory, with its
process start and communicators beside it); the time from the failure to the next completed step;
the steps a rollback trains again; and the time until the interrupted step is
done again (the same as the previous one without a rollback). Prints them
side by side with the restart, with ratios, and writes OUT/result.json.

  oobleck-tools bench-recovery LIVE.jsonl CHECKPOINT --out DIR [--repeats 3]
                               [--past-f SOURCE METRICS LABEL ...] [--crashes-without-standby METRICS]
                               [--oobleck-run build/bin/oobleck-run] -- RUN_ARGS...
"""
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .common import (REPOSITORY, InputError, Metrics, ProgramError, parse_metrics_line, read_json_lines, require,
                     write_json)

# The parts of a recovery within f, by their keys in read_recoveries' dicts.
PARTS = [("detect_ms", "detection"), ("plan_ms", "planning (reconfigure)"),
         ("communicators_ms", "communicators rebuilt"), ("restore_ms", "layer states copied"),
         ("step_ms", "the interrupted step, redone")]
POLL_S = 0.002
PASSES_ARGUMENTS = True  # RUN_ARGS after "--"
RESULT_FORMAT = "oobleck.bench-recovery.v2"
ROLLBACK_SOURCES = ("memory", "mirror", "checkpoint")
STEP_FIELDS = ("step", "loss", "elapsed_ms", "generation")
RECONFIGURATION_FIELDS = ("generation", "lost", "detect_ms", "plan_ms", "communicators_ms", "copy_ms", "resume_ms",
                          "recovery_ms", "superseded")
# What each row's restore is, as printed under the table.
RESTORE_MEANING = {
    "replicas": "layer states copied from surviving replicas",
    "own memory": "the new worker's state read from its agent's memory (its process start and communicators: below)",
    "own memory, whole": "a new process, its communicators, and its state read from its agent's memory (not split)",
    "memory": "layer states read from the snapshots in the agents' memory",
    "mirror": "layer states read from the snapshots mirrored to other nodes' agents",
    "checkpoint": "layer states read from the checkpoint on disk",
    "kept": "a new master process, its agents and workers reconnected; they kept their state (nothing read)",
}
# What the metrics do not hold, so that no row can show it.
NOT_RECORDED = [
    "the whole-job restart's state load: a resumed job's first generation writes no reconfiguration line",
    "the bytes a rollback restores: copy_bytes counts only copies between workers",
]


def add_arguments(parser):
    parser.add_argument("live", metavar="LIVE.jsonl", help="oobleck-run --metrics of a run with failures")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="the checkpoint folder the restarts resume from")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="where the restarts write their metrics, and result.json goes")
    parser.add_argument("--repeats", type=int, default=3, help="restarts timed; the median counts (default: 3)")
    parser.add_argument("--past-f", nargs=3, action="append", default=[], metavar=("SOURCE", "METRICS", "LABEL"),
                        help="a run that rolled back past f to SOURCE (memory, mirror or checkpoint); repeatable")
    parser.add_argument("--crashes-without-standby", metavar="METRICS",
                        help="a run whose workers crashed with --no-standby-workers")
    parser.add_argument("--master-restart", nargs=3, metavar=("METRICS", "STATE", "ERR"),
                        help="a run whose master was killed (kill-master) and resumed with --resume-master STATE")
    parser.add_argument("--oobleck-run", default=str(REPOSITORY / "build/bin/oobleck-run"), metavar="PATH",
                        help="the oobleck-run program (default: build/bin/oobleck-run in this repository)")
    parser.add_argument("--restart-steps", type=int, default=6, help="--steps of each restart (default: 6)")
    parser.epilog = "RUN_ARGS: oobleck-run options shared with the live run (--plan, --profile, --data, ...)"


# ---------------------------------------------------------------- reading

@dataclass
class Recoveries:
    """The recoveries of one metrics file, each a dict of the same fields:
    source, detect_ms, plan_ms, communicators_ms (None for a crash),
    restore_ms, step_ms (the step after the restore), recovery_ms (failure
    to the next completed step), steps_lost, back_ms (failure to the
    interrupted step done again)."""
    path: str
    losses: list = field(default_factory=list)     # within f
    crashes: list = field(default_factory=list)    # restarted in place
    rollbacks: list = field(default_factory=list)  # past f, established


def _check(line, where, fields):
    for name, check, description in fields:
        require(line, name, where, check, description)


def _integer(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


RESTART_FIELDS = [("generation", _integer, "an integer"), ("node", lambda v: isinstance(v, str), "a string"),
                  ("resume_step", _integer, "an integer"), ("detect_ms", _number, "a number"),
                  ("restore_ms", _number, "a number"), ("recovery_ms", _number, "a number")]
ROLLBACK_FIELDS = [("generation", _integer, "an integer"), ("from_step", _integer, "an integer"),
                   ("to_step", _integer, "an integer"),
                   ("source", lambda v: v in ROLLBACK_SOURCES, "one of " + ", ".join(ROLLBACK_SOURCES))]


def read_recoveries(path):
    """Every recovery in the metrics file at PATH, sorted by cause;
    InputError naming the file and line when a line is malformed or a
    rollback's steps are missing."""
    path = str(path)
    metrics = Metrics(path=path)
    numbered_steps, restarts, rollback_lines = [], [], []
    for number, line in read_json_lines(path):
        parse_metrics_line(path, number, line, metrics, STEP_FIELDS, RECONFIGURATION_FIELDS)
        kind = line.get("kind")
        if kind == "step":
            numbered_steps.append((number, line))
        elif kind == "restart":
            _check(line, f"{path}:{number}", RESTART_FIELDS)
            restarts.append(line)
        elif kind == "rollback":
            _check(line, f"{path}:{number}", ROLLBACK_FIELDS)
            rollback_lines.append((number, line))

    out = Recoveries(path=path)
    rolled_back = {r["generation"] for _, r in rollback_lines}
    established = {r["generation"]: r for r in metrics.established()}
    for r in metrics.established():
        if r["lost"] and r["generation"] not in rolled_back:
            out.losses.append({"source": "replicas", "detect_ms": r["detect_ms"], "plan_ms": r["plan_ms"],
                               "communicators_ms": r["communicators_ms"], "restore_ms": r["copy_ms"],
                               # (with the wait for kept pipelines' passes)
                               "step_ms": r["resume_ms"] + r.get("held_ms", 0.0), "recovery_ms": r["recovery_ms"],
                               "steps_lost": 0, "back_ms": r["recovery_ms"]})
    for r in restarts:
        # (Lines written before the restore was split hold its whole.)
        split = all(_number(r.get(key)) for key in ("process_ms", "communicators_ms", "read_ms"))
        out.crashes.append({"source": "own memory" if split else "own memory, whole", "detect_ms": r["detect_ms"],
                            "plan_ms": None, "communicators_ms": r["communicators_ms"] if split else None,
                            "restore_ms": r["read_ms"] if split else r["restore_ms"],
                            "process_ms": r["process_ms"] if split else None,
                            "standby": r.get("standby") is True,
                            "step_ms": r["recovery_ms"] - r["detect_ms"] - r["restore_ms"],
                            "recovery_ms": r["recovery_ms"], "steps_lost": 0, "back_ms": r["recovery_ms"]})
    for number, rollback in rollback_lines:
        g = rollback["generation"]
        r = established.get(g)
        if r is None:
            continue  # replaced by a newer generation before it trained
        where = f"{path}:{number}"
        first = next((s for _, s in numbered_steps if s["generation"] == g), None)
        if first is None:
            raise InputError(f"{where}: generation {g} trained, yet no step line of it follows")
        # The first step of the generation is committed at the moment its
        # reconfiguration line is written, so its time less the recovery is
        # the failure's.
        failure_ms = first["elapsed_ms"] - r["recovery_ms"]
        interrupted = rollback["from_step"] + 1
        again = next((s for n, s in numbered_steps if n > number and s["step"] == interrupted), None)
        if again is None:
            raise InputError(f"{where}: the run ended before step {interrupted}, the one the failure interrupted, "
                             "was trained again (give it more --steps)")
        out.rollbacks.append({"source": rollback["source"], "detect_ms": r["detect_ms"], "plan_ms": r["plan_ms"],
                              "communicators_ms": r["communicators_ms"], "restore_ms": r["copy_ms"],
                              "step_ms": r["resume_ms"], "recovery_ms": r["recovery_ms"],
                              "steps_lost": rollback["from_step"] - rollback["to_step"],
                              "back_ms": again["elapsed_ms"] - failure_ms})
    return out


def read_master_restart(metrics_path, state_dir, err_path):
    """The restart of a master killed by kill-master: one event, timed from
    the kill (ERR's line) to the restarted master's generation and to the
    next committed step (elapsed_ms counts from the training start kept in
    STATE)."""
    kill = None
    with open(err_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "killing the master (SIGKILL) at unix ms " in line:
                kill = float(line.rsplit(" ", 1)[1])
    if kill is None:
        raise InputError(f"{err_path}: no 'killing the master (SIGKILL) at unix ms' line")
    state_path = os.path.join(state_dir, "state.json")
    try:
        with open(state_path, encoding="utf-8") as f:
            start = json.load(f)["training_start_unix_ms"]
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{state_path}: expected a master's kept state with training_start_unix_ms") from None
    restart, step = None, None
    for number, line in read_json_lines(metrics_path):
        if line.get("kind") == "master_restart":
            restart = line
        elif restart is not None and line.get("kind") == "step" and step is None:
            step = line
    if restart is None or step is None:
        raise InputError(f"{metrics_path}: no master_restart line followed by a step")
    back = start + step["elapsed_ms"] - kill
    return {"source": "kept", "detect_ms": None, "plan_ms": None, "communicators_ms": None,
            "restore_ms": restart["unix_ms"] - kill, "step_ms": back - (restart["unix_ms"] - kill),
            "recovery_ms": back, "steps_lost": 0, "back_ms": back}


def summarize(name, events):
    """One row: the median of each field over EVENTS (None where no event
    has it), their count and each one's recovery."""
    row = {"name": name, "source": events[0]["source"], "count": len(events)}
    for key in ("detect_ms", "plan_ms", "communicators_ms", "process_ms", "restore_ms", "step_ms", "recovery_ms",
                "steps_lost", "back_ms"):
        values = [e[key] for e in events if e.get(key) is not None]
        row[key] = statistics.median(values) if values else None
    row["each_recovery_ms"] = [e["recovery_ms"] for e in events]
    row["each_back_ms"] = [e["back_ms"] for e in events]
    return row


# ---------------------------------------------------------------- restarts

def has_step(path):
    """Whether the metrics file at PATH holds a complete step line yet (a
    header line may come first)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return False
    metrics = Metrics(path=path)
    complete = text.split("\n")[:-1]  # the last piece may be a line still being written
    for number, line in enumerate(complete, 1):
        if line.strip():
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"{path}:{number}: malformed JSON") from None
            parse_metrics_line(path, number, parsed, metrics, ("step",), ())
    return bool(metrics.steps)


def time_restart(program, run_args, checkpoint, metrics, steps):
    """Milliseconds from launching a resumed job to its first completed step."""
    if os.path.exists(metrics):
        os.remove(metrics)
    start = time.monotonic()
    try:
        job = subprocess.Popen([program, *run_args, "--steps", str(steps), "--resume", checkpoint,
                                "--metrics", metrics], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as error:
        raise ProgramError(f"cannot run {program}: {error.strerror}") from None
    first = None
    try:
        while True:
            exited = job.poll() is not None  # before the look, so a last step written on exit is seen
            if first is None and has_step(metrics):
                first = (time.monotonic() - start) * 1000
            if exited:
                break
            time.sleep(POLL_S)
    finally:
        if job.poll() is None:  # given up on: no job is left behind
            job.kill()
            job.wait()
    if first is None:
        raise ProgramError(f"the restarted job exited with {job.returncode} before a step")
    return first


# ---------------------------------------------------------------- printing

def _ms(value):
    return "-" if value is None else f"{value:.1f}"


def print_table(rows, restart_row):
    width = max(len(r["name"]) for r in rows + [restart_row])
    print("\nrecovery by cause, side by side (ms; the median where n > 1):")
    print(f"  {'cause':{width}s}  {'state from':10s}  {'n':>2s}  {'detect':>7s}  {'restore':>7s}  "
          f"{'next step':>9s}  {'redone':>6s}  {'back':>8s}  {'restart/back':>12s}")
    for r in rows + [restart_row]:
        ratio = "" if r is restart_row else f"{restart_row['back_ms'] / r['back_ms']:11.1f}x"
        print(f"  {r['name']:{width}s}  {r['source']:10s}  {r['count']:2d}  {_ms(r['detect_ms']):>7s}  "
              f"{_ms(r['restore_ms']):>7s}  {_ms(r['recovery_ms']):>9s}  {r['steps_lost']:6.0f}  "
              f"{_ms(r['back_ms']):>8s}  {ratio:>12s}".rstrip())
    print("  next step: failure to the next completed step; redone: committed steps trained again after a "
          "rollback;\n  back: failure to the interrupted step done again; restart/back: the whole-job restart's "
          "back over this one's.")
    print("  restore, the slowest worker's:")
    for source in dict.fromkeys(r["source"] for r in rows):
        print(f"    {source}: {RESTORE_MEANING[source]}")
    print("  not in the metrics:")
    for what in NOT_RECORDED:
        print(f"    {what}")


def run(args):
    if args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    if not args.passed:
        raise InputError("no oobleck-run options after --")
    for source, _, _ in args.past_f:
        if source not in ROLLBACK_SOURCES:
            raise InputError(f"--past-f {source}: the source is one of {', '.join(ROLLBACK_SOURCES)}")
    live = read_recoveries(args.live)
    failures = live.losses
    if not failures:
        raise InputError(f"{args.live}: no reconfiguration after a failure")
    past_f = []
    for source, path, label in args.past_f:
        found = read_recoveries(path)
        if not found.rollbacks:
            raise InputError(f"{path}: no rollback past f that trained")
        past_f.append((source, label, found.rollbacks))
    cold_crashes = []
    if args.crashes_without_standby:
        cold_crashes = read_recoveries(args.crashes_without_standby).crashes
        if not cold_crashes:
            raise InputError(f"{args.crashes_without_standby}: no worker restarted in place")
        if not live.crashes:
            raise InputError(f"{args.live}: no worker restarted in place, to put beside "
                             f"{args.crashes_without_standby}'s")

    def median(key):
        return statistics.median(e[key] for e in failures)

    recovery, detect = median("recovery_ms"), median("detect_ms")
    launches = [time_restart(args.oobleck_run, args.passed, args.checkpoint,
                             os.path.join(args.out, f"restart-{i}.jsonl"), args.restart_steps)
                for i in range(args.repeats)]
    launch = statistics.median(launches)
    restart = detect + launch

    print(f"live recovery after a failure (median of {len(failures)}), failure to the next completed step:")
    for key, name in PARTS:
        print(f"  {name:32s} {median(key):9.1f} ms")
    print(f"  {'total':32s} {recovery:9.1f} ms   (each: " + ", ".join(f"{e['recovery_ms']:.0f}" for e in failures)
          + " ms)")
    print(f"restart from a checkpoint of the last step (median of {args.repeats}):")
    print(f"  {'detection':32s} {detect:9.1f} ms")
    print(f"  {'launch to first completed step':32s} {launch:9.1f} ms   (each: "
          + ", ".join(f"{t:.0f}" for t in launches) + " ms)")
    print(f"  {'total':32s} {restart:9.1f} ms")
    print(f"restart / recovery: {restart / recovery:.1f}x")

    rows = [summarize("node loss within f", failures)]
    if live.crashes:
        rows.append(summarize("worker crash, restarted in place", live.crashes))
    cold = None
    if cold_crashes:
        cold = summarize("worker crash, a new process (no standby)", cold_crashes)
        cold["standby"] = sum(e["standby"] for e in cold_crashes)
        rows.append(cold)
    rows += [summarize(label, rollbacks) for _, label, rollbacks in past_f]
    if args.master_restart:
        rows.append(summarize("master killed, --resume-master at once", [read_master_restart(*args.master_restart)]))
    restart_row = {"name": "whole-job restart from a checkpoint", "source": "checkpoint", "count": args.repeats,
                   "detect_ms": detect, "plan_ms": None, "communicators_ms": None, "restore_ms": None,
                   "step_ms": None, "launch_ms": launch, "recovery_ms": restart, "steps_lost": 0, "back_ms": restart,
                   "each_launch_ms": launches}
    print_table(rows, restart_row)
    if live.crashes:
        loss, crash = rows[0]["recovery_ms"], rows[1]["recovery_ms"]
        print(f"worker crash / node loss, to the next completed step: {crash / loss:.1f}x "
              f"({crash:.0f} against {loss:.0f} ms)")
        rows[1]["standby"] = sum(e["standby"] for e in live.crashes)
        for row in [rows[1]] + ([cold] if cold else []):
            if row["process_ms"] is not None:
                print(f"{row['name']}, after detection: the new worker up in {row['process_ms']:.1f} ms (forked "
                      f"from the zygote in {row['standby']} of {row['count']}), its communicators "
                      f"{row['communicators_ms']:.1f} ms, its state read in {row['restore_ms']:.1f} ms")
        if cold:
            print(f"worker crash without the zygote / with it, to the next completed step: "
                  f"{cold['recovery_ms'] / rows[1]['recovery_ms']:.1f}x "
                  f"({cold['recovery_ms']:.0f} against {rows[1]['recovery_ms']:.0f} ms)")
    for r in rows:
        r["restart_over_back"] = restart / r["back_ms"]

    write_json(os.path.join(args.out, "result.json"),
               {"format": RESULT_FORMAT, "rows": rows, "restart": restart_row,
                "restore_meaning": {r["source"]: RESTORE_MEANING[r["source"]] for r in rows},
                "not_recorded": NOT_RECORDED})
    mismatched = [(source, label, rollbacks[-1]["source"]) for source, label, rollbacks in past_f
                  if rollbacks[-1]["source"] != source]
    for source, label, actual in mismatched:
        print(f"oobleck-tools bench-recovery: check failed: \"{label}\" rolled back to {actual}, not {source}",
              file=sys.stderr)
    return 1 if mismatched else 0
