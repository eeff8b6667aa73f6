"""Live recovery against a torchrun elastic restart (tools/bench-vs-torchrun.sh).

oobleck: the reconfigurations after failures in LIVE.jsonl (oobleck-run
--metrics of a run whose nodes were killed during steps): failure to the next
completed step, the median and its parts. Where the run also crashed
workers (restart lines: a worker process killed, its agent alive, restarted
in place), those too: torchrun's kill is of one worker process.

torchrun: for each monitor interval, one job of tools/torchrun_gpt_ddp.py
(DDP, a checkpoint every step) under torchrun --standalone with
--max_restarts=REPEATS. REPEATS times, once the job has trained
--steps-between steps since its last start, one worker (a different rank
each time) is killed (SIGKILL) halfway through a step; torchrun sees it at
its next look, stops the others, starts all of them again, and they resume
from the checkpoint. Recovery = the kill to the next completed step, parted
into torchrun's part (detection, stopping, rendezvous, launching), starting
Python and importing torch, the process group, model and checkpoint, and
the redone step. The kills go to DIR/torchrun-monitor-Ss/kills.jsonl beside
the job's metrics.

Prints the medians, their ratios (torchrun / oobleck) and the parts, and
writes them to DIR/bench-torchrun.json. --report-only reads the kills and
metrics a former run left in DIR instead of running the jobs.

  oobleck-tools bench-torchrun LIVE.jsonl --out DIR [--repeats 3] [--intervals 0.01 5]
                               [--processes 6] [--steps-between 3] [--torchrun torchrun]
                               [--job tools/torchrun_gpt_ddp.py] -- JOB_ARGS...
  oobleck-tools bench-torchrun LIVE.jsonl --out DIR --report-only [--intervals 0.01 5]
"""
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import time

from .common import REPOSITORY, InputError, ProgramError, read_json_lines, read_metrics, require, write_json

DEFAULT_MONITOR_S = 5.0  # torchrun's own default --monitor_interval
POLL_S = 0.002
RESULT_FORMAT = "oobleck.bench-torchrun.v1"
START_TIMEOUT_S = 300    # launching six workers on a loaded machine
PASSES_ARGUMENTS = True  # JOB_ARGS after "--"

# The parts of a worker crash's recovery, by their keys in its restart lines.
CRASH_PARTS = [("detect_ms", "detection"), ("process_ms", "the new worker up (its hello)"),
               ("communicators_ms", "its communicators"), ("read_ms", "its state read from its agent's memory")]
# The parts of oobleck's recovery, by their keys in its reconfiguration lines.
OOBLECK_PARTS = [("detect_ms", "detection"), ("plan_ms", "planning (reconfigure)"),
                 ("held_ms", "waiting for kept pipelines' passes"),
                 ("communicators_ms", "communicators rebuilt"), ("copy_ms", "layer states copied"),
                 ("resume_ms", "the interrupted step, redone")]
TORCHRUN_PARTS = [("torchrun_ms", "torchrun: detected, stopped, relaunched"),
                  ("import_ms", "Python started, torch imported"),
                  ("load_ms", "process group, model, checkpoint"),
                  ("redo_ms", "the interrupted step, redone")]


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


JOB_LINES = {
    "start": {"restart": (_integer, "an integer"), "launched": (_number, "a number"),
              "imported": (_number, "a number"), "ready": (_number, "a number"),
              "resume_step": (_integer, "an integer")},
    "step": {"step": (_integer, "an integer"), "loss": (_number, "a number"), "time": (_number, "a number"),
             "step_ms": (_number, "a number"), "restart": (_integer, "an integer")},
}
KILL_FIELDS = {"time": (_number, "a number"), "rank": (_integer, "an integer"), "pid": (_integer, "an integer"),
               "restart": (_integer, "an integer"), "step": (_integer, "an integer")}


