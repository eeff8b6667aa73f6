"""Plots one benchmark over commits from a bench-compare history.

tools/bench-compare.sh --history FILE appends a line per comparison (the
current tree's revision, date, and per benchmark its median time and
counters); this plots one benchmark's time, or one of its counters, in
the order the lines were appended, one point per line. Needs matplotlib.

  oobleck-tools bench-history HISTORY.jsonl BM_Templates/256 OUT.svg [--counter work_dp_states]
"""
from .common import InputError, import_pyplot, read_json_lines, save_figure


def add_arguments(parser):
    parser.add_argument("history", metavar="HISTORY.jsonl", help="tools/bench-compare.sh --history output")
    parser.add_argument("benchmark", help="the benchmark's full name, e.g. BM_Templates/256")
    parser.add_argument("out", metavar="OUT.svg", help="the plot (format from the suffix)")
    parser.add_argument("--counter", help="plot this counter instead of the time")


def run(args):
    points = []
    for _, entry in read_json_lines(args.history):
        benchmarks = entry.get("benchmarks")
        result = benchmarks.get(args.benchmark) if isinstance(benchmarks, dict) else None
        if result is None:
            continue
        value = result.get("counters", {}).get(args.counter) if args.counter else result.get("real_time")
        if value is None:
            continue
        points.append((str(entry.get("revision", "?"))[:10], entry.get("date", ""), value,
                       result.get("time_unit", "")))
    if not points:
        what = f"counter {args.counter} of " if args.counter else ""
        raise InputError(f"{args.history}: no results for {what}{args.benchmark}")
    plt = import_pyplot("bench-history")
    figure, axis = plt.subplots(figsize=(max(6, 0.5 * len(points) + 2), 4))
    x = list(range(len(points)))
    axis.plot(x, [p[2] for p in points], marker="o", color="tab:blue")
    axis.set_xticks(x, [f"{p[0]}\n{p[1][:10]}" for p in points], fontsize=7)
    axis.set_ylabel(args.counter if args.counter else f"median real time ({points[-1][3]})")
    axis.set_ylim(bottom=0)
    axis.set_title(f"{args.benchmark}: {len(points)} comparisons")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    save_figure(figure, args.out)
    plt.close(figure)
    return 0
