"""Plots a live run's metrics (oobleck-run --metrics).

The loss per step, the single-process reference's beside it when given, and
the wall time each step took from the one before (a recovery shows as the
time its step took), with every reconfiguration marked where training
resumed. Needs matplotlib.

  oobleck-tools plot-live METRICS.jsonl OUT.svg [REFERENCE.jsonl]
"""
from .common import InputError, import_pyplot, read_metrics, save_figure

# Beyond this many reconfigurations, their labels would only cover each other.
MOST_LABELLED_EVENTS = 12


def add_arguments(parser):
    parser.add_argument("metrics", metavar="METRICS.jsonl", help="oobleck-run --metrics of the live run")
    parser.add_argument("out", metavar="OUT.svg", help="the plot (format from the suffix)")
    parser.add_argument("reference", metavar="REFERENCE.jsonl", nargs="?",
                        help="oobleck-run --single-process --metrics of the same steps")


def run(args):
    metrics = read_metrics(args.metrics, step_fields=("step", "loss", "elapsed_ms"))
    if not metrics.steps:
        raise InputError(f"{args.metrics}: no step lines")
    reference = read_metrics(args.reference).steps if args.reference else None
    plt = import_pyplot("plot-live")
    steps, events = metrics.steps, metrics.established()
    figure, (loss, time) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), height_ratios=(3, 2))
    x = [s["step"] for s in steps]
    loss.plot(x, [s["loss"] for s in steps], color="tab:blue", linewidth=2, label="live run")
    if reference is not None:
        loss.plot([s["step"] for s in reference], [s["loss"] for s in reference], color="black", linewidth=0.8,
                  linestyle="--", label="one process")
    loss.set_ylabel("loss")
    loss.legend(loc="lower left")
    elapsed = [s["elapsed_ms"] for s in steps]
    time.plot(x, [b - a for a, b in zip([0.0] + elapsed, elapsed)], color="tab:gray", linewidth=1)
    time.set_ylabel("wall time per step (ms)")
    time.set_xlabel("step")
    labelled = len(events) <= MOST_LABELLED_EVENTS
    for e in events:
        for axis in (loss, time):
            axis.axvline(e["resume_step"] - 0.5, color="tab:red" if e["lost"] else "tab:green", alpha=0.5,
                         linewidth=1.5 if labelled else 0.7)
        if labelled:
            what = ", ".join([f"-{n}" for n in e["lost"]] + [f"+{n}" for n in e["added"]])
            loss.annotate(f"{what}\n{e['recovery_ms']:.0f} ms", (e["resume_step"] - 0.5, 1.0),
                          xycoords=("data", "axes fraction"), fontsize=7, va="top", ha="left")
    loss.set_title(f"{len(steps)} steps, {len(events)} reconfigurations (red: loss, green: join)")
    figure.tight_layout()
    save_figure(figure, args.out)
    plt.close(figure)
    return 0