def add_arguments(parser):
    parser.add_argument("live", metavar="LIVE.jsonl", help="oobleck-run --metrics of a run with failures")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the torchrun jobs run and the results go")
    parser.add_argument("--repeats", type=int, default=3, help="kills per monitor interval; the median counts "
                                                               "(default: %(default)s)")
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.01, DEFAULT_MONITOR_S], metavar="S",
                        help="torchrun --monitor_interval values, in seconds (default: 0.01 and torchrun's 5)")
    parser.add_argument("--processes", type=int, default=6, help="torchrun --nproc_per_node (default: %(default)s)")
    parser.add_argument("--steps-between", type=int, default=3,
                        help="steps a job trains after each start before the next kill (default: %(default)s)")
    parser.add_argument("--torchrun", default="torchrun", metavar="PATH", help="the torchrun program "
                                                                              "(default: torchrun)")
    parser.add_argument("--job", default=str(REPOSITORY / "tools/torchrun_gpt_ddp.py"), metavar="PATH",
                        help="the training script torchrun runs (default: tools/torchrun_gpt_ddp.py)")
    parser.add_argument("--report-only", action="store_true",
                        help="report the kills and metrics already in DIR; run nothing")
    parser.epilog = "JOB_ARGS: the job's options but --out and --steps (--profile, --plan, --data, ...)"


def interval_folder(out, interval):
    return os.path.join(out, f"torchrun-monitor-{interval:g}s")


def _checked(line, fields, where):
    for name, (check, description) in fields.items():
        require(line, name, where, check, description)
    return line


def read_job_metrics(path):
    """(starts, steps) of a torchrun_gpt_ddp.py metrics file, in file order;
    lines of other kinds are skipped."""
    starts, steps = [], []
    for number, line in read_json_lines(path):
        kind = line.get("kind")
        if kind not in JOB_LINES:
            continue
        _checked(line, JOB_LINES[kind], f"{path}:{number}")
        (starts if kind == "start" else steps).append(line)
    return starts, steps


def read_kills(path):
    return [_checked(line, KILL_FIELDS, f"{path}:{number}") for number, line in read_json_lines(path)]


def torchrun_recoveries(kills, starts, steps, where):
    """One dict per kill: the first step completed by a later start of the
    workers, its time after the kill and the parts of that time (ms)."""
    out = []
    for number, kill in enumerate(kills, 1):
        after = next((s for s in steps if s["restart"] > kill["restart"]), None)
        if after is None:
            raise InputError(f"{where}: kill {number} (workers' start {kill['restart']}): no step completed by a "
                             "later start")
        start = next((s for s in starts if s["restart"] == after["restart"]), None)
        if start is None:
            raise InputError(f"{where}: no \"start\" line for workers' start {after['restart']}")
        if not kill["time"] <= start["launched"] <= start["imported"] <= start["ready"] <= after["time"]:
            raise InputError(f"{where}: kill {number}: times out of order (kill, launched, imported, ready, step)")
        out.append({"recovery_ms": (after["time"] - kill["time"]) * 1000,
                    "torchrun_ms": (start["launched"] - kill["time"]) * 1000,
                    "import_ms": (start["imported"] - start["launched"]) * 1000,
                    "load_ms": (start["ready"] - start["imported"]) * 1000,
                    "redo_ms": (after["time"] - start["ready"]) * 1000,
                    "rank": kill["rank"], "killed_during_step": kill["step"] + 1,
                    "resumed_at_step": start["resume_step"], "restarts": after["restart"] - kill["restart"]})
    return out


def steady_step_ms(steps):
    """The median time between consecutive steps of one start of the workers
    (a step and its checkpoint); None with fewer than two such steps."""
    gaps = [(b["time"] - a["time"]) * 1000 for a, b in zip(steps, steps[1:])
            if b["restart"] == a["restart"] and b["step"] == a["step"] + 1]
    return statistics.median(gaps) if gaps else None


