"""Measured GPU profiles against the analytic ones.

For every PROFILES/MODEL-TAG-mbN-DTYPE.measured.json: the analytic profile of
the same model, microbatch and dtype on the hardware preset (written beside it
as .analytic.json), the per-layer error of its times and of the refitted
preset's, the efficiencies and overhead a least-squares fit to that one
measurement gives (with its error), and one fit over all bf16 profiles.
Writes PROFILES/TAG/profiles-vs-analytic.json (every layer) and prints a
Markdown summary.

  oobleck-tools gpu-report [--tag h200] [--hardware h200] [--refit h200-libtorch]
                           [--bin build/bin] [--profiles profiles]
"""
import glob
import os
import re
import sys
import tempfile

from .common import REPOSITORY, InputError, read_json, require, run_program, write_json


def add_arguments(parser):
    parser.add_argument("--tag", default="h200", help="the device tag in the file names (default: %(default)s)")
    parser.add_argument("--hardware", default="h200", help="the analytic hardware preset (default: %(default)s)")
    parser.add_argument("--bin", default=str(REPOSITORY / "build/bin"),
                        help="folder of oobleck-profile (default: build/bin in this repository)")
    parser.add_argument("--profiles", default=str(REPOSITORY / "profiles"),
                        help="folder of the measured profiles (default: profiles in this repository)")
    parser.add_argument("--refit", default="h200-libtorch",
                        help="a preset fitted to these profiles: its error is reported beside the datasheet one's "
                             "(default: %(default)s)")


