"""compare-replays: policy by policy, exit 1 when samples change by more than
the tolerance (1 % by default)."""
import json

import pytest
from conftest import assert_no_traceback, run_tools


def replay(samples, failures=12):
    """An oobleck-sim replay --json result with two policies."""
    policies = {}
    for name, share in (("oobleck", 1.0), ("checkpoint", 0.5)):
        policies[name] = {"runnable": True, "reason": "", "samples": samples * share,
                          "samples_per_s": samples * share / 3600, "goodput": 0.8 * share,
                          "time_s": {"training": 3000.0}, "failures": failures, "reconfigurations": 10,
                          "restarts": 1, "unrecoverable": 0, "checkpoint_interval_iterations": 10,
                          "checkpoint_save_s": 5.0}
    return {"format": "oobleck.replay.v1", "duration_s": 3600.0, "samples_per_iteration": 256, "policies": policies}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("change, status", [(0.02, 1), (-0.02, 1), (0.005, 0), (0.0, 0)])
def test_a_change_in_samples_beyond_the_tolerance_fails(tmp_path, change, status):
    base = write(tmp_path / "base.json", replay(100000.0))
    new = write(tmp_path / "new.json", replay(100000.0 * (1 + change), failures=13))
    result = run_tools("compare-replays", base, new)
    assert result.returncode == status, result.stdout + result.stderr
    line = next(l for l in result.stdout.splitlines() if l.startswith("oobleck"))
    assert f"{100 * change:+.2f} %" in line
    assert "12 -> 13" in line


def test_the_tolerance_is_an_option(tmp_path):
    base = write(tmp_path / "base.json", replay(100000.0))
    new = write(tmp_path / "new.json", replay(102000.0))
    assert run_tools("compare-replays", base, new, "--tolerance", "0.03").returncode == 0


def test_a_policy_in_one_file_only_fails(tmp_path):
    doc = replay(100000.0)
    base = write(tmp_path / "base.json", doc)
    del doc["policies"]["checkpoint"]
    new = write(tmp_path / "new.json", doc)
    result = run_tools("compare-replays", base, new)
    assert result.returncode == 1
    assert "checkpoint is only in" in result.stdout


def test_a_seeds_result_is_bad_input(tmp_path):
    base = write(tmp_path / "base.json", replay(100000.0))
    seeds = write(tmp_path / "seeds.json", {"format": "oobleck.replay-seeds.v1", "policies": {}})
    result = run_tools("compare-replays", base, seeds)
    assert result.returncode == 2
    assert f"{seeds}: format oobleck.replay-seeds.v1" in result.stderr
    assert_no_traceback(result)


def test_a_policy_without_samples_is_bad_input(tmp_path):
    doc = replay(100000.0)
    base = write(tmp_path / "base.json", doc)
    del doc["policies"]["oobleck"]["samples"]
    new = write(tmp_path / "new.json", doc)
    result = run_tools("compare-replays", base, new)
    assert result.returncode == 2
    assert f"{new}: policies.oobleck: no \"samples\" field" in result.stderr
