"""compare-losses: exit 0 when the live run's losses equal the reference's,
1 when one differs beyond the tolerance."""
import json

from conftest import LOSSES, assert_no_traceback, reference_line, run_tools, write_lines


def test_equal_losses_pass(live_run, tmp_path):
    live, reference = live_run
    out = tmp_path / "losses.json"
    result = run_tools("compare-losses", live, reference, "--table", "--json", out)
    assert result.returncode == 0, result.stderr
    assert "6 steps, 2 reconfigurations; largest relative difference to one process: 0.0e+00" in result.stdout
    assert "   5  3.450000        3.450000" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["steps"] == 6 and summary["reconfigurations"] == 2
    assert summary["losses"] == LOSSES and summary["single_process_losses"] == LOSSES


def test_a_differing_loss_fails(live_run):
    live, reference = live_run
    changed = list(LOSSES)
    changed[4] *= 1 + 1e-3
    write_lines(reference, [reference_line(s, loss) for s, loss in enumerate(changed)])
    result = run_tools("compare-losses", live, reference)
    assert result.returncode == 1
    assert "largest relative difference to one process: 1.0e-03" in result.stdout
    assert "more than the tolerance" in result.stderr
    assert run_tools("compare-losses", live, reference, "--tolerance", "2e-3").returncode == 0


def test_a_reference_missing_a_step_is_bad_input(live_run):
    live, reference = live_run
    write_lines(reference, [reference_line(s, loss) for s, loss in enumerate(LOSSES[:4])])
    result = run_tools("compare-losses", live, reference)
    assert result.returncode == 2
    assert f"{reference}: no step 4" in result.stderr
    assert_no_traceback(result)


def test_no_half_written_output_on_bad_input(live_run, tmp_path):
    live, reference = live_run
    write_lines(reference, ["{"])
    out = tmp_path / "losses.json"
    assert run_tools("compare-losses", live, reference, "--json", out).returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.jsonl", "reference.jsonl"]