def in_repository(path):
    """PATH relative to the repository when inside it, else absolute: the
    profiles record the paths they were given, and these stay the same
    whatever folder this runs from (oobleck-profile runs in the repository)."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, REPOSITORY)
    return absolute if relative.startswith("..") else relative


def profile_tool(*args):
    return run_program(*args, cwd=REPOSITORY)


def compare(profile, measured, predicted, out):
    profile_tool(profile, "compare", "--measured", measured, "--predicted", predicted, "--json", out)
    return read_json(out)


def report_one(args, profile, path, match, tmp):
    """One measured profile against the analytic one, the refitted preset
    and its own fit."""
    model, mb, dtype = match.group(1), match.group(2), match.group(3)
    doc = read_json(REPOSITORY / path)
    model_doc = require(doc, "model", path, lambda v: isinstance(v, dict), "an object")
    seq = str(require(model_doc, "seq_len", f"{path}: model"))
    analytic = path.replace(".measured.json", ".analytic.json")
    common = ["--model", model, "--hardware", args.hardware, "--microbatch-size", mb, "--seq-len", seq,
              "--dtype", dtype]
    profile_tool(profile, "analytic", *common, "--out", analytic)
    fitted = os.path.join(tmp, "fitted.json")
    profile_tool(profile, "analytic", *common, "--fit", path, "--out", fitted)
    fit = require(read_json(fitted), "fit", fitted, lambda v: isinstance(v, dict), "an object")
    before = compare(profile, path, analytic, os.path.join(tmp, "before.json"))
    after = compare(profile, path, fitted, os.path.join(tmp, "after.json"))
    refit_profile = os.path.join(tmp, "refit.json")
    profile_tool(profile, "analytic", *[args.refit if x == args.hardware else x for x in common], "--out",
                 refit_profile)
    refit = compare(profile, path, refit_profile, os.path.join(tmp, "refit-compare.json"))
    whole = doc.get("whole_model")
    return {"model": model, "microbatch_size": int(mb), "dtype": dtype, "seq_len": int(seq),
            "measured": os.path.basename(path),
            "analytic": {k: before[k] for k in ("measured_ms", "predicted_ms", "total_relative_error",
                                                "rms_relative_error", "max_relative_error")},
            "device": doc.get("device"), "library_versions": doc.get("library_versions"),
            "whole_model_ms": whole["forward_ms"] + whole["backward_ms"] if whole else None,
            "refit_preset": {k: refit[k] for k in ("predicted_ms", "total_relative_error",
                                                   "rms_relative_error", "max_relative_error")},
            "fit": {"compute_efficiency": fit["compute_efficiency"],
                    "memory_efficiency": fit["memory_efficiency"],
                    "layer_overhead_ms": fit["layer_overhead_ms"],
                    "total_relative_error": after["total_relative_error"],
                    "rms_relative_error": after["rms_relative_error"],
                    "max_relative_error": after["max_relative_error"]},
            "layers": before["layers"]}


def joint_fit(args, profile, bf16):
    """One fit over every bf16 profile, compute and overhead terms (with the
    memory term too, the two roofline terms trade off freely: these layers'
    FLOPs and bytes grow together)."""
    with tempfile.TemporaryDirectory() as tmp:
        first = bf16[0]
        joint = os.path.join(tmp, "joint.json")
        profile_tool(profile, "analytic", "--model", first["model"], "--hardware", args.hardware,
                     "--microbatch-size", str(first["microbatch_size"]), "--seq-len", str(first["seq_len"]),
                     "--dtype", "bf16", "--fit",
                     *[os.path.join(in_repository(args.profiles), x["measured"]) for x in bf16],
                     "--fit-terms", "compute", "overhead", "--out", joint)
        return require(read_json(joint), "fit", joint, lambda v: isinstance(v, dict), "an object")


def print_summary(args, summary, rows, bf16):
    print(f"| model | mb | dtype | measured ms | {args.hardware} ms | error | per-layer rms | per-layer max | "
          f"{args.refit} ms | error | per-layer rms | own fit: compute eff. | memory eff. | overhead ms | rms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        an, rp, fi = r["analytic"], r["refit_preset"], r["fit"]
        print(f"| {r['model']} | {r['microbatch_size']} | {r['dtype']} | {an['measured_ms']:.1f} | "
              f"{an['predicted_ms']:.1f} | {100 * an['total_relative_error']:+.0f} % | "
              f"{100 * an['rms_relative_error']:.0f} % | {100 * an['max_relative_error']:.0f} % | "
              f"{rp['predicted_ms']:.1f} | {100 * rp['total_relative_error']:+.0f} % | "
              f"{100 * rp['rms_relative_error']:.0f} % | "
              f"{fi['compute_efficiency']:.3f} | {fi['memory_efficiency']:.3f} | {fi['layer_overhead_ms']:.3f} | "
              f"{100 * fi['rms_relative_error']:.0f} % |")
    if bf16:
        j = summary["joint_fit_bf16"]
        print(f"\nOne fit over the {len(bf16)} bf16 profiles (compute and overhead terms): compute efficiency "
              f"{j['compute_efficiency']:.3f}, overhead {j['layer_overhead_ms']:.3f} ms per layer forward; "
              f"per-layer error rms {100 * j['rms_relative_error']:.1f} %, max {100 * j['max_relative_error']:.1f} %")


def run(args):
    profile = os.path.abspath(os.path.join(args.bin, "oobleck-profile"))
    # Presets may be hardware files too, named from this folder.
    args.hardware, args.refit = (in_repository(h) if os.path.isfile(h) else h for h in (args.hardware, args.refit))
    folder = in_repository(args.profiles)
    pattern = re.compile(rf"(.+)-{re.escape(args.tag)}-mb(\d+)-(bf16|fp32)\.measured\.json$")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(f"*-{args.tag}-mb*.measured.json", root_dir=REPOSITORY / folder)):
            path = os.path.join(folder, path)
            match = pattern.search(os.path.basename(path))
            if match:
                try:
                    rows.append(report_one(args, profile, path, match, tmp))
                except KeyError as error:
                    raise InputError(f"{path}: oobleck-profile's output for it has no {error}") from None
    if not rows:
        raise InputError(f"no {args.profiles}/*-{args.tag}-mb*.measured.json")
    bf16 = [r for r in rows if r["dtype"] == "bf16"]
    summary = {"tag": args.tag, "hardware": args.hardware, "refit_preset": args.refit, "profiles": rows}
    if bf16:
        summary["joint_fit_bf16"] = joint_fit(args, profile, bf16)
    os.makedirs(os.path.join(args.profiles, args.tag), exist_ok=True)
    out = os.path.join(args.profiles, args.tag, "profiles-vs-analytic.json")
    write_json(out, summary)
    try:
        print_summary(args, summary, rows, bf16)
    except KeyError as error:
        raise InputError(f"the joint fit has no {error}") from None
    print(f"\nWrote {out}", file=sys.stderr)
    return 0
