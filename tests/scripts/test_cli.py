"""The entry script: help for every subcommand from any folder, and the
subcommands that drive oobleck's programs, against stand-in programs."""
import json
import stat
import subprocess
import sys

import pytest
from conftest import ENTRY, assert_no_traceback, reconfiguration_line, run_tools, step_line, write_lines

from oobleck_tools.bench_recovery import has_step
from oobleck_tools.cli import SUBCOMMANDS


@pytest.mark.parametrize("subcommand", list(SUBCOMMANDS))
def test_every_subcommand_has_help(subcommand, tmp_path):
    result = run_tools(subcommand, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: oobleck-tools " + subcommand)


def test_an_unknown_subcommand_is_a_usage_error():
    result = run_tools("compare-everything")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_non_plot_subcommands_do_not_import_matplotlib(tmp_path, live_run):
    live, reference = live_run
    code = ("import sys, runpy; sys.argv = [sys.argv[1], 'compare-losses', sys.argv[2], sys.argv[3]]\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n")
    result = subprocess.run([sys.executable, "-c", code, str(ENTRY), str(live), str(reference)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def stand_in(path, body):
    """An executable Python script standing in for one of oobleck's programs."""
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


# Plans pipelines of 2 and 3 nodes below 60 % of the model's need, one
# 5-node pipeline above it, and fails below 30 %.
FAKE_PLAN = """
import json, sys
args = sys.argv[1:]
profile = json.load(open(args[args.index("--profile") + 1]))
need = sum(l["param_bytes"] + l["optimizer_bytes"] + 4 * l["activation_bytes"] for l in profile["layers"])
share = profile["hardware"]["gpu_memory_bytes"] / need
if share < 0.3:
    sys.exit("no plan")
sizes = [5] if share > 0.6 else [3, 2]
json.dump({"pipelines": [{"nodes": list(range(n))} for n in sizes]}, open(args[args.index("--json") + 1], "w"))
"""


def test_memory_budget_finds_pipelines_of_2_and_3(tmp_path):
    program = stand_in(tmp_path / "oobleck-plan", FAKE_PLAN)
    profile = tmp_path / "profile-1node.json"
    layer = {"param_bytes": 100, "optimizer_bytes": 200, "activation_bytes": 25}
    profile.write_text(json.dumps({"hardware": {"gpu_memory_bytes": 10 ** 9}, "layers": [layer] * 4}))
    out_profile, out_plan = tmp_path / "profile.json", tmp_path / "plan.json"
    result = run_tools("memory-budget", profile, out_profile, out_plan, "--oobleck-plan", program)
    assert result.returncode == 0, result.stderr
    assert "memory per node: 60% of the model's: pipelines of 2 and 3 nodes" in result.stderr
    assert json.loads(out_profile.read_text())["hardware"]["gpu_memory_bytes"] == 960
    assert sorted(len(p["nodes"]) for p in json.loads(out_plan.read_text())["pipelines"]) == [2, 3]

    result = run_tools("memory-budget", profile, out_profile, tmp_path / "none.json", "--pipelines", "4", "1",
                       "--oobleck-plan", program)
    assert result.returncode == 1
    assert "no memory budget gives pipelines of 1 and 4 nodes" in result.stderr
    assert not (tmp_path / "none.json").exists()


def test_bench_recovery_waits_for_a_step_line_not_the_header(tmp_path):
    metrics = tmp_path / "restart.jsonl"
    assert not has_step(metrics)
    metrics.write_text('{"kind": "run", "format": "oobleck.metrics.v1"}\n')
    assert not has_step(metrics)
    metrics.write_text('{"kind": "run"}\n{"kind": "step", "step": 5, "lo')  # a line still being written
    assert not has_step(metrics)
    write_lines(metrics, [{"kind": "run"}, step_line(5, 1.0)])
    assert has_step(metrics)


def test_bench_recovery_against_a_stand_in_restart(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", [step_line(0, 2.0), reconfiguration_line(2, 1, lost=["node1"]),
                                                 step_line(1, 1.9)])
    program = stand_in(tmp_path / "oobleck-run", """
import json, sys
args = sys.argv[1:]
assert args[:2] == ["--plan", "plan.json"], args
with open(args[args.index("--metrics") + 1], "w") as f:
    f.write(json.dumps({"kind": "run"}) + "\\n" + json.dumps({"kind": "step", "step": 5, "loss": 1.0}) + "\\n")
""")
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--repeats", 2,
                       "--oobleck-run", program, "--", "--plan", "plan.json")
    assert result.returncode == 0, result.stderr
    assert "live recovery after a failure (median of 1)" in result.stdout
    assert "  total                                 27.2 ms" in result.stdout
    assert "restart from a checkpoint of the last step (median of 2):" in result.stdout
    assert (tmp_path / "restart-1.jsonl").exists()


def test_bench_recovery_with_no_failure_is_bad_input(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", [step_line(0, 2.0), reconfiguration_line(2, 1, added=["node5"])])
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--", "--plan", "p")
    assert result.returncode == 2
    assert f"{live}: no reconfiguration after a failure" in result.stderr
    assert_no_traceback(result)


def test_outputs_go_through_links_and_into_pipes_without_replacing_them(tmp_path):
    import os

    from oobleck_tools.common import write_text

    real = tmp_path / "real.json"
    write_text(real, "old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    read_end = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # first, so the write cannot block
    try:
        write_text(pipe, "through the pipe")
        assert os.read(read_end, 64) == b"through the pipe"
    finally:
        os.close(read_end)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "pipe", "real.json"]
