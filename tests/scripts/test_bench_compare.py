"""bench-compare: made-up Google Benchmark runs of two trees; exit 1 on a
significant slowdown beyond the threshold or on any growth of a work_
counter, new benchmarks and counters shown as new; bench-history plots."""
import json
import os

import pytest
from conftest import REPOSITORY, assert_no_traceback, run_tools

COMPARE_PY = "/usr/share/benchmark/compare.py"
THRESHOLDS = REPOSITORY / "tests" / "benchmarks" / "thresholds.json"

needs_compare_py = pytest.mark.skipif(not os.path.exists(COMPARE_PY),
                                      reason="no Google Benchmark compare.py (Debian: libbenchmark-tools)")


def write_run(path, benchmarks):
    """A --benchmark_out file: BENCHMARKS maps a name to (times, counters)."""
    rows = []
    for name, (times, counters) in benchmarks.items():
        for i, t in enumerate(times):
            rows.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": len(times),
                         "repetition_index": i, "threads": 1, "iterations": 10, "real_time": t, "cpu_time": t,
                         "time_unit": "ms", **counters})
    path.write_text(json.dumps({"context": {"date": "x"}, "benchmarks": rows}))
    return path


def compare(tmp_path, base, current, *extra):
    base_file = write_run(tmp_path / "base-run.json", base)
    current_file = write_run(tmp_path / "current-run.json", current)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return run_tools("bench-compare", "--base", base_file, "--current", current_file, "--compare-py", COMPARE_PY,
                     "--out", out, "--thresholds", THRESHOLDS, *extra)


STEADY = [10.0, 10.1, 9.9, 10.05, 9.95, 10.02]


