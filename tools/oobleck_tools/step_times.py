"""Median step times of live runs side by side, each as a ratio to the first.

Each metrics file is one run (oobleck-run --metrics); the warm-up steps are
left out. Runs given the same label (LABEL=METRICS.jsonl) are pooled, so
alternating runs of two set-ups compare them on the same machine state.

  oobleck-tools step-times LABEL=METRICS.jsonl... [--skip 2]
"""
import statistics

from .common import InputError, read_metrics


def add_arguments(parser):
    parser.add_argument("runs", nargs="+", metavar="LABEL=METRICS.jsonl", help="a run and the set-up it belongs to")
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps left out (default: %(default)s)")


def run(args):
    pooled = {}
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise InputError(f"{item}: expected LABEL=METRICS.jsonl")
        steps = read_metrics(path, step_fields=("step", "iteration_ms")).steps
        counted = steps[args.skip:]
        if not counted:
            raise InputError(f"{path}: no steps after the first {args.skip}")
        pooled.setdefault(label, []).extend(s["iteration_ms"] for s in counted)
    first = None
    for label, times in pooled.items():
        median = statistics.median(times)
        first = first or median
        print(f"{label:>24}: median step {median:9.2f} ms over {len(times):3d} steps   ratio {median / first:6.3f}")
    return 0
