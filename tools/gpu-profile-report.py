#!/usr/bin/env python3
"""Measured GPU profiles against the analytic ones: for every
profiles/MODEL-TAG-mbN-DTYPE.measured.json, the analytic profile of the same
model, microbatch and dtype on the hardware preset (written beside it as
.analytic.json), the per-layer error of its times and of the refitted
preset's, the efficiencies and overhead a least-squares fit to that one
measurement gives (with its error), and one fit over all bf16 profiles. Writes
profiles/TAG/profiles-vs-analytic.json (every layer) and prints a Markdown summary.

  gpu-profile-report.py [--tag h200] [--hardware h200] [--bin build/bin] [--profiles profiles]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gpu-profile-report: {' '.join(args)} failed:\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default="h200")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--profiles", default="profiles")
    ap.add_argument("--refit", default="h200-libtorch",
                    help="a preset fitted to these profiles: its error is reported beside the datasheet one's")
    a = ap.parse_args()
    profile = os.path.join(a.bin, "oobleck-profile")
    pattern = re.compile(rf"(.+)-{re.escape(a.tag)}-mb(\d+)-(bf16|fp32)\.measured\.json$")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(glob.glob(os.path.join(a.profiles, f"*-{a.tag}-mb*.measured.json"))):
            m = pattern.search(os.path.basename(path))
            if not m:
                continue
            model, mb, dtype = m.group(1), m.group(2), m.group(3)
            doc = json.load(open(path))
            seq = str(doc["model"]["seq_len"])
            analytic = path.replace(".measured.json", ".analytic.json")
            common = ["--model", model, "--hardware", a.hardware, "--microbatch-size", mb, "--seq-len", seq,
                      "--dtype", dtype]
            run(profile, "analytic", *common, "--out", analytic)
            fitted = os.path.join(tmp, "fitted.json")
            run(profile, "analytic", *common, "--fit", path, "--out", fitted)
            fit = json.load(open(fitted))["fit"]
            before, after = os.path.join(tmp, "before.json"), os.path.join(tmp, "after.json")
            run(profile, "compare", "--measured", path, "--predicted", analytic, "--json", before)
            run(profile, "compare", "--measured", path, "--predicted", fitted, "--json", after)
            refit_profile, refit_compare = os.path.join(tmp, "refit.json"), os.path.join(tmp, "refit-compare.json")
            run(profile, "analytic", *[a.refit if x == a.hardware else x for x in common], "--out", refit_profile)
            run(profile, "compare", "--measured", path, "--predicted", refit_profile, "--json", refit_compare)
            b, f, rf = json.load(open(before)), json.load(open(after)), json.load(open(refit_compare))
            rows.append({"model": model, "microbatch_size": int(mb), "dtype": dtype, "seq_len": int(seq),
                         "measured": os.path.basename(path), "analytic": os.path.basename(analytic),
                         "device": doc.get("device"), "library_versions": doc.get("library_versions"),
                         "whole_model_ms": (doc["whole_model"]["forward_ms"] + doc["whole_model"]["backward_ms"]
                                            if "whole_model" in doc else None),
                         "analytic": {k: b[k] for k in ("measured_ms", "predicted_ms", "total_relative_error",
                                                         "rms_relative_error", "max_relative_error")},
                         "refit_preset": {k: rf[k] for k in ("predicted_ms", "total_relative_error",
                                                             "rms_relative_error", "max_relative_error")},
                         "fit": {"compute_efficiency": fit["compute_efficiency"],
                                 "memory_efficiency": fit["memory_efficiency"],
                                 "layer_overhead_ms": fit["layer_overhead_ms"],
                                 "total_relative_error": f["total_relative_error"],
                                 "rms_relative_error": f["rms_relative_error"],
                                 "max_relative_error": f["max_relative_error"]},
                         "layers": b["layers"]})
    if not rows:
        sys.exit(f"gpu-profile-report: no {a.profiles}/*-{a.tag}-mb*.measured.json")
    bf16 = [r for r in rows if r["dtype"] == "bf16"]
    summary = {"tag": a.tag, "hardware": a.hardware, "refit_preset": a.refit, "profiles": rows}
    if bf16:
        # One fit over every bf16 profile, compute and overhead terms (with
        # the memory term too, the two roofline terms trade off freely:
        # these layers' FLOPs and bytes grow together).
        with tempfile.TemporaryDirectory() as tmp:
            r = bf16[0]
            joint = os.path.join(tmp, "joint.json")
            run(profile, "analytic", "--model", r["model"], "--hardware", a.hardware, "--microbatch-size",
                str(r["microbatch_size"]), "--seq-len", str(r["seq_len"]), "--dtype", "bf16", "--fit",
                *[os.path.join(a.profiles, x["measured"]) for x in bf16], "--fit-terms", "compute", "overhead",
                "--out", joint)
            summary["joint_fit_bf16"] = json.load(open(joint))["fit"]
    os.makedirs(os.path.join(a.profiles, a.tag), exist_ok=True)
    out = os.path.join(a.profiles, a.tag, "profiles-vs-analytic.json")
    with open(out, "w") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")

    print(f"| model | mb | dtype | measured ms | {a.hardware} ms | error | per-layer rms | per-layer max | "
          f"{a.refit} ms | error | per-layer rms | own fit: compute eff. | memory eff. | overhead ms | rms |")
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
    print(f"\nWrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