@needs_compare_py
def test_the_same_runs_pass(tmp_path):
    runs = {"BM_A/1": (STEADY, {"work_states": 100, "M": 4})}
    result = compare(tmp_path, runs, runs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no regression" in result.stdout
    assert (tmp_path / "out" / "compare.json").exists()


@needs_compare_py
def test_a_significant_slowdown_beyond_the_threshold_fails(tmp_path):
    slower = [t * 1.3 for t in STEADY]
    result = compare(tmp_path, {"BM_A/1": (STEADY, {})}, {"BM_A/1": (slower, {})})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SLOWER by > 10 %" in result.stdout
    assert_no_traceback(result)


@needs_compare_py
def test_a_slowdown_within_a_patterns_threshold_passes(tmp_path):
    # thresholds.json gives BM_EventQueue* 15 %.
    slower = [t * 1.12 for t in STEADY]
    result = compare(tmp_path, {"BM_EventQueueHold/16": (STEADY, {})}, {"BM_EventQueueHold/16": (slower, {})})
    assert result.returncode == 0, result.stdout
    assert "slower" in result.stdout


@needs_compare_py
def test_counters_only_shows_a_slowdown_without_failing(tmp_path):
    slower = [t * 1.3 for t in STEADY]
    result = compare(tmp_path, {"BM_A/1": (STEADY, {})}, {"BM_A/1": (slower, {})}, "--counters-only")
    assert result.returncode == 0, result.stdout
    assert "timing not judged" in result.stdout


@needs_compare_py
def test_any_growth_of_a_work_counter_fails_whatever_the_time(tmp_path):
    result = compare(tmp_path, {"BM_A/1": (STEADY, {"work_states": 100, "M": 4})},
                     {"BM_A/1": (STEADY, {"work_states": 101, "M": 5})}, "--counters-only")
    assert result.returncode == 1, result.stdout
    assert "work_states: 100 -> 101" in result.stdout and "GREW" in result.stdout
    assert "M:" not in result.stdout  # not a work counter: not judged


@needs_compare_py
def test_less_work_passes(tmp_path):
    result = compare(tmp_path, {"BM_A/1": (STEADY, {"work_states": 100})},
                     {"BM_A/1": (STEADY, {"work_states": 60})})
    assert result.returncode == 0, result.stdout
    assert "less work" in result.stdout


@needs_compare_py
def test_benchmarks_and_counters_base_lacks_are_new(tmp_path):
    result = compare(tmp_path, {"BM_A/1": (STEADY, {})},
                     {"BM_A/1": (STEADY, {"work_states": 7}), "BM_B/2": (STEADY, {"work_events": 3})})
    assert result.returncode == 0, result.stdout
    assert "work_states = 7: new" in result.stdout
    assert any(line.startswith("BM_B/2") and line.endswith("new") for line in result.stdout.splitlines())


@needs_compare_py
def test_history_appends_a_line_and_plots(tmp_path):
    history = tmp_path / "history.jsonl"
    runs = {"BM_A/1": (STEADY, {"work_states": 100})}
    for revision in ("aaa", "bbb"):
        result = compare(tmp_path, runs, runs, "--history", history, "--revision", revision)
        assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [line["revision"] for line in lines] == ["aaa", "bbb"]
    assert lines[0]["benchmarks"]["BM_A/1"]["counters"]["work_states"] == 100
    svg = tmp_path / "a.svg"
    result = run_tools("bench-history", history, "BM_A/1", svg, "--counter", "work_states")
    assert result.returncode == 0, result.stderr
    assert svg.read_text().lstrip().startswith("<?xml")
    result = run_tools("bench-history", history, "BM_Z", tmp_path / "z.svg")
    assert result.returncode == 2 and "no results" in result.stderr


def test_live_ratios_are_read_from_the_scripts_last_lines():
    from oobleck_tools.bench_compare import live_ratios
    text = ("restart / recovery: 12.3x\nmeasured / predicted: 1.021\n"
            "  snapshots every step, mirrored every 4th:      101.0 / 100.0 ms (+0.8 % / +1.7 %)\n")
    ratios = live_ratios(text)
    assert ratios["restart / recovery"] == 12.3
    assert ratios["measured / predicted"] == 1.021
    assert ratios["snapshots every step, mirrored every 4th / without (mean)"] == pytest.approx(1.008)


def test_live_ratios_from_bench_recovery_leave_its_table_out():
    from oobleck_tools.bench_compare import live_ratios
    text = """restart / recovery: 24.1x

recovery by cause, side by side (ms; the median where n > 1):
  cause                                  state from   n   detect  restore  next step  redone      back  restart/back
  node loss within f                     replicas     3     30.1     25.0      223.0       0     223.0         40.0x
  worker crash, restarted in place       own memory   3     23.8    739.0      997.9       0     997.9          6.4x
  past f, from disk (a node and its mirror)  checkpoint   1     30.1        -      223.0       2     820.0         10.1x
  whole-job restart from a checkpoint    checkpoint   1     30.1        -     9000.0       0    9000.0
  next step: failure to the next completed step; redone: committed steps trained again after a rollback;
worker crash / node loss, to the next completed step: 3.5x (880 against 250 ms)
"""
    ratios = live_ratios(text)
    assert ratios == {"restart / recovery": 24.1, "worker crash / node loss, to the next completed step": 3.5}


@needs_compare_py
def test_a_live_ratio_moving_beyond_30_percent_fails(tmp_path):
    (tmp_path / "live-base.txt").write_text("restart / recovery: 10.0x\nmeasured / predicted: 1.00\n")
    (tmp_path / "live-current.txt").write_text("restart / recovery: 6.0x\nmeasured / predicted: 1.05\n")
    runs = {"BM_A/1": (STEADY, {})}
    result = compare(tmp_path, runs, runs, "--live-base", tmp_path / "live-base.txt",
                     "--live-current", tmp_path / "live-current.txt")
    assert result.returncode == 1, result.stdout
    assert "MOVED" in result.stdout


def test_a_malformed_run_is_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    (tmp_path / "out").mkdir()
    result = run_tools("bench-compare", "--base", bad, "--current", bad, "--compare-py", COMPARE_PY,
                       "--out", tmp_path / "out")
    assert result.returncode == 2 and "malformed JSON" in result.stderr
    assert_no_traceback(result)
