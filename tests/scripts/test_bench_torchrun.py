"""bench-torchrun: recoveries from made-up kills and job metrics, the table
and JSON it reports, bad input, and the kill loop against a stand-in
torchrun."""
import json
import stat
import sys

import pytest
from conftest import HEADER, assert_no_traceback, reconfiguration_line, run_tools, step_line, write_lines

from oobleck_tools.bench_torchrun import JobFollower, steady_step_ms, torchrun_recoveries
from oobleck_tools.common import InputError


def failure(generation, node, recovery_ms, detect_ms):
    line = reconfiguration_line(generation, generation + 3, lost=[node])
    line.update(recovery_ms=recovery_ms, detect_ms=detect_ms)
    return line


@pytest.fixture
def live(tmp_path):
    """A live run with three failures (200, 300 and 250 ms) and a join."""
    lines = [HEADER, step_line(0, 5.5, iteration_ms=90.0), failure(2, "node1", 200.0, 30.0),
             step_line(1, 5.1, iteration_ms=100.0), reconfiguration_line(3, 2, added=["node6"]),
             failure(4, "node3", 300.0, 40.0), step_line(2, 5.0, iteration_ms=110.0),
             failure(5, "node6", 250.0, 20.0)]
    return write_lines(tmp_path / "live.jsonl", lines)


def start(restart, launched, resume_step):
    return {"kind": "start", "restart": restart, "launched": launched, "imported": launched + 2.0,
            "ready": launched + 2.5, "resume_step": resume_step}


def step(number, time, restart):
    return {"kind": "step", "step": number, "loss": 5.0 - number / 10, "time": time, "step_ms": 80.0,
            "restart": restart}


def kill(number, time, restart, last_step):
    return {"kill": number, "time": time, "rank": 2 * number - 1, "pid": 1000 + number, "restart": restart,
            "step": last_step}


def write_job(folder, seconds_to_launch):
    """A job killed twice, each time during the step after step 2 of its
    start; its workers start SECONDS_TO_LAUNCH after each kill and redo
    the step 3 s after the kill (launch + 2.5 s of loading + the step)."""
    folder.mkdir()
    relaunch = seconds_to_launch
    lines = [start(0, 0.0, 0), step(0, 3.0, 0), step(1, 3.1, 0), step(2, 3.2, 0),
             step(3, 100.06, 0),  # rank 0 of the old start, finishing after the kill: not a recovery
             start(1, 100.0 + relaunch, 3), step(3, 100.0 + relaunch + 3.0, 1), step(4, 103.2 + relaunch, 1),
             step(5, 103.3 + relaunch, 1),
             start(2, 200.0 + relaunch, 6), step(6, 200.0 + relaunch + 3.0, 2)]
    write_lines(folder / "metrics.jsonl", lines)
    write_lines(folder / "kills.jsonl", [kill(1, 100.0, 0, 2), kill(2, 200.0, 1, 5)])


def report(tmp_path, live, *extra):
    write_job(tmp_path / "torchrun-monitor-0.1s", 0.5)
    write_job(tmp_path / "torchrun-monitor-5s", 4.5)
    return run_tools("bench-torchrun", live, "--out", tmp_path, "--report-only", "--intervals", "0.1", "5", *extra)


def test_the_report_gives_medians_ratios_and_parts(tmp_path, live):
    result = report(tmp_path, live)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "bench-torchrun.json").read_text())
    assert summary["format"] == "oobleck.bench-torchrun.v1"
    oobleck = summary["oobleck"]
    assert oobleck["recovery_ms"] == 250.0
    assert oobleck["each_ms"] == [200.0, 300.0, 250.0]  # the join is no failure
    assert oobleck["detect_ms"] == 30.0
    assert oobleck["step_ms"] == 100.0
    fast, default = summary["torchrun"]
    assert fast["monitor_interval_s"] == 0.1 and default["monitor_interval_s"] == 5.0
    assert fast["each_ms"] == pytest.approx([3500.0, 3500.0])
    assert default["recovery_ms"] == pytest.approx(7500.0)
    assert default["torchrun_ms"] == pytest.approx(4500.0)
    assert default["import_ms"] == pytest.approx(2000.0)
    assert default["load_ms"] == pytest.approx(500.0)
    assert default["redo_ms"] == pytest.approx(500.0)
    assert fast["step_ms"] == pytest.approx(100.0)
    assert [k["resumed_at_step"] for k in fast["kills"]] == [3, 6]
    assert summary["ratios"] == {"0.1": pytest.approx(14.0), "5": pytest.approx(30.0)}
    assert "oobleck, live                            250 ms" in result.stdout
    assert "torchrun, monitor 0.1 s                 3500 ms            14.0x  3500, 3500 ms" in result.stdout
    assert "torchrun, monitor 5 s (default)         7500 ms            30.0x" in result.stdout
    assert "  Python started, torch imported                2000.0 ms" in result.stdout
    # Each failure's redone step took 12 ms: no recovery here can pass 3500 / 12.
    assert summary["redone_step_ceilings"] == {"0.1": pytest.approx(3500 / 12.0), "5": pytest.approx(7500 / 12.0)}
    assert ("the ceiling, a recovery of nothing but its redone step (12 ms): 291.7x at monitor 0.1 s, "
            "625.0x at monitor 5 s") in result.stdout