def oobleck_summary(path):
    live = read_metrics(path)
    failures = [r for r in live.established() if r["lost"]]
    if not failures:
        raise InputError(f"{path}: no reconfiguration after a failure")
    iterations = [s["iteration_ms"] for s in live.steps if isinstance(s.get("iteration_ms"), (int, float))]
    summary = {"recovery_ms": statistics.median(r["recovery_ms"] for r in failures),
               "each_ms": [r["recovery_ms"] for r in failures],
               "step_ms": statistics.median(iterations) if iterations else None}
    for key, _ in OOBLECK_PARTS:
        summary[key] = statistics.median(r.get(key, 0.0) for r in failures)  # (held_ms: absent before it was kept)
    summary["kept_microbatches"] = statistics.median(r.get("kept_microbatches", 0) for r in failures)
    crashes = []
    for number, line in read_json_lines(path):
        if line.get("kind") != "restart":
            continue
        for key, _ in CRASH_PARTS + [("recovery_ms", "")]:
            require(line, key, f"{path}:{number}", _number, "a number")
        crashes.append(line)
    if crashes:
        summary["crashes"] = {"recovery_ms": statistics.median(c["recovery_ms"] for c in crashes),
                              "each_ms": [c["recovery_ms"] for c in crashes],
                              "standby": sum(c.get("standby") is True for c in crashes)}
        for key, _ in CRASH_PARTS:
            summary["crashes"][key] = statistics.median(c[key] for c in crashes)
    return summary


def torchrun_summary(folder, interval):
    metrics, kills_path = os.path.join(folder, "metrics.jsonl"), os.path.join(folder, "kills.jsonl")
    starts, steps = read_job_metrics(metrics)
    kills = read_kills(kills_path)
    if not kills:
        raise InputError(f"{kills_path}: no kills")
    each = torchrun_recoveries(kills, starts, steps, metrics)
    summary = {"monitor_interval_s": interval, "recovery_ms": statistics.median(e["recovery_ms"] for e in each),
               "each_ms": [e["recovery_ms"] for e in each], "step_ms": steady_step_ms(steps), "kills": each}
    for key, _ in TORCHRUN_PARTS:
        summary[key] = statistics.median(e[key] for e in each)
    return summary


class JobFollower:
    """The complete lines a running job has appended to its metrics so far,
    read on from where the last look stopped."""

    def __init__(self, path):
        self.path, self.offset, self.starts, self.steps = path, 0, [], []

    def look(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                text = f.read()
        except FileNotFoundError:
            return
        complete = text[:text.rfind(b"\n") + 1]  # a last line still being written waits for the next look
        self.offset += len(complete)
        for line in complete.decode("utf-8").splitlines():
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"{self.path}: malformed JSON line {line[:80]!r}") from None
            kind = parsed.get("kind") if isinstance(parsed, dict) else None
            if kind in JOB_LINES:
                _checked(parsed, JOB_LINES[kind], self.path)
                (self.starts if kind == "start" else self.steps).append(parsed)

    def latest_restart(self):
        return self.starts[-1]["restart"] if self.starts else None

    def steps_of_latest_start(self):
        restart = self.latest_restart()
        return [s for s in self.steps if s["restart"] == restart] if restart is not None else []


