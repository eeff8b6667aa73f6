"""Compares two trees' Google Benchmark runs (tools/bench-compare.sh runs them).

Merges each side's runs (the programs were run alternately, several
processes per side), lets Google Benchmark's own compare.py compare them
(its Mann-Whitney U test over every repetition), and prints one row per
benchmark: the medians, the change and the U test's p-value. Exit 1 when a
benchmark is significantly slower (p < alpha) by more than its threshold, or
when any work counter (a counter named with the thresholds file's prefix,
work_ by default: states visited, events run, counted by the code, not timed)
grew at all; a benchmark or counter that only the current tree has is shown
as new. With --live-base/--live-current, the ratios the live benchmarks print
(tools/bench-recovery.sh, bench-run-vs-sim.sh, bench-snapshots.sh) are
compared too: exit 1 when one moves by more than the live tolerance.

  oobleck-tools bench-compare --base B1.json B2.json --current C1.json C2.json \\
      --compare-py /usr/share/benchmark/compare.py --out build-bench
"""
import datetime
import fnmatch
import json
import math
import os
import re
import statistics
import subprocess
import sys

from .common import InputError, ProgramError, atomic_output, read_json, write_json

DEFAULTS = {"default": 0.10, "alpha": 0.05, "work_prefix": "work_", "live_tolerance": 0.30, "thresholds": {}}


def add_arguments(parser):
    parser.add_argument("--base", nargs="+", required=True, metavar="RUN.json",
                        help="the base tree's --benchmark_out files (all programs, all rounds)")
    parser.add_argument("--current", nargs="+", required=True, metavar="RUN.json",
                        help="the current tree's --benchmark_out files")
    parser.add_argument("--compare-py", required=True, help="Google Benchmark's tools/compare.py")
    parser.add_argument("--out", required=True, help="folder for the merged runs, compare.py's report and dump")
    parser.add_argument("--thresholds", help="JSON: default, alpha, work_prefix, live_tolerance, and "
                        "thresholds mapping benchmark name patterns (fnmatch, first match wins) to fractions")
    parser.add_argument("--counters-only", action="store_true",
                        help="judge only the work counters: the times are shown, never fail")
    parser.add_argument("--live-base", help="the live benchmarks' output for the base tree")
    parser.add_argument("--live-current", help="the live benchmarks' output for the current tree")
    parser.add_argument("--history", help="JSON lines: append this comparison's current results")
    parser.add_argument("--revision", default="", help="the current tree's revision, for --history")
    parser.add_argument("--base-revision", default="", help="the base revision, for --history")


def load_thresholds(path):
    settings = dict(DEFAULTS)
    if path:
        doc = read_json(path)
        if not isinstance(doc, dict):
            raise InputError(f"{path}: expected a JSON object")
        settings.update({k: v for k, v in doc.items() if not k.startswith("_")})
        if not isinstance(settings["thresholds"], dict):
            raise InputError(f"{path}: \"thresholds\" must map name patterns to fractions")
        for key in ("default", "alpha", "live_tolerance"):
            if not isinstance(settings[key], (int, float)) or settings[key] < 0:
                raise InputError(f"{path}: \"{key}\" must be a number >= 0")
    return settings


def threshold_for(name, settings):
    for pattern, value in settings["thresholds"].items():
        if fnmatch.fnmatchcase(name, pattern):
            return float(value)
    return float(settings["default"])