def test_a_recovery_is_the_kill_to_the_first_step_of_a_later_start():
    starts = [start(0, 0.0, 0), start(1, 10.4, 3)]
    steps = [step(2, 9.0, 0), step(3, 10.1, 0), step(3, 13.4, 1)]
    (recovery,) = torchrun_recoveries([kill(1, 10.0, 0, 2)], starts, steps, "m")
    assert recovery["recovery_ms"] == pytest.approx(3400.0)
    assert recovery["torchrun_ms"] == pytest.approx(400.0)
    assert recovery["redo_ms"] == pytest.approx(500.0)
    assert recovery["killed_during_step"] == 3 and recovery["resumed_at_step"] == 3 and recovery["restarts"] == 1


def test_a_kill_that_nothing_followed_is_refused():
    with pytest.raises(InputError, match="m: kill 1 \\(workers' start 0\\): no step completed by a later start"):
        torchrun_recoveries([kill(1, 10.0, 0, 2)], [start(0, 0.0, 0)], [step(3, 10.1, 0)], "m")


def test_steady_steps_are_consecutive_steps_of_one_start():
    steps = [step(0, 1.0, 0), step(1, 1.1, 0), step(2, 1.3, 0), step(2, 9.0, 1), step(3, 9.1, 1)]
    assert steady_step_ms(steps) == pytest.approx(100.0)
    assert steady_step_ms(steps[:1]) is None


def test_the_follower_reads_only_complete_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = JobFollower(str(path))
    follower.look()  # no file yet
    text = json.dumps(start(0, 1.0, 0)) + "\n" + json.dumps(step(0, 4.0, 0))
    path.write_text(text[:-5])
    follower.look()
    assert len(follower.starts) == 1 and follower.steps == []
    path.write_text(text + "\n")
    follower.look()
    assert [s["step"] for s in follower.steps] == [0] and follower.latest_restart() == 0