class TorchrunJob:
    """One torchrun job in its own process group, so that it and its workers
    are ended together."""

    def __init__(self, torchrun, job, job_args, folder, processes, interval, repeats, steps):
        self.folder, self.interval = folder, interval
        self.log_path = os.path.join(folder, "torchrun.log")
        # Debian's torch 1.13 under Python 3.11 cannot parse the default
        # --redirects/--tee of 0 (its Std flag no longer lists NONE), so the
        # workers' output goes to files: stdout, and stderr also to the log.
        command = [torchrun, "--standalone", f"--nproc_per_node={processes}", f"--max_restarts={repeats}",
                   f"--monitor_interval={interval:g}", "--log_dir", os.path.join(folder, "logs"),
                   "--redirects", "1", "--tee", "2",
                   job, *job_args, "--out", folder, "--steps", str(steps)]
        self.log = open(self.log_path, "w", encoding="utf-8")
        try:
            self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        except OSError as error:
            self.log.close()
            raise ProgramError(f"cannot run {torchrun}: {error.strerror}") from None

    def check_running(self, waiting_for):
        if self.process.poll() is not None:
            raise ProgramError(f"torchrun exited with {self.process.returncode} while {waiting_for}; "
                               f"the end of {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines=15):
        self.log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def wait_for(condition, job, follower, waiting_for, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        follower.look()
        if condition():
            return
        job.check_running(waiting_for)
        if time.monotonic() > deadline:
            raise ProgramError(f"no progress in {timeout_s:.0f} s while {waiting_for}; the end of "
                               f"{job.log_path}:\n{job.log_tail()}")
        time.sleep(POLL_S)


def read_pid(folder, rank, restart):
    """The process id of RANK's worker of workers' start RESTART, or None
    when that worker has not written it yet."""
    try:
        with open(os.path.join(folder, "pids", f"rank-{rank}.json"), encoding="utf-8") as f:
            entry = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return entry["pid"] if entry.get("restart") == restart else None


def measure(args, interval):
    """Runs one torchrun job and kills a worker REPEATS times; the kills go
    to kills.jsonl in the job's folder."""
    folder = interval_folder(args.out, interval)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    kills_path = os.path.join(folder, "kills.jsonl")
    open(kills_path, "w").close()
    steps = (args.repeats + 1) * (args.steps_between + 2) + 20  # more than the kills need: the driver ends the job
    job = TorchrunJob(args.torchrun, args.job, args.passed, folder, args.processes, interval, args.repeats, steps)
    follower = JobFollower(os.path.join(folder, "metrics.jsonl"))
    recovery_timeout_s = START_TIMEOUT_S + 4 * interval
    try:
        for kill in range(args.repeats):
            wait_for(lambda: len(follower.steps_of_latest_start()) >= args.steps_between, job, follower,
                     f"waiting for {args.steps_between} steps before kill {kill + 1}",
                     START_TIMEOUT_S if kill == 0 else recovery_timeout_s)
            restart = follower.latest_restart()
            rank = (1 + 2 * kill) % args.processes  # a different rank each time: 1, 3, 5, ...
            pid = read_pid(folder, rank, restart)
            if pid is None:
                raise ProgramError(f"{folder}/pids/rank-{rank}.json: no process id of workers' start {restart}")
            # Halfway through the next step: right after a step's line, then
            # half a step (the median of this start's steps so far).
            seen = len(follower.steps)
            wait_for(lambda: len(follower.steps) > seen, job, follower, f"waiting for a step before kill {kill + 1}",
                     recovery_timeout_s)
            half_step_s = (steady_step_ms(follower.steps_of_latest_start()) or 0) / 2000
            time.sleep(half_step_s)
            follower.look()
            last_step = follower.steps[-1]["step"]
            killed_at = time.time()
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                raise ProgramError(f"rank {rank}'s worker (process {pid}) was gone before kill {kill + 1}; the end "
                                   f"of {job.log_path}:\n{job.log_tail()}") from None
            with open(kills_path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"kill": kill + 1, "time": killed_at, "rank": rank, "pid": pid,
                                    "restart": restart, "step": last_step}) + "\n")
            wait_for(lambda: any(s["restart"] > restart for s in follower.steps), job, follower,
                     f"waiting for the first step after kill {kill + 1}", recovery_timeout_s)
    finally:
        job.stop()


def ratio(a, b):
    return a / b if b > 0 else math.inf


def each(values):
    return ", ".join(f"{v:.0f}" for v in values)


