"""Two `oobleck-sim replay --json` results compared policy by policy.

Prints, for every policy, the samples trained, samples per second and goodput
of BASE and NEW with their relative change, and the failures,
reconfigurations, restarts and unrecoverable failures of each. Exits 1 when
any policy's samples differ by more than --tolerance (relative), or a policy
is in one file only or runnable in one only.

  oobleck-tools compare-replays BASE.json NEW.json [--tolerance 0.01]
"""
import math

from .common import InputError, read_json, relative_difference, require

FORMAT = "oobleck.replay.v1"
COUNTS = [("failures", "failures"), ("reconfigurations", "reconfigs"), ("restarts", "restarts"),
          ("unrecoverable", "unrecoverable")]


def add_arguments(parser):
    parser.add_argument("base", metavar="BASE.json", help="oobleck-sim replay --json, the baseline")
    parser.add_argument("new", metavar="NEW.json", help="oobleck-sim replay --json, to compare with it")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="largest relative change of a policy's samples accepted (default: %(default)g)")


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_replay(path):
    """Policy name -> its result, checked for the fields compared."""
    doc = read_json(path)
    form = require(doc, "format", path, lambda v: isinstance(v, str), "a string")
    if form != FORMAT:
        raise InputError(f"{path}: format {form}; compare-replays reads {FORMAT} (one trace, not --seeds)")
    policies = require(doc, "policies", path, lambda v: isinstance(v, dict), "an object")
    for name, policy in policies.items():
        where = f"{path}: policies.{name}"
        require(policy, "runnable", where, lambda v: isinstance(v, bool), "true or false")
        for key in ("samples", "samples_per_s", "goodput"):
            require(policy, key, where, _number)
        for key, _ in COUNTS:
            require(policy, key, where, _number)
    return policies


def change(base, new):
    """Signed relative change from BASE to NEW, as text."""
    if base == 0:
        return "0.00 %" if new == 0 else "new"
    return f"{100 * (new / base - 1):+.2f} %"


def print_table(rows):
    """Rows of cells, the first the header: the policy column left-aligned,
    the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        print("  ".join(cells).rstrip())


def run(args):
    base, new = read_replay(args.base), read_replay(args.new)
    problems = []
    rows = [["policy", "samples", "change", "samples/s", "change", "goodput", "change"]
            + [label for _, label in COUNTS]]
    for name in list(base) + [n for n in new if n not in base]:
        if name not in new or name not in base:
            only = args.base if name in base else args.new
            problems.append(f"{name} is only in {only}")
            rows.append([name, f"only in {only}"] + [""] * (len(rows[0]) - 2))
            continue
        b, n = base[name], new[name]
        if b["runnable"] != n["runnable"]:
            problems.append(f"{name} is runnable in {args.base if b['runnable'] else args.new} only")
        samples = relative_difference(n["samples"], b["samples"])
        if samples > args.tolerance:
            shown = f"{100 * samples:.2f} %" if math.isfinite(samples) else "from none"
            problems.append(f"{name}'s samples differ by {shown}")
        rows.append([name, f"{b['samples']:.0f} -> {n['samples']:.0f}", change(b["samples"], n["samples"]),
                     f"{b['samples_per_s']:.2f} -> {n['samples_per_s']:.2f}",
                     change(b["samples_per_s"], n["samples_per_s"]),
                     f"{100 * b['goodput']:.1f}% -> {100 * n['goodput']:.1f}%", change(b["goodput"], n["goodput"])]
                    + [f"{b[key]:g} -> {n[key]:g}" for key, _ in COUNTS])
    print_table(rows)
    if problems:
        print(f"compare-replays: DIFFERENT (tolerance {100 * args.tolerance:g} % on samples): " + "; ".join(problems))
        return 1
    print(f"compare-replays: every policy's samples within {100 * args.tolerance:g} %")
    return 0
