"""compare-run-sim, run-vs-sim and sim-scenario on small hand-made inputs:
the numbers printed, and exit 1 beyond --max-error."""
import json

from conftest import assert_no_traceback, run_tools, step_line, write_lines


def trace(stage_ms):
    """A Chrome trace with one forward and one backward per stage, plus a
    communication lane that is no stage."""
    events = []
    for tid, (forward, backward) in enumerate(stage_ms):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": f"stage {tid}"}})
        events.append({"ph": "X", "name": "F0", "pid": 0, "tid": tid, "ts": 0, "dur": forward * 1000})
        events.append({"ph": "X", "name": "B0", "pid": 0, "tid": tid, "ts": forward * 1000, "dur": backward * 1000})
    events.append({"ph": "X", "name": "send", "pid": 0, "tid": 1000, "ts": 0, "dur": 5000})
    return {"traceEvents": events}


def inputs(tmp_path, predicted_ms):
    paths = {name: tmp_path / f"{name}.json" for name in ("sim", "sim_trace", "live_trace", "plan")}
    paths["sim"].write_text(json.dumps({"iteration_ms": predicted_ms}))
    paths["sim_trace"].write_text(json.dumps(trace([(10, 20), (12, 24)])))
    paths["live_trace"].write_text(json.dumps(trace([(10, 20), (15, 30)])))
    paths["plan"].write_text(json.dumps({"iteration_ms": 90.0, "pipelines": [{"nodes": [0, 1], "microbatches": 8}]}))
    # Warm-up steps are slow; the median of steps 2.. is 100 ms.
    metrics = write_lines(tmp_path / "metrics.jsonl", [step_line(0, 5.0, iteration_ms=400.0),
                                                       step_line(1, 4.0, iteration_ms=300.0)]
                          + [step_line(s, 3.0, iteration_ms=ms) for s, ms in enumerate([99.0, 100.0, 101.0], 2)])
    return paths, metrics


def test_compare_run_sim_per_stage_and_iteration(tmp_path):
    paths, metrics = inputs(tmp_path, predicted_ms=110.0)
    out = tmp_path / "compare.json"
    result = run_tools("compare-run-sim", paths["sim"], paths["sim_trace"], paths["live_trace"], metrics,
                       "--json", out)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[-3:] == ["30.00", "30.00", "+0.0%"]
    assert lines[2].split()[-3:] == ["36.00", "45.00", "-20.0%"]
    assert lines[3].split()[-3:] == ["110.00", "100.00", "+10.0%"]
    summary = json.loads(out.read_text())
    assert summary["measured_iteration_ms"] == 100.0 and summary["measured_steps"] == 3
    assert len(summary["stages"]) == 2


def test_compare_run_sim_counts_tensor_parallel_all_reduces_in_the_passes(tmp_path):
    # Stage 1 of the simulated trace as oobleck-sim shows a tensor-parallel
    # stage: each pass's compute, then its all-reduces (8 + 4 and 20 + 4 ms):
    # the same passes as above.
    paths, metrics = inputs(tmp_path, predicted_ms=110.0)
    sim = json.loads(paths["sim_trace"].read_text())
    events = [e for e in sim["traceEvents"] if not (e.get("tid") == 1 and e["ph"] == "X")]
    for name, ts, dur in [("F0", 0, 8), ("TP all-reduce F0", 8, 4), ("B0", 12, 20), ("TP all-reduce B0", 32, 4)]:
        events.append({"ph": "X", "name": name, "pid": 0, "tid": 1, "ts": ts * 1000, "dur": dur * 1000})
    paths["sim_trace"].write_text(json.dumps({"traceEvents": events}))
    result = run_tools("compare-run-sim", paths["sim"], paths["sim_trace"], paths["live_trace"], metrics)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].split()[-3:] == ["36.00", "45.00", "-20.0%"]


def test_compare_run_sim_reads_a_live_trace_of_two_gpu_nodes(tmp_path):
    # oobleck-run on 2-GPU nodes: a thread per worker (stage * 2 + shard);
    # stage 1 has degree 2 and its all-reduces are drawn nested inside its
    # passes. Shard 0 stands for the stage; nested spans are not added again.
    paths, metrics = inputs(tmp_path, predicted_ms=110.0)
    events = []
    for tid, passes in [(0, [("F0", 0, 10), ("B0", 10, 20)]),
                        (2, [("F0", 0, 15), ("TP all-reduce F0", 5, 3), ("B0", 15, 30), ("TP all-reduce B0", 20, 3)]),
                        (3, [("F0", 0, 99), ("B0", 99, 99)])]:
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": f"worker {tid}"}})
        for name, ts, dur in passes:
            events.append({"ph": "X", "name": name, "pid": 0, "tid": tid, "ts": ts * 1000, "dur": dur * 1000})
    paths["live_trace"].write_text(json.dumps({"traceEvents": events,
                                               "otherData": {"source": "oobleck-run", "gpus_per_node": 2}}))
    result = run_tools("compare-run-sim", paths["sim"], paths["sim_trace"], paths["live_trace"], metrics)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[-3:] == ["30.00", "30.00", "+0.0%"]
    assert lines[2].split()[-3:] == ["36.00", "45.00", "-20.0%"]


def test_compare_run_sim_max_error(tmp_path):
    paths, metrics = inputs(tmp_path, predicted_ms=110.0)
    args = ["compare-run-sim", paths["sim"], paths["sim_trace"], paths["live_trace"], metrics]
    assert run_tools(*args, "--max-error", "0.2").returncode == 0
    result = run_tools(*args, "--max-error", "0.05")
    assert result.returncode == 1
    assert "off by +10.0 %" in result.stderr


