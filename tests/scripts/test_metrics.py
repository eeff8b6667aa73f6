"""The shared metrics reader: lines selected by kind, unknown kinds ignored,
bad input reported with its file and line (exit 2, no traceback)."""
import pytest
from conftest import HEADER, REPOSITORY, assert_no_traceback, reconfiguration_line, run_tools, step_line, write_lines

from oobleck_tools.common import InputError, read_metrics


def test_lines_are_selected_by_kind(tmp_path):
    path = write_lines(tmp_path / "m.jsonl", [
        HEADER,
        step_line(0, 2.0),
        {"kind": "checkpoint", "step": 1, "loss": 99.0, "bytes": 10},  # a kind this reader does not know
        reconfiguration_line(2, 1, lost=["node0"], superseded=True),
        reconfiguration_line(3, 1, lost=["node1"]),
        {"kind": "no_plan", "generation": 4, "message": "too few nodes"},
        step_line(1, 1.5),
        "",
    ])
    metrics = read_metrics(path)
    assert metrics.header["nodes"] == 4
    assert [s["step"] for s in metrics.steps] == [0, 1]
    assert [s["loss"] for s in metrics.steps] == [2.0, 1.5]
    assert [r["generation"] for r in metrics.reconfigurations] == [2, 3]
    assert [r["generation"] for r in metrics.established()] == [3]
    assert [n["message"] for n in metrics.no_plans] == ["too few nodes"]


def test_a_step_line_keeps_fields_the_reader_does_not_know(tmp_path):
    line = dict(step_line(0, 2.0), tokens_per_s=123.0)
    assert read_metrics(write_lines(tmp_path / "m.jsonl", [line])).steps == [line]


def test_single_process_lines_need_no_live_fields(tmp_path):
    path = write_lines(tmp_path / "m.jsonl", [{"kind": "step", "step": 0, "loss": 1.0, "samples": 4,
                                                "iteration_ms": 3.0}])
    assert read_metrics(path).steps[0]["loss"] == 1.0


@pytest.mark.parametrize("line, message", [
    ({"step": 0, "loss": 1.0}, 'no "kind" field'),
    ({"kind": "step", "loss": 1.0}, 'no "step" field'),
    ({"kind": "step", "step": "0", "loss": 1.0}, '"step" is not an integer'),
    ({"kind": "reconfiguration", "generation": 2}, 'no "lost" field'),
    ({"kind": "run", "format": "oobleck.metrics.v2"}, "format 'oobleck.metrics.v2'"),
    ('{"kind": "step", "step": 0,', "malformed JSON"),
    ("[1, 2]", "not a JSON object"),
])
def test_bad_lines_name_the_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "m.jsonl", [step_line(0, 2.0), line])
    with pytest.raises(InputError) as error:
        read_metrics(path)
    assert str(error.value).startswith(f"{path}:2: ")
    assert message in str(error.value)


def test_a_malformed_line_exits_2_naming_file_and_line(tmp_path, live_run):
    live, reference = live_run
    write_lines(live, [step_line(0, 2.0), "{not json"])
    result = run_tools("compare-losses", live, reference)
    assert result.returncode == 2
    assert f"{live}:2: malformed JSON" in result.stderr
    assert_no_traceback(result)


def test_a_missing_file_exits_2_naming_it(tmp_path, live_run):
    live, _ = live_run
    missing = tmp_path / "absent.jsonl"
    result = run_tools("compare-losses", live, missing)
    assert result.returncode == 2
    assert f"{missing}: no such file" in result.stderr
    assert_no_traceback(result)


def test_an_old_format_file_is_refused(tmp_path, live_run):
    _, reference = live_run
    old = write_lines(tmp_path / "old.jsonl", [{"step": 0, "loss": 4.5, "samples": 8, "step_samples": 8},
                                               {"event": "reconfigured", "generation": 2}])
    result = run_tools("compare-losses", old, reference)
    assert result.returncode == 2
    assert f"{old}:1: no \"kind\" field" in result.stderr


@pytest.mark.parametrize("path", sorted((REPOSITORY / "profiles").glob("**/*.jsonl")),
                         ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_the_recorded_runs_are_in_the_current_format(path):
    metrics = read_metrics(path)
    assert metrics.steps
    assert [s["step"] for s in metrics.steps] == list(range(len(metrics.steps)))
