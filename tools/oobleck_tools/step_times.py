"""Median step times of live runs side by side, each as a ratio to the first.

Each metrics file is one run (oobleck-run --metrics); the warm-up steps are
left out. Runs given the same label (LABEL=METRICS.jsonl) are pooled, so
alternating runs of two set-ups compare them on the same machine state.
With --predicted LABEL=SIM.json (oobleck-sim iteration --json), a label's
predicted iteration and its error are printed beside its measured median;
--json writes the table.

  oobleck-tools step-times LABEL=METRICS.jsonl... [--skip 2]
                           [--predicted LABEL=SIM.json]... [--json OUT]
"""
import statistics

from .common import InputError, read_json, read_metrics, relative_error, require, write_json


def labelled(item, what):
    label, sep, path = item.partition("=")
    if not sep or not label or not path:
        raise InputError(f"{item}: expected LABEL={what}")
    return label, path


def add_arguments(parser):
    parser.add_argument("runs", nargs="+", metavar="LABEL=METRICS.jsonl", help="a run and the set-up it belongs to")
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps left out (default: %(default)s)")
    parser.add_argument("--predicted", action="append", default=[], metavar="LABEL=SIM.json",
                        help="oobleck-sim iteration --json of a label's plan")
    parser.add_argument("--json", metavar="OUT", help="write the table here")


def run(args):
    pooled = {}
    for item in args.runs:
        label, path = labelled(item, "METRICS.jsonl")
        steps = read_metrics(path, step_fields=("step", "iteration_ms")).steps
        counted = steps[args.skip:]
        if not counted:
            raise InputError(f"{path}: no steps after the first {args.skip}")
        pooled.setdefault(label, []).extend(s["iteration_ms"] for s in counted)
    predicted = {}
    for item in args.predicted:
        label, path = labelled(item, "SIM.json")
        if label not in pooled:
            raise InputError(f"{item}: no runs labelled {label}")
        predicted[label] = require(read_json(path), "iteration_ms", path)
    first, rows = None, []
    for label, times in pooled.items():
        median = statistics.median(times)
        first = first or median
        row = {"label": label, "measured_ms": median, "steps": len(times), "ratio": median / first}
        line = f"{label:>24}: median step {median:9.2f} ms over {len(times):3d} steps   ratio {median / first:6.3f}"
        if label in predicted:
            row["predicted_ms"] = predicted[label]
            row["relative_error"] = relative_error(predicted[label], median)
            line += f"   predicted {predicted[label]:9.2f} ms ({100 * row['relative_error']:+.1f} %)"
        rows.append(row)
        print(line)
    if args.json:
        write_json(args.json, {"runs": rows})
    return 0
