#!/usr/bin/env python3
"""A live run's per-step losses against the single-process run's: the
largest relative difference, the reconfigurations the run went through,
and optionally every step side by side and a JSON summary.

  compare-losses.py LIVE.jsonl REFERENCE.jsonl [--table] [--json OUT]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("live")
    ap.add_argument("reference")
    ap.add_argument("--table", action="store_true", help="print every step's two losses")
    ap.add_argument("--json", help="write the comparison here")
    a = ap.parse_args()
    live = [json.loads(l) for l in open(a.live) if l.strip()]
    steps = [l for l in live if "event" not in l]
    reference = [json.loads(l)["loss"] for l in open(a.reference) if l.strip()]
    worst = max(abs(s["loss"] - reference[s["step"]]) / abs(reference[s["step"]]) for s in steps)
    reconfigurations = sum(1 for l in live if l.get("event") == "reconfigured" and not l["superseded"])
    if a.table:
        print("step  pipelines loss   one-process loss")
        for s in steps:
            print(f"{s['step']:4d}  {s['loss']:.6f}        {reference[s['step']]:.6f}")
    print(f"{len(steps)} steps, {reconfigurations} reconfigurations; largest relative difference to one process: "
          f"{worst:.1e}; loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": len(steps), "reconfigurations": reconfigurations, "largest_relative_difference": worst,
                       "losses": [s["loss"] for s in steps], "single_process_losses": reference}, f, indent=2)


if __name__ == "__main__":
    main()
