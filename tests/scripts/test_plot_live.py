"""plot-live writes an SVG of a live run (needs matplotlib)."""
import importlib.util

import pytest
from conftest import run_tools

pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="this Python has no matplotlib (Debian: python3-matplotlib)")


def test_plot_live_writes_an_svg(live_run, tmp_path):
    live, reference = live_run
    out = tmp_path / "live.svg"
    result = run_tools("plot-live", live, out, reference)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert len(text) > 10000  # axes, two lines, markers: not an empty figure
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_plot_live_leaves_no_file_on_bad_input(live_run, tmp_path):
    live, reference = live_run
    live.write_text('{"kind": "step", "step": 0, "loss": 1.0}\n')  # no elapsed_ms
    out = tmp_path / "live.svg"
    result = run_tools("plot-live", live, out, reference)
    assert result.returncode == 2
    assert f"{live}:1: no \"elapsed_ms\" field" in result.stderr
    assert not out.exists()