def report(oobleck, torchruns, processes):
    base = oobleck["recovery_ms"]
    print(f"recovery after a node loss, the kill to the next completed step ({processes} processes, "
          "medians):")
    print(f"  {'':34s} {'median':>9s}  {'torchrun/oobleck':>16s}  each")
    print(f"  {'oobleck, live':34s} {base:9.0f} ms {'':16s}  {each(oobleck['each_ms'])} ms")
    for t in torchruns:
        default = " (default)" if t["monitor_interval_s"] == DEFAULT_MONITOR_S else ""
        name = f"torchrun, monitor {t['monitor_interval_s']:g} s{default}"
        print(f"  {name:34s} {t['recovery_ms']:9.0f} ms {ratio(t['recovery_ms'], base):15.1f}x  "
              f"{each(t['each_ms'])} ms")
    crashes = oobleck.get("crashes")
    if crashes:
        print("a worker process killed, its node alive (torchrun's kill is of one process):")
        print(f"  {'':34s} {'median':>9s}  {'torchrun/oobleck':>16s}  each")
        print(f"  {'oobleck, restarted in place':34s} {crashes['recovery_ms']:9.0f} ms {'':16s}  "
              f"{each(crashes['each_ms'])} ms")
        for t in torchruns:
            name = f"torchrun, monitor {t['monitor_interval_s']:g} s"
            print(f"  {name:34s} {t['recovery_ms']:9.0f} ms "
                  f"{ratio(t['recovery_ms'], crashes['recovery_ms']):15.1f}x")
    print("oobleck's recovery:")
    for key, name in OOBLECK_PARTS:
        print(f"  {name:42s} {oobleck[key]:9.1f} ms")
    print(f"  (the redone step trained again all but the {oobleck['kept_microbatches']:g} microbatches "
          "that pipelines kept)")
    if crashes:
        print(f"oobleck's restart in place (forked from the zygote in {crashes['standby']} of {len(crashes['each_ms'])}):")
        for key, name in CRASH_PARTS:
            print(f"  {name:42s} {crashes[key]:9.1f} ms")
    for t in torchruns:
        print(f"torchrun's restart, monitor {t['monitor_interval_s']:g} s:")
        for key, name in TORCHRUN_PARTS:
            print(f"  {name:42s} {t[key]:9.1f} ms")
    steady = [("oobleck", oobleck["step_ms"])] + [(f"DDP (monitor {t['monitor_interval_s']:g} s)", t["step_ms"])
                                                  for t in torchruns]
    print("a step without failures: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in steady if ms is not None))
    # Every recovery ends with the step it interrupted trained again, so no
    # cut to detection, communicators or copies can pass this ratio.
    print(f"the ceiling, a recovery of nothing but its redone step ({oobleck['resume_ms']:.0f} ms): "
          + ", ".join(f"{ratio(t['recovery_ms'], oobleck['resume_ms']):.1f}x at monitor {t['monitor_interval_s']:g} s"
                      for t in torchruns))


def run(args):
    if args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    if args.processes < 2:
        raise InputError("--processes must be at least 2 (one is killed, the others are restarted)")
    if args.steps_between < 2:
        raise InputError("--steps-between must be at least 2 (a step's time is needed to kill during the next)")
    if any(not (s > 0 and math.isfinite(s)) for s in args.intervals):
        raise InputError("--intervals: expected monitor intervals in seconds, above 0")
    oobleck = oobleck_summary(args.live)  # bad input is told before minutes of jobs
    if not args.report_only:
        if not args.passed:
            raise InputError("no job options after -- (--profile, --plan, --data)")
        if shutil.which(args.torchrun) is None:
            raise InputError(f"--torchrun {args.torchrun}: no such program (Debian: apt-get install python3-torch)")
        os.makedirs(args.out, exist_ok=True)
        for interval in args.intervals:
            print(f"torchrun, monitor interval {interval:g} s: {args.repeats} kills", flush=True)
            measure(args, interval)
    torchruns = [torchrun_summary(interval_folder(args.out, s), s) for s in args.intervals]
    report(oobleck, torchruns, args.processes)
    write_json(os.path.join(args.out, "bench-torchrun.json"),
               {"format": RESULT_FORMAT, "oobleck": oobleck, "torchrun": torchruns,
                "ratios": {f"{t['monitor_interval_s']:g}": ratio(t["recovery_ms"], oobleck["recovery_ms"])
                           for t in torchruns},
                "redone_step_ceilings": {f"{t['monitor_interval_s']:g}": ratio(t["recovery_ms"], oobleck["resume_ms"])
                                         for t in torchruns},
                "crash_ratios": {f"{t['monitor_interval_s']:g}": ratio(t["recovery_ms"],
                                                                         oobleck["crashes"]["recovery_ms"])
                                 for t in torchruns} if "crashes" in oobleck else {}})
    return 0