@pytest.mark.parametrize("line, message", [
    ({"kind": "step", "step": 3, "loss": 4.0, "time": 1.0, "step_ms": 8.0}, 'metrics.jsonl:12: no "restart" field'),
    ({"kind": "start", "restart": 1, "launched": "soon", "imported": 1.0, "ready": 2.0, "resume_step": 0},
     'metrics.jsonl:12: "launched" is not a number'),
])
def test_a_bad_job_line_exits_2_naming_file_and_line(tmp_path, live, line, message):
    write_job(tmp_path / "torchrun-monitor-0.1s", 0.5)
    with open(tmp_path / "torchrun-monitor-0.1s" / "metrics.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    result = run_tools("bench-torchrun", live, "--out", tmp_path, "--report-only", "--intervals", "0.1")
    assert result.returncode == 2
    assert message in result.stderr
    assert_no_traceback(result)


def test_a_live_run_without_failures_exits_2(tmp_path):
    quiet = write_lines(tmp_path / "live.jsonl", [HEADER, step_line(0, 5.5), reconfiguration_line(2, 1, added=["n"])])
    result = run_tools("bench-torchrun", quiet, "--out", tmp_path, "--report-only")
    assert result.returncode == 2
    assert "live.jsonl: no reconfiguration after a failure" in result.stderr


def test_missing_kills_exit_2_naming_the_file(tmp_path, live):
    result = run_tools("bench-torchrun", live, "--out", tmp_path, "--report-only", "--intervals", "0.1")
    assert result.returncode == 2
    assert "torchrun-monitor-0.1s/metrics.jsonl: no such file" in result.stderr


def test_a_zero_interval_exits_2(tmp_path, live):
    result = run_tools("bench-torchrun", live, "--out", tmp_path, "--intervals", "0", "--", "--data", "x")
    assert result.returncode == 2
    assert "--intervals: expected monitor intervals in seconds, above 0" in result.stderr


# Stands in for torchrun and its workers: one worker process at a time
# writes every rank's pid file (its own pid), a start line and a step every
# 20 ms; when it is killed, the next start resumes from the step after the
# last one written, up to --max_restarts times.
FAKE_TORCHRUN = r"""
import json, os, subprocess, sys, time
args = sys.argv[1:]
value = lambda name: args[args.index(name) + 1]
restarts = int(next(a for a in args if a.startswith("--max_restarts=")).split("=")[1])
processes = int(next(a for a in args if a.startswith("--nproc_per_node=")).split("=")[1])
out, steps = value("--out"), int(value("--steps"))
WORKER = '''
import json, os, sys, time
out, steps, restart, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
metrics = os.path.join(out, "metrics.jsonl")
done = [json.loads(l)["step"] for l in open(metrics) if '"step"' in l] if os.path.exists(metrics) else []
first = max(done) + 1 if done else 0
os.makedirs(os.path.join(out, "pids"), exist_ok=True)
for rank in range(processes):
    json.dump({"pid": os.getpid(), "restart": restart}, open(os.path.join(out, "pids", f"rank-{rank}.json"), "w"))
now = time.time()
line = lambda d: open(metrics, "a").write(json.dumps(d) + "\\n")
line({"kind": "start", "restart": restart, "launched": now, "imported": now, "ready": now, "resume_step": first})
for step in range(first, steps):
    time.sleep(0.02)
    line({"kind": "step", "step": step, "loss": 1.0, "time": time.time(), "step_ms": 20.0, "restart": restart})
'''
for restart in range(restarts + 1):
    worker = subprocess.run([sys.executable, "-c", WORKER, out, str(steps), str(restart), str(processes)])
    if worker.returncode == 0:
        sys.exit(0)
sys.exit(1)
"""


def test_the_kill_loop_against_a_stand_in_torchrun(tmp_path, live):
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(f"#!{sys.executable}\n{FAKE_TORCHRUN}")
    torchrun.chmod(torchrun.stat().st_mode | stat.S_IEXEC)
    result = run_tools("bench-torchrun", live, "--out", tmp_path, "--repeats", 2, "--intervals", "0.05",
                       "--processes", 4, "--torchrun", torchrun, "--job", "job.py", "--", "--data", "tokens.bin")
    assert result.returncode == 0, result.stdout + result.stderr
    kills_path = tmp_path / "torchrun-monitor-0.05s" / "kills.jsonl"
    kills = [json.loads(line) for line in kills_path.read_text().splitlines()]
    assert [k["rank"] for k in kills] == [1, 3]
    assert [k["restart"] for k in kills] == [0, 1]
    summary = json.loads((tmp_path / "bench-torchrun.json").read_text())
    (fast,) = summary["torchrun"]
    assert len(fast["each_ms"]) == 2
    assert all(0 < ms < 10000 for ms in fast["each_ms"])
    assert [k["restarts"] for k in fast["kills"]] == [1, 1]


def crash(node, recovery_ms, standby):
    return {"kind": "restart", "generation": 1, "node": node, "gpu": 0, "resume_step": 3, "detect_ms": 20.0,
            "restore_ms": 60.0, "standby": standby, "process_ms": 10.0, "communicators_ms": 30.0, "read_ms": 15.0,
            "recovery_ms": recovery_ms}


def test_worker_crashes_are_put_beside_torchruns_kill_of_one_process(tmp_path):
    lines = [HEADER, step_line(0, 5.5, iteration_ms=90.0), crash("node2", 140.0, True),
             failure(2, "node1", 200.0, 30.0), crash("node0", 175.0, False), step_line(1, 5.1, iteration_ms=100.0)]
    live = write_lines(tmp_path / "live.jsonl", lines)
    result = report(tmp_path, live)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "bench-torchrun.json").read_text())
    crashes = summary["oobleck"]["crashes"]
    assert crashes["recovery_ms"] == pytest.approx(157.5)
    assert crashes["each_ms"] == [140.0, 175.0]
    assert (crashes["standby"], crashes["process_ms"], crashes["read_ms"]) == (1, 10.0, 15.0)
    assert summary["crash_ratios"] == {"0.1": pytest.approx(3500 / 157.5), "5": pytest.approx(7500 / 157.5)}
    assert summary["ratios"]["0.1"] == pytest.approx(3500 / 200.0)  # node losses alone
    assert f"  {'oobleck, restarted in place':34s} {158:9d} ms" in result.stdout
    assert "oobleck's restart in place (forked from the zygote in 1 of 2):" in result.stdout


def test_a_restart_line_without_its_parts_is_bad_input(tmp_path):
    line = crash("node2", 140.0, True)
    del line["read_ms"]
    live = write_lines(tmp_path / "live.jsonl", [HEADER, failure(2, "node1", 200.0, 30.0), line])
    result = report(tmp_path, live)
    assert result.returncode == 2
    assert 'live.jsonl:3: no "read_ms" field' in result.stderr
    assert_no_traceback(result)