def merge(paths):
    """One Google Benchmark JSON document with every repetition of every
    file, and their median and mean as aggregates (compare.py -a shows
    those; its U test uses the repetitions)."""
    context, runs = None, []
    for path in paths:
        doc = read_json(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
            raise InputError(f"{path}: not a Google Benchmark JSON output")
        context = context or doc.get("context", {})
        runs += [b for b in doc["benchmarks"] if b.get("run_type", "iteration") == "iteration" and "error_occurred"
                 not in b]
    by_name = {}
    for run in runs:
        by_name.setdefault(run["name"], []).append(run)
    aggregates = []
    for name, group in by_name.items():
        for what, f in (("median", statistics.median), ("mean", statistics.fmean)):
            aggregate = dict(group[0])
            aggregate.update(name=f"{name}_{what}", run_name=name, run_type="aggregate", aggregate_name=what,
                             repetitions=len(group), real_time=f([g["real_time"] for g in group]),
                             cpu_time=f([g["cpu_time"] for g in group]))
            aggregates.append(aggregate)
    return {"context": context, "benchmarks": runs + aggregates}, by_name


def counters_of(group, prefix):
    """The work counters of a benchmark's repetitions: name -> the values seen."""
    out = {}
    for run in group:
        for key, value in run.items():
            if key.startswith(prefix) and isinstance(value, (int, float)):
                out.setdefault(key, set()).add(value)
    return out


def _time(value, unit):
    return f"{value:.4g} {unit}"


def live_ratios(text):
    """The ratios the live benchmarks print, by name: bench-recovery's
    'restart / recovery: 12.3x' and 'worker crash / node loss, to the next
    completed step: 3.5x (...)' (medians of several failures; its table's
    restart/back column, one failure a cause, is left out: on a shared
    machine it moves by 40 % between runs of the same build),
    bench-run-vs-sim's 'measured / predicted: 1.02', and bench-snapshots'
    overheads '(+0.8 % / +1.7 %)' as with / without."""
    ratios = {}
    for line in text.splitlines():
        line = line.strip()
        if m := re.fullmatch(r"([A-Za-z ]+ / [A-Za-z ]+)(, [A-Za-z ]+)?: ([0-9.]+)x?(?: \(.*\))?", line):
            ratios[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        elif m := re.match(r"(snapshots every step, [^:]+):\s+[0-9.]+ / [0-9.]+ ms \(([-+][0-9.]+) % / "
                           r"([-+][0-9.]+) %\)", line):
            ratios[f"{m.group(1)} / without (mean)"] = 1 + float(m.group(2)) / 100
            ratios[f"{m.group(1)} / without (median)"] = 1 + float(m.group(3)) / 100
    return ratios


def compare_live(base_path, current_path, tolerance):
    """Prints the ratios side by side; the number that moved too far."""
    def read(path):
        try:
            with open(path, encoding="utf-8") as f:
                return live_ratios(f.read())
        except OSError as error:
            raise InputError(f"{path}: {error.strerror}") from None
    base, current = read(base_path), read(current_path)
    print(f"\nlive ratios (fail beyond {100 * tolerance:g} % either way):")
    width = max([len(n) for n in {**base, **current}] + [5])
    print(f"  {'ratio':{width}s}  {'base':>8s}  {'current':>8s}  {'change':>8s}")
    failures = 0
    for name in sorted(set(base) | set(current)):
        if name not in current:
            print(f"  {name:{width}s}  {base[name]:8.3f}  {'-':>8s}  gone")
            continue
        if name not in base:
            print(f"  {name:{width}s}  {'-':>8s}  {current[name]:8.3f}  new")
            continue
        change = current[name] / base[name] - 1 if base[name] else math.inf
        verdict = ""
        if abs(change) > tolerance:
            verdict = "  MOVED"
            failures += 1
        print(f"  {name:{width}s}  {base[name]:8.3f}  {current[name]:8.3f}  {100 * change:+7.1f}%{verdict}")
    return failures


def append_history(path, revision, base_revision, current):
    entry = {"revision": revision, "base": base_revision,
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "benchmarks": current}
    old = ""
    try:
        with open(path, encoding="utf-8") as f:
            old = f.read()
    except FileNotFoundError:
        pass
    if old and not old.endswith("\n"):
        old += "\n"
    with atomic_output(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(old + json.dumps(entry, sort_keys=True) + "\n")


def run(args):
    settings = load_thresholds(args.thresholds)
    prefix = settings["work_prefix"]
    if not os.path.isdir(args.out):
        raise InputError(f"{args.out}: no such folder")
    base_doc, base = merge(args.base)
    current_doc, current = merge(args.current)
    base_path, current_path = os.path.join(args.out, "base.json"), os.path.join(args.out, "current.json")
    write_json(base_path, base_doc)
    write_json(current_path, current_doc)
    dump = os.path.join(args.out, "compare.json")
    report = os.path.join(args.out, "compare.txt")
    command = [sys.executable, args.compare_py, "--no-color", "-a", "--alpha", str(settings["alpha"]), "-d", dump,
               "benchmarks", base_path, current_path]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        raise ProgramError(f"cannot run {args.compare_py}: {error.strerror}") from None
    if result.returncode != 0:
        raise ProgramError(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr.rstrip()}")
    with atomic_output(report) as temporary:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(result.stdout)
    pvalues = {entry["name"]: entry.get("utest", {}).get("time_pvalue") for entry in read_json(dump)}

    alpha = settings["alpha"]
    names = list(current) + [n for n in base if n not in current]
    width = max([len(n) for n in names] + [9])
    print(f"{'benchmark':{width}s}  {'base':>11s}  {'current':>11s}  {'change':>8s}  {'p (U)':>7s}  verdict")
    slower, grown, history = [], [], {}
    for name in names:
        if name not in current:
            print(f"{name:{width}s}  {'':>11s}  {'':>11s}  {'':>8s}  {'':>7s}  gone (only in base)")
            continue
        unit = current[name][0].get("time_unit", "ns")
        now = statistics.median(r["real_time"] for r in current[name])
        now_counters = counters_of(current[name], prefix)
        history[name] = {"real_time": now, "time_unit": unit, "repetitions": len(current[name]),
                         "counters": {k: v for k, v in current[name][0].items()
                                      if k not in ("name", "run_name", "run_type", "family_index",
                                                   "per_family_instance_index", "repetitions",
                                                   "repetition_index", "threads", "iterations", "real_time",
                                                   "cpu_time", "time_unit", "label")
                                      and isinstance(v, (int, float))}}
        if name not in base:
            print(f"{name:{width}s}  {'':>11s}  {_time(now, unit):>11s}  {'':>8s}  {'':>7s}  new")
            continue
        before = statistics.median(r["real_time"] for r in base[name])
        if base[name][0].get("time_unit", "ns") != unit:
            print(f"{name:{width}s}  time unit changed ({base[name][0].get('time_unit')} -> {unit}): not compared")
            continue
        change = now / before - 1 if before > 0 else 0.0
        p = pvalues.get(name)
        threshold = threshold_for(name, settings)
        verdict = "same"
        if p is not None and p < alpha:
            verdict = "faster" if change < 0 else "slower"
            if change > threshold:
                if args.counters_only:
                    verdict = f"slower by > {100 * threshold:g} % (timing not judged)"
                else:
                    verdict = f"SLOWER by > {100 * threshold:g} %"
                    slower.append(name)
        elif p is None:
            verdict = "too few repetitions for the U test"
        p_text = f"{p:7.4f}" if p is not None else f"{'-':>7s}"
        print(f"{name:{width}s}  {_time(before, unit):>11s}  {_time(now, unit):>11s}  {100 * change:+7.1f}%  "
              f"{p_text}  {verdict}")
        then_counters = counters_of(base[name], prefix)
        for counter, values in sorted(now_counters.items()):
            value = max(values)
            unsteady = " (differs between repetitions)" if len(values) > 1 else ""
            if counter not in then_counters:
                print(f"{'':{width}s}    {counter} = {value:.10g}: new{unsteady}")
                continue
            was = max(then_counters[counter])
            if value > was:
                grown.append(f"{name} {counter}")
                print(f"{'':{width}s}    {counter}: {was:.10g} -> {value:.10g} ({100 * (value / was - 1) if was else math.inf:+.2f} %)"
                      f"  GREW{unsteady}")
            elif value < was:
                print(f"{'':{width}s}    {counter}: {was:.10g} -> {value:.10g} (less work){unsteady}")
    print(f"(medians of the real time; U test over every repetition, significant below p = {alpha:g}; "
          f"compare.py's own report: {report})")

    live_failures = 0
    if args.live_base and args.live_current:
        live_failures = compare_live(args.live_base, args.live_current, settings["live_tolerance"])
    if args.history:
        append_history(args.history, args.revision, args.base_revision, history)
        print(f"history: appended to {args.history}")

    # What a second, confirming run looks at (tools/bench-compare.sh).
    for file_name, names_found in (("slower.txt", slower), ("grown.txt", grown)):
        with atomic_output(os.path.join(args.out, file_name)) as temporary:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write("".join(n + "\n" for n in names_found))

    failed = False
    if grown:
        print(f"bench-compare: work grew (counted, not timed): {', '.join(grown)}")
        failed = True
    if slower:
        print(f"bench-compare: significantly slower beyond the threshold: {', '.join(slower)}")
        failed = True
    if live_failures:
        print(f"bench-compare: {live_failures} live ratio(s) moved by more than "
              f"{100 * settings['live_tolerance']:g} %")
        failed = True
    if not failed:
        print("bench-compare: no regression")
    return 1 if failed else 0
