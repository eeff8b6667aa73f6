"""soak-check: passes a clean run, catches a missing step, a repeated sample
count, a differing loss and processes left behind."""
import json
import os
import subprocess
import time

import pytest
from conftest import HEADER, reconfiguration_line, reference_line, run_tools, step_line, write_lines

STEPS = 6
BATCH = 8  # 4 global microbatches of 2 samples


@pytest.fixture
def soak(tmp_path):
    """(live, reference, plan) of a clean soak run with 2 failures and 2 joins."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"global_microbatches": 4, "profile": {"microbatch_size": 2}, "pipelines": []}))
    reference = write_lines(tmp_path / "reference.jsonl", [reference_line(s, 5.0 - s / 10) for s in range(STEPS)])
    return tmp_path / "live.jsonl", reference, plan


def live_lines(steps=range(STEPS)):
    lines = [HEADER]
    for s in steps:
        if s == 2:
            lines.append(reconfiguration_line(2, 2, lost=["node1"], superseded=True))
            lines.append(reconfiguration_line(3, 2, lost=["node1", "node2"], added=["node5"]))
        if s == 4:
            lines.append(reconfiguration_line(4, 4, added=["node6"]))
        lines.append(step_line(s, 5.0 - s / 10, batch=BATCH))
    return lines


def check(soak, lines, *extra):
    live, reference, plan = soak
    write_lines(live, lines)
    return run_tools("soak-check", live, reference, plan, "--steps", STEPS, "--min-failures", 2, "--min-joins", 2,
                     *extra)


def test_a_clean_run_passes(soak):
    result = check(soak, live_lines())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "soak: 6 steps, 2 failures and 2 joins in 2 reconfigurations (1 superseded" in result.stdout
    assert "soak: passed" in result.stdout


def test_a_missing_step_fails(soak):
    result = check(soak, live_lines(steps=[0, 1, 2, 4, 5]))
    assert result.returncode == 1
    assert "steps are not 0..STEPS-1, each once" in result.stdout


def test_a_repeated_sample_count_fails(soak):
    lines = live_lines()
    steps = [line for line in lines if line.get("kind") == "step"]
    steps[3]["samples"] = steps[2]["samples"]  # step 3 counted no new samples
    result = check(soak, lines)
    assert result.returncode == 1
    assert "sample count 24 at step 3, expected 32" in result.stdout


def test_a_differing_loss_fails(soak):
    lines = live_lines()
    next(line for line in lines if line.get("step") == 5 and line["kind"] == "step")["loss"] *= 1.001
    result = check(soak, lines)
    assert result.returncode == 1
    assert "losses differ from the reference by 1.00e-03" in result.stdout


def test_too_few_failures_fail(soak):
    result = check(soak, live_lines(), "--min-failures", 3)
    assert result.returncode == 1
    assert "only 2 failures (want 3)" in result.stdout


def test_leftover_processes_fail(soak):
    tag = f"test-{os.getpid()}-{time.monotonic_ns()}"
    leftover = subprocess.Popen(["sleep", "60"], env=dict(os.environ, OOBLECK_SOAK_TAG=tag))
    try:
        result = check(soak, live_lines(), "--process-tag", tag)
        assert result.returncode == 1
        assert "soak: processes left: 1" in result.stdout
        assert "1 processes left" in result.stdout
    finally:
        leftover.kill()
        leftover.wait()
    assert check(soak, live_lines(), "--process-tag", tag).returncode == 0


def rollback_line(from_step, to_step, source="mirror"):
    return {"kind": "rollback", "at_ms": 50.0, "generation": 3, "from_step": from_step, "to_step": to_step,
            "source": source}


def restart_line(node="node3"):
    return {"kind": "restart", "generation": 1, "node": node, "gpu": 0, "resume_step": 2, "detect_ms": 4.0,
            "restore_ms": 300.0, "recovery_ms": 400.0}


def test_steps_trained_again_after_a_rollback_pass(soak):
    lines = live_lines()
    at = next(i for i, line in enumerate(lines) if line.get("kind") == "step" and line["step"] == 4)
    # Steps 2 and 3 trained, then rolled back to the snapshot after step 1.
    lines[at:at] = [rollback_line(3, 1), step_line(2, 4.8, batch=BATCH), step_line(3, 4.7, batch=BATCH),
                    restart_line()]
    result = check(soak, lines, "--min-rollbacks", 1, "--min-crashes", 1)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "soak: 1 workers restarted in place; 1 rollbacks past f (2 steps trained again; from mirror)" \
        in result.stdout
    assert check(soak, lines, "--min-rollbacks", 2).returncode == 1
    assert "only 1 workers restarted in place (want 2)" in check(soak, lines, "--min-crashes", 2).stdout


def test_a_rollback_whose_steps_are_not_trained_again_fails(soak):
    lines = live_lines()
    at = next(i for i, line in enumerate(lines) if line.get("kind") == "step" and line["step"] == 4)
    lines[at:at] = [rollback_line(3, 1)]  # steps 2 and 3 never trained again
    result = check(soak, lines)
    assert result.returncode == 1
    assert "steps are not 0..STEPS-1, each once" in result.stdout


def test_a_malformed_rollback_is_bad_input(soak):
    result = check(soak, live_lines() + [rollback_line(1, 3)])
    assert result.returncode == 2
    assert "a rollback record needs integers from_step >= to_step" in result.stderr
