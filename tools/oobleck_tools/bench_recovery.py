"""Live recovery against a restart from a checkpoint (tools/bench-recovery.sh).

Reads the live run's reconfigurations after failures (median of each part of
the recovery), then times REPEATS restarts: oobleck-run --resume CHECKPOINT
launched with RUN_ARGS, from launch to its first completed step (watched in
its metrics). A restart costs the detection measured live plus that launch.
Prints both, the breakdown and their ratio.

  oobleck-tools bench-recovery LIVE.jsonl CHECKPOINT --out DIR [--repeats 3]
                               [--oobleck-run build/bin/oobleck-run] -- RUN_ARGS...
"""
import json
import os
import statistics
import subprocess
import time

from .common import REPOSITORY, InputError, Metrics, ProgramError, parse_metrics_line, read_metrics

PARTS = [("detect_ms", "detection"), ("plan_ms", "planning (reconfigure)"),
         ("communicators_ms", "communicators rebuilt"), ("copy_ms", "layer states copied"),
         ("resume_ms", "the interrupted step, redone")]
POLL_S = 0.002
PASSES_ARGUMENTS = True  # RUN_ARGS after "--"


def add_arguments(parser):
    parser.add_argument("live", metavar="LIVE.jsonl", help="oobleck-run --metrics of a run with failures")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="the checkpoint folder the restarts resume from")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the restarts write their metrics")
    parser.add_argument("--repeats", type=int, default=3, help="restarts timed; the median counts (default: 3)")
    parser.add_argument("--oobleck-run", default=str(REPOSITORY / "build/bin/oobleck-run"), metavar="PATH",
                        help="the oobleck-run program (default: build/bin/oobleck-run in this repository)")
    parser.add_argument("--restart-steps", type=int, default=6, help="--steps of each restart (default: 6)")
    parser.epilog = "RUN_ARGS: oobleck-run options shared with the live run (--plan, --profile, --data, ...)"


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


def run(args):
    live = read_metrics(args.live)
    failures = [e for e in live.established() if e["lost"]]
    if not failures:
        raise InputError(f"{args.live}: no reconfiguration after a failure")
    if args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    if not args.passed:
        raise InputError("no oobleck-run options after --")

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
    return 0
