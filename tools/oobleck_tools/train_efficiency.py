"""Training speed of oobleck-run against plain PyTorch, and the FLOPs used.

Each run is NAME=PROFILE=SIDE=RESULT (tools/bench-train-efficiency.sh makes
them): SIDE oobleck reads RESULT.jsonl (oobleck-run --metrics), any other
side RESULT.json (tools/pytorch_gpt_reference.py --json). Runs of one NAME
and SIDE are pooled, their first --warmup steps left out, and the median
step gives tokens per second. The model FLOPs per token are 6 N + 12 L h S
(N: the parameters, the tied embedding once and the position embedding left
out; the second term the attention's score and value products, counted
whole as Megatron-LM and PaLM count them); with --peak-tflops, the model
FLOPs utilisation is the FLOPs per second over that peak.

  oobleck-tools train-efficiency NAME=PROFILE=SIDE=RESULT... [--warmup 1]
      [--peak-tflops T] [--device D] [--threads N] [--json OUT]
"""
import statistics

from .common import InputError, read_json, read_metrics, require, write_json


def add_arguments(parser):
    parser.add_argument("runs", nargs="+", metavar="NAME=PROFILE=SIDE=RESULT")
    parser.add_argument("--warmup", type=int, default=1, help="steps left out of each run (default: %(default)s)")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense peak for the dtype trained")
    parser.add_argument("--device", default="cpu", help="recorded in the JSON (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="recorded in the JSON (default: %(default)s)")
    parser.add_argument("--json", metavar="OUT", help="write the rows here")


def model_flops_per_token(model, where):
    layers, hidden, vocab, seq_len = (require(model, key, where) for key in ("layers", "hidden", "vocab", "seq_len"))
    parameters = layers * (12 * hidden * hidden + 13 * hidden) + vocab * hidden + 2 * hidden
    return 6 * parameters + 12 * layers * hidden * seq_len, parameters


def read_run(side, result, warmup, seq_len):
    """The run's step times after the warm-up, and its tokens per step: from
    oobleck-run's metrics (samples so far, after its first step) or from the
    reference's JSON."""
    if side == "oobleck":
        path = f"{result}.jsonl"
        steps = read_metrics(path, step_fields=("step", "iteration_ms", "samples")).steps
        times = [s["iteration_ms"] for s in steps]
        tokens_per_step = steps[0]["samples"] * seq_len if steps else 0
    else:
        path = f"{result}.json"
        document = read_json(path)
        times = [require(s, "step_ms", path)
                 for s in require(document, "steps", path, lambda v: isinstance(v, list), "a list")]
        tokens_per_step = require(document, "tokens_per_step", path)
    if len(times) <= warmup:
        raise InputError(f"{path}: {len(times)} steps, none left after {warmup} warm-up steps")
    return times[warmup:], tokens_per_step


def run(args):
    groups = {}  # (name, side) -> (times, tokens per step); names keep their first order
    profiles = {}
    for item in args.runs:
        parts = item.split("=")
        if len(parts) != 4 or not all(parts):
            raise InputError(f"{item}: expected NAME=PROFILE=SIDE=RESULT")
        name, profile_path, side, result = parts
        if name not in profiles:
            profile = read_json(profile_path)
            profiles[name] = (profile_path, profile,
                              require(profile, "model", profile_path, lambda v: isinstance(v, dict), "an object"))
        seq_len = require(profiles[name][2], "seq_len", f"{profile_path}: model")
        times, tokens_per_step = read_run(side, result, args.warmup, seq_len)
        group = groups.setdefault((name, side), ([], tokens_per_step))
        if group[1] != tokens_per_step:
            raise InputError(f"{result}: {tokens_per_step} tokens a step, where other {side} runs of {name} "
                             f"have {group[1]}")
        group[0].extend(times)
    rows = []
    for name, (profile_path, profile, model) in profiles.items():
        microbatch = require(profile, "microbatch_size", profile_path)
        flops_per_token, parameters = model_flops_per_token(model, f"{profile_path}: model")
        row = {"model": model.get("name", name), "parameters": parameters, "seq_len": model["seq_len"],
               "microbatch_size": microbatch, "dtype": model.get("dtype", "fp32"), "device": args.device,
               "threads": args.threads, "model_flops_per_token": flops_per_token, "sides": {}}
        for (group_name, side), (times, tokens_per_step) in groups.items():
            if group_name != name:
                continue
            median_ms = statistics.median(times)
            entry = {"step_ms": median_ms, "steps": len(times), "tokens_per_step": tokens_per_step,
                     "tokens_per_s": tokens_per_step / (median_ms / 1000)}
            if args.peak_tflops:
                entry["mfu"] = entry["tokens_per_s"] * flops_per_token / (args.peak_tflops * 1e12)
            row["sides"][side] = entry
        if "oobleck" in row["sides"]:
            ours = row["sides"]["oobleck"]["tokens_per_s"]
            row["speedup"] = {side: ours / e["tokens_per_s"] for side, e in row["sides"].items() if side != "oobleck"}
        rows.append(row)
        print(f"{name} ({parameters / 1e6:.1f} M parameters, {row['dtype']}, {args.device}):")
        for side, e in row["sides"].items():
            line = f"  {side:>8}: {e['step_ms']:9.1f} ms/step  {e['tokens_per_s']:10.0f} tokens/s"
            if "mfu" in e:
                line += f"  MFU {100 * e['mfu']:5.1f} %"
            if side != "oobleck" and "speedup" in row:
                line += f"   oobleck {row['speedup'][side]:.2f}x as fast"
            print(line)
    if args.json:
        write_json(args.json, {"format": "oobleck-train-efficiency/1", "peak_tflops": args.peak_tflops,
                               "rows": rows})
    return 0
