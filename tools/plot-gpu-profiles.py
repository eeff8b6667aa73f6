#!/usr/bin/env python3
"""Per-layer forward + backward time of every measured GPU profile against
the analytic one, one panel per profile, from the JSON that
gpu-profile-report.py writes.

  plot-gpu-profiles.py profiles/h200/profiles-vs-analytic.json OUT.svg
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    doc = json.load(open(argv[1]))
    rows = doc["profiles"]
    columns = 2
    lines = (len(rows) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(11, 2.4 * lines), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        layers = r["layers"]
        x = range(len(layers))
        measured = [l["measured_forward_ms"] + l["measured_backward_ms"] for l in layers]
        predicted = [l["predicted_forward_ms"] + l["predicted_backward_ms"] for l in layers]
        ax.plot(x, measured, "o-", ms=2.5, lw=1, label="measured")
        ax.plot(x, predicted, "s--", ms=2.5, lw=1, label=f"analytic ({doc['hardware']})")
        ax.set_title(f"{r['model']}, microbatch {r['microbatch_size']}, {r['dtype']}: "
                     f"{100 * r['analytic']['total_relative_error']:+.0f} % in all", fontsize=9)
        ax.set_ylabel("F+B ms", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("layer (0 embedding, last: final LayerNorm and head)", fontsize=8)
    fig.suptitle(f"Measured on {rows[0].get('device', '?')} against the analytic profile, layer by layer",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[2])


if __name__ == "__main__":
    main(sys.argv)
