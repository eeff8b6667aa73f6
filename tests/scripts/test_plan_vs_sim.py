"""plan-vs-sim: the planner's predicted iteration against the one the
simulator plays, and the same at 1F1B's period, on bundled profiles."""
import json
import os

import pytest
from conftest import REPOSITORY, assert_no_traceback, run_tools

BIN = os.environ.get("OOBLECK_BIN")
needs_programs = pytest.mark.skipif(not BIN, reason="OOBLECK_BIN (oobleck-plan, oobleck-sim) not given")
PROFILES = REPOSITORY / "profiles"


@needs_programs
def test_a_plan_the_planner_prices_right_passes(tmp_path):
    out = tmp_path / "cases.json"
    result = run_tools("plan-vs-sim", "--bin", BIN, "--nodes", "8", "--fault-tolerance", "0", "--json", out,
                       PROFILES / "gpt3-1.3b-a100.analytic.json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "oobleck.plan-vs-sim.v1"
    [case] = doc["cases"]
    assert case["error"] == pytest.approx(case["predicted_ms"] / case["played_ms"] - 1)
    # The planner prices each pipeline as it plays: the simulator's time.
    assert abs(case["error"]) <= 1e-9
    # The period reckoned here, what the searches weigh, is 1 ms longer in 46 s.
    assert case["cycle_bound_ms"] == pytest.approx(case["predicted_ms"], rel=1e-4)
    assert case["cycle_bound_ms"] != pytest.approx(case["predicted_ms"], rel=1e-9)
    # A hand-written profile records no memory bandwidth: the planner leaves
    # the optimizer step out, which the simulator plays at 1.5 TB/s (0.5 %
    # on 512 nodes). Beyond a tolerance of 1e-3 the tool says so.
    strict = run_tools("plan-vs-sim", "--bin", BIN, "--nodes", "512", "--fault-tolerance", "0", "--tolerance", "1e-3",
                       PROFILES / "gpt3-1.3b-a100.handwritten.json")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "0 of 1" in strict.stdout


@needs_programs
def test_long_transfers_the_planner_prices_at_1f1b_period(tmp_path):
    # A single H200's measured profile, its links measured at 3 GB/s: deep
    # pipelines whose transfers (5.7 ms) are long beside a stage's compute.
    # The planner prices 1F1B's round trip and the optimizer steps after it;
    # the tool's own reckoning of that period from the plan's stages and the
    # profile's links agrees with it, and the simulator plays the same.
    out = tmp_path / "cases.json"
    result = run_tools("plan-vs-sim", "--bin", BIN, "--nodes", "8", "--fault-tolerance", "0", "--tolerance", "1e-6",
                       "--json", out, PROFILES / "gpt3-1.3b-h200-mb1-bf16.measured.json")
    assert result.returncode == 0, result.stdout + result.stderr  # within a tolerance of 1e-6
    [case] = json.loads(out.read_text())["cases"]
    assert case["cycle_bound_ms"] == pytest.approx(case["predicted_ms"], rel=1e-9)
    assert abs(case["error"]) < 1e-6
    assert "mean error" in result.stdout


def test_bad_input_is_refused(tmp_path):
    result = run_tools("plan-vs-sim", "--nodes", "0", PROFILES / "gpt3-1.3b-a100.analytic.json")
    assert result.returncode == 2
    assert "--nodes" in result.stderr
    assert_no_traceback(result)