def test_compare_run_sim_bad_trace(tmp_path):
    paths, metrics = inputs(tmp_path, predicted_ms=110.0)
    paths["live_trace"].write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "F0", "pid": 0, "tid": 0}]}))
    result = run_tools("compare-run-sim", paths["sim"], paths["sim_trace"], paths["live_trace"], metrics)
    assert result.returncode == 2
    assert f"{paths['live_trace']}: trace event 0: no 'ts'" in result.stderr
    assert_no_traceback(result)


def test_run_vs_sim(tmp_path):
    paths, metrics = inputs(tmp_path, predicted_ms=80.0)
    result = run_tools("run-vs-sim", paths["plan"], paths["sim"], metrics)
    assert result.returncode == 0, result.stderr
    assert "plan: 2-node pipeline, 8 microbatches" in result.stdout
    assert "measured by oobleck-run (median of steps 2..4):    100.00 ms" in result.stdout
    assert "measured / predicted: 1.250" in result.stdout
    assert run_tools("run-vs-sim", paths["plan"], paths["sim"], metrics, "--max-error", "0.1").returncode == 1


def test_run_vs_sim_cores_worth(tmp_path):
    # One process takes 160 ms a step; the 2-node run 100 ms: 0.8 of a core
    # per core. Stages of 30 and 40 ms a microbatch, 8 microbatches: at most
    # 70 / (2 * 40 * 9 / 8) = 0.778 from this plan, 8 / 9 balanced.
    paths, metrics = inputs(tmp_path, predicted_ms=100.0)
    paths["plan"].write_text(json.dumps({"iteration_ms": 90.0, "pipelines": [
        {"nodes": [0, 1], "microbatches": 8, "stages": [{"forward_ms": 10, "backward_ms": 20},
                                                        {"forward_ms": 15, "backward_ms": 25}]}]}))
    single = write_lines(tmp_path / "single.jsonl",
                         [step_line(s, 3.0, iteration_ms=ms) for s, ms in enumerate([500.0, 400.0, 159.0, 160.0, 170.0])])
    result = run_tools("run-vs-sim", paths["plan"], paths["sim"], metrics, "--single", single)
    assert result.returncode == 0, result.stderr
    assert "one process (median of the same steps):                160.00 ms" in result.stdout
    assert "cores' worth: one process / (2 cores x the run): 0.800" in result.stdout
    assert "what the plan's stages allow, as profiled:        0.778" in result.stdout
    assert "the most balanced stages would:                   0.889" in result.stdout
    (tmp_path / "empty.jsonl").write_text("")
    bad = run_tools("run-vs-sim", paths["plan"], paths["sim"], metrics, "--single", tmp_path / "empty.jsonl")
    assert bad.returncode == 2
    assert_no_traceback(bad)


def test_sim_scenario(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"measured": {"copy_bytes_per_s": 1.5e10, "gemm_flops_per_s": 1e11}}))
    out = tmp_path / "scenario.json"
    assert run_tools("sim-scenario", profile, out).returncode == 0
    assert json.loads(out.read_text()) == {"cluster": {"device_memory_bytes_per_s": 1.5e10}}
    profile.write_text(json.dumps({"measured": {}}))
    result = run_tools("sim-scenario", profile, out)
    assert result.returncode == 2
    assert f"{profile}: measured: no \"copy_bytes_per_s\" field" in result.stderr


def test_step_times_pools_runs_by_label_and_prints_ratios(tmp_path):
    def run_file(name, times):
        return write_lines(tmp_path / name, [step_line(s, 3.0, iteration_ms=ms) for s, ms in enumerate(times)])
    a1 = run_file("a1.jsonl", [900.0, 800.0, 100.0, 102.0])
    a2 = run_file("a2.jsonl", [900.0, 800.0, 98.0, 100.0])
    b1 = run_file("b1.jsonl", [900.0, 800.0, 150.0, 150.0])
    result = run_tools("step-times", f"one={a1}", f"two={b1}", f"one={a2}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "100.00 ms over   4 steps   ratio  1.000" in lines[0]
    assert "150.00 ms over   2 steps   ratio  1.500" in lines[1]


def test_step_times_puts_predictions_beside_the_medians(tmp_path):
    metrics = write_lines(tmp_path / "a.jsonl", [step_line(s, 3.0, iteration_ms=ms)
                                                 for s, ms in enumerate([900.0, 800.0, 100.0, 100.0])])
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"iteration_ms": 110.0}))
    out = tmp_path / "table.json"
    result = run_tools("step-times", f"one={metrics}", "--predicted", f"one={sim}", "--json", out)
    assert result.returncode == 0, result.stderr
    assert "predicted    110.00 ms (+10.0 %)" in result.stdout
    row = json.loads(out.read_text())["runs"][0]
    assert row["predicted_ms"] == 110.0 and abs(row["relative_error"] - 0.1) < 1e-12
    result = run_tools("step-times", f"one={metrics}", "--predicted", f"two={sim}")
    assert result.returncode == 2 and "no runs labelled two" in result.stderr
    assert_no_traceback(result)


def test_step_times_refuses_a_run_without_a_label(tmp_path):
    result = run_tools("step-times", tmp_path / "x.jsonl")
    assert result.returncode == 2
    assert_no_traceback(result)
