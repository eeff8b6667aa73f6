#!/usr/bin/env python3
"""Plots a live run's metrics (oobleck-run --metrics): the loss per step, the
single-process reference's beside it when given, and the wall time each step
took from the one before (a recovery shows as the time its step took), with
every reconfiguration marked where training resumed.

usage: tools/plot-live.py METRICS.jsonl OUT.svg [REFERENCE.jsonl]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    lines = [json.loads(line) for line in open(sys.argv[1])]
    steps = [line for line in lines if "event" not in line]
    events = [line for line in lines if line.get("event") == "reconfigured" and not line["superseded"]]
    figure, (loss, time) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), height_ratios=(3, 2))
    x = [s["step"] for s in steps]
    loss.plot(x, [s["loss"] for s in steps], color="tab:blue", linewidth=2, label="live run")
    if len(sys.argv) == 4:
        reference = [json.loads(line)["loss"] for line in open(sys.argv[3])]
        loss.plot(range(len(reference)), reference, color="black", linewidth=0.8, linestyle="--",
                  label="one process")
    loss.set_ylabel("loss")
    loss.legend(loc="lower left")
    elapsed = [s["elapsed_ms"] for s in steps]
    time.plot(x, [b - a for a, b in zip([0.0] + elapsed, elapsed)], color="tab:gray", linewidth=1)
    time.set_ylabel("wall time per step (ms)")
    time.set_xlabel("step")
    labelled = len(events) <= 12  # beyond that, labels would only cover each other
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
    figure.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
