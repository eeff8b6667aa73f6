"""A live run's per-step losses against the single-process run's.

Prints the largest relative difference and the reconfigurations the run went
through; optionally every step side by side and a JSON summary. Exits 1 when
the largest relative difference exceeds --tolerance.

  oobleck-tools compare-losses LIVE.jsonl REFERENCE.jsonl [--table] [--json OUT] [--tolerance 1e-4]
"""
import sys

from .common import InputError, read_metrics, relative_difference, write_json


def add_arguments(parser):
    parser.add_argument("live", metavar="LIVE.jsonl", help="oobleck-run --metrics of the live run")
    parser.add_argument("reference", metavar="REFERENCE.jsonl",
                        help="oobleck-run --single-process --metrics of the same steps")
    parser.add_argument("--table", action="store_true", help="print every step's two losses")
    parser.add_argument("--json", metavar="OUT", help="write the comparison here")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest relative loss difference accepted (default: %(default)g)")


def reference_losses(metrics):
    """Step number -> loss of a single-process run."""
    losses = {}
    for line in metrics.steps:
        losses[line["step"]] = line["loss"]
    return losses


def compare(live, reference_path, reference):
    """The largest relative difference of LIVE's losses to REFERENCE's."""
    worst = 0.0
    for line in live.steps:
        if line["step"] not in reference:
            raise InputError(f"{reference_path}: no step {line['step']}, which {live.path} has")
        worst = max(worst, relative_difference(line["loss"], reference[line["step"]]))
    return worst


def run(args):
    live = read_metrics(args.live)
    reference_metrics = read_metrics(args.reference)
    if not live.steps:
        raise InputError(f"{args.live}: no step lines")
    reference = reference_losses(reference_metrics)
    worst = compare(live, args.reference, reference)
    reconfigurations = len(live.established())
    steps = live.steps
    if args.table:
        print("step  pipelines loss   one-process loss")
        for s in steps:
            print(f"{s['step']:4d}  {s['loss']:.6f}        {reference[s['step']]:.6f}")
    print(f"{len(steps)} steps, {reconfigurations} reconfigurations; largest relative difference to one process: "
          f"{worst:.1e}; loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")
    if args.json:
        write_json(args.json, {"steps": len(steps), "reconfigurations": reconfigurations,
                               "largest_relative_difference": worst, "tolerance": args.tolerance,
                               "losses": [s["loss"] for s in steps],
                               "single_process_losses": [line["loss"] for line in reference_metrics.steps]})
    if worst > args.tolerance:
        print(f"compare-losses: the losses differ by {worst:.2e}, more than the tolerance {args.tolerance:g}",
              file=sys.stderr)
        return 1
    return 0
