"""Plots measured GPU profiles against the analytic ones, layer by layer.

Forward + backward time per layer of every measured profile against the
analytic one, one panel per profile, from the JSON that gpu-report writes.
Needs matplotlib.

  oobleck-tools plot-gpu-profiles profiles/h200/profiles-vs-analytic.json OUT.svg
"""
from .common import InputError, import_pyplot, read_json, require, save_figure

COLUMNS = 2


def add_arguments(parser):
    parser.add_argument("report", metavar="REPORT.json", help="gpu-report's profiles-vs-analytic.json")
    parser.add_argument("out", metavar="OUT.svg", help="the plot (format from the suffix)")


def run(args):
    doc = read_json(args.report)
    rows = require(doc, "profiles", args.report, lambda v: isinstance(v, list) and v, "a non-empty list")
    hardware = require(doc, "hardware", args.report, lambda v: isinstance(v, str), "a string")
    plt = import_pyplot("plot-gpu-profiles")
    lines = (len(rows) + COLUMNS - 1) // COLUMNS
    fig, axes = plt.subplots(lines, COLUMNS, figsize=(11, 2.4 * lines), squeeze=False)
    try:
        for ax, r in zip(axes.flat, rows):
            layers = r["layers"]
            x = range(len(layers))
            measured = [l["measured_forward_ms"] + l["measured_backward_ms"] for l in layers]
            predicted = [l["predicted_forward_ms"] + l["predicted_backward_ms"] for l in layers]
            ax.plot(x, measured, "o-", ms=2.5, lw=1, label="measured")
            ax.plot(x, predicted, "s--", ms=2.5, lw=1, label=f"analytic ({hardware})")
            ax.set_title(f"{r['model']}, microbatch {r['microbatch_size']}, {r['dtype']}: "
                         f"{100 * r['analytic']['total_relative_error']:+.0f} % in all", fontsize=9)
            ax.set_ylabel("F+B ms", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_ylim(bottom=0)
    except (KeyError, TypeError) as error:
        raise InputError(f"{args.report}: a profile without {error}") from None
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("layer (0 embedding, last: final LayerNorm and head)", fontsize=8)
    fig.suptitle(f"Measured on {rows[0].get('device', '?')} against the analytic profile, layer by layer",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, args.out)
    plt.close(fig)
    return 0
