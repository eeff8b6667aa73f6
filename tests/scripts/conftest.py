"""Shared by the tests of tools/oobleck-tools: running a subcommand the way
the scripts do, and writing small metrics and replay files."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
TOOLS = REPOSITORY / "tools"
ENTRY = TOOLS / "oobleck-tools"

sys.path.insert(0, str(TOOLS))


def run_tools(*args, cwd=None, env=None):
    """Runs tools/oobleck-tools with this Python; the finished process."""
    return subprocess.run([sys.executable, str(ENTRY), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def write_lines(path, lines):
    """A JSON-lines file of LINES (dicts, or strings written as they are)."""
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def step_line(step, loss, batch=8, generation=1, iteration_ms=10.0):
    return {"kind": "step", "step": step, "loss": loss, "samples": (step + 1) * batch, "step_samples": batch,
            "iteration_ms": iteration_ms, "elapsed_ms": 10.0 * (step + 1), "generation": generation}


def reference_line(step, loss, batch=8):
    return {"kind": "step", "step": step, "loss": loss, "samples": (step + 1) * batch, "iteration_ms": 9.0}


def reconfiguration_line(generation, resume_step, lost=(), added=(), superseded=False):
    return {"kind": "reconfiguration", "generation": generation, "lost": list(lost), "added": list(added),
            "reasons": {n: "its agent's connection closed" for n in lost}, "resume_step": resume_step,
            "pipelines": "2+2", "detect_ms": 5.0, "plan_ms": 0.2, "communicators_ms": 3.0, "copy_ms": 7.0,
            "copy_bytes": 1000, "resume_ms": 12.0, "recovery_ms": 27.2, "superseded": superseded}


HEADER = {"kind": "run", "format": "oobleck.metrics.v1", "nodes": 4}
LOSSES = [4.5, 4.1, 3.8, 3.6, 3.5, 3.45]


@pytest.fixture
def live_run(tmp_path):
    """A live run with a header, a failure and a join, and its single-process
    reference: (live path, reference path)."""
    lines = [HEADER] + [step_line(s, LOSSES[s]) for s in range(3)]
    lines += [reconfiguration_line(2, 3, lost=["node1"])]
    lines += [step_line(s, LOSSES[s], generation=2) for s in range(3, 5)]
    lines += [reconfiguration_line(3, 5, added=["node5"])]
    lines += [step_line(5, LOSSES[5], generation=3)]
    live = write_lines(tmp_path / "live.jsonl", lines)
    reference = write_lines(tmp_path / "reference.jsonl", [reference_line(s, loss) for s, loss in enumerate(LOSSES)])
    return live, reference


def assert_no_traceback(result):
    assert "Traceback" not in result.stderr, result.stderr
