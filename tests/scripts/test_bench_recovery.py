"""bench-recovery's reading of recoveries by cause (within f, crashes
restarted in place, rollbacks past f) from small made-up metrics, and its
table and result.json against a stand-in restart."""
import json

import pytest
from conftest import assert_no_traceback, reconfiguration_line, run_tools, write_lines
from test_cli import stand_in

from oobleck_tools.bench_recovery import read_recoveries, summarize
from oobleck_tools.common import InputError

HEADER = {"kind": "run", "format": "oobleck.metrics.v1", "nodes": 6}


def step(number, elapsed_ms, generation=1):
    return {"kind": "step", "step": number, "loss": 4.0 - 0.1 * number, "samples": 24 * (number + 1),
            "step_samples": 24, "iteration_ms": 50.0, "elapsed_ms": elapsed_ms, "generation": generation}


def timed(line, **times):
    """A reconfiguration line with other times."""
    return {**line, **times}


def restart(generation, resume_step, detect_ms, restore_ms, recovery_ms, node="node2"):
    """A restart line as written before the restore was split."""
    return {"kind": "restart", "generation": generation, "node": node, "gpu": 0, "resume_step": resume_step,
            "detect_ms": detect_ms, "restore_ms": restore_ms, "recovery_ms": recovery_ms}


def split_restart(generation, resume_step, detect_ms, restore_ms, recovery_ms, process_ms, communicators_ms, read_ms,
                  standby):
    return {**restart(generation, resume_step, detect_ms, restore_ms, recovery_ms), "standby": standby,
            "process_ms": process_ms, "communicators_ms": communicators_ms, "read_ms": read_ms}


def rollback(generation, from_step, to_step, source):
    return {"kind": "rollback", "at_ms": 0.0, "generation": generation, "from_step": from_step, "to_step": to_step,
            "source": source}


# Steps 0-2; node2's worker crashes in step 3; node1 lost in step 4 (within
# f, generation 2); node6 joins (generation 3); then three nodes lost in step
# 7: generation 4 (replicas) is replaced by generation 5, which rolls back
# from step 6 to the snapshot of step 5 in the mirrors, trains step 6 again
# and then step 7, the interrupted one.
LIVE = [
    HEADER, step(0, 100), step(1, 200), step(2, 300),
    split_restart(1, 3, 20.0, 700.0, 800.0, 600.0, 70.0, 15.0, False), step(3, 1100),
    timed(reconfiguration_line(2, 4, lost=["node1"]), detect_ms=30.0, plan_ms=0.5, communicators_ms=90.0,
          copy_ms=25.0, resume_ms=80.0, recovery_ms=225.5), step(4, 1400, generation=2),
    timed(reconfiguration_line(3, 5, added=["node6"]), recovery_ms=400.0), step(5, 1900, generation=3),
    step(6, 2000, generation=3),
    timed(reconfiguration_line(4, 7, lost=["node0"], superseded=True), recovery_ms=50.0),
    rollback(5, 6, 5, "mirror"),
    timed(reconfiguration_line(5, 6, lost=["node0", "node2", "node4"]), detect_ms=60.0, plan_ms=0.3,
          communicators_ms=25.0, copy_ms=12.5, resume_ms=75.0, recovery_ms=300.0),
    step(6, 2600, generation=5), step(7, 2700, generation=5),
]


def test_each_cause_is_read_with_its_parts(tmp_path):
    found = read_recoveries(write_lines(tmp_path / "live.jsonl", LIVE))
    # The join and the generation replaced before it trained are no losses;
    # the rollback's generation is read as a rollback only.
    assert found.losses == [{"source": "replicas", "detect_ms": 30.0, "plan_ms": 0.5, "communicators_ms": 90.0,
                             "restore_ms": 25.0, "step_ms": 80.0, "recovery_ms": 225.5, "steps_lost": 0,
                             "back_ms": 225.5}]
    # The step after the restore: recovery less detection and restore. Its
    # restore: the new worker's own read, its process and its communicators
    # beside it.
    assert found.crashes == [{"source": "own memory", "detect_ms": 20.0, "plan_ms": None, "communicators_ms": 70.0,
                              "restore_ms": 15.0, "process_ms": 600.0, "standby": False, "step_ms": 80.0,
                              "recovery_ms": 800.0, "steps_lost": 0, "back_ms": 800.0}]
    # The failure came at 2600 - 300 = 2300 ms; step 7 was done again at 2700.
    assert found.rollbacks == [{"source": "mirror", "detect_ms": 60.0, "plan_ms": 0.3, "communicators_ms": 25.0,
                                "restore_ms": 12.5, "step_ms": 75.0, "recovery_ms": 300.0, "steps_lost": 1,
                                "back_ms": 400.0}]


def test_a_restart_line_written_before_the_split_counts_its_restore_whole(tmp_path):
    found = read_recoveries(write_lines(tmp_path / "live.jsonl", [HEADER, restart(1, 3, 20.0, 700.0, 800.0)]))
    assert found.crashes == [{"source": "own memory, whole", "detect_ms": 20.0, "plan_ms": None,
                              "communicators_ms": None, "restore_ms": 700.0, "process_ms": None, "standby": False,
                              "step_ms": 80.0, "recovery_ms": 800.0, "steps_lost": 0, "back_ms": 800.0}]


def test_a_rollback_replaced_before_it_trained_is_left_out(tmp_path):
    # Generation 2 rolls back to memory and is replaced (a loss during the
    # rollback); generation 3 rolls back to the checkpoint of step 2, from
    # step 4, and trains steps 3 and 4 again, then 5.
    lines = [HEADER, step(0, 100), step(1, 200), step(2, 300), step(3, 400), step(4, 500),
             rollback(2, 4, 3, "memory"), timed(reconfiguration_line(2, 4, lost=["node0"], superseded=True)),
             rollback(3, 4, 2, "checkpoint"),
             timed(reconfiguration_line(3, 3, lost=["node0", "node1"]), copy_ms=40.0, recovery_ms=1000.0),
             step(3, 1600, generation=3), step(4, 1700, generation=3), step(5, 1800, generation=3)]
    found = read_recoveries(write_lines(tmp_path / "past-f.jsonl", lines))
    assert not found.losses
    [only] = found.rollbacks
    assert only["source"] == "checkpoint"
    assert only["restore_ms"] == 40.0
    assert only["steps_lost"] == 2
    assert only["back_ms"] == pytest.approx(1800 - (1600 - 1000))


def test_a_rollback_whose_interrupted_step_never_comes_again_is_bad_input(tmp_path):
    lines = [HEADER, step(0, 100), step(1, 200), rollback(2, 1, 0, "mirror"),
             timed(reconfiguration_line(2, 1, lost=["node0"]), recovery_ms=100.0), step(1, 500, generation=2)]
    path = write_lines(tmp_path / "short.jsonl", lines)
    with pytest.raises(InputError, match=rf"{path}:4: the run ended before step 2, the one the failure interrupted"):
        read_recoveries(path)


@pytest.mark.parametrize("line, message", [
    (rollback(2, 1, 0, "tape"), r":2: \"source\" is not one of memory, mirror, checkpoint"),
    ({**restart(1, 3, 1.0, 2.0, 3.0), "restore_ms": "slow"}, r":2: \"restore_ms\" is not a number"),
    ({"kind": "rollback", "generation": 2, "to_step": 0, "source": "memory"}, r":2: no \"from_step\" field"),
])
def test_malformed_lines_name_the_file_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "bad.jsonl", [HEADER, line])
    with pytest.raises(InputError, match=message):
        read_recoveries(path)


def test_a_row_is_the_median_of_each_part():
    events = [{"source": "own memory", "detect_ms": d, "plan_ms": None, "communicators_ms": None, "restore_ms": r,
               "step_ms": 10.0, "recovery_ms": d + r + 10, "steps_lost": 0, "back_ms": d + r + 10}
              for d, r in [(20.0, 700.0), (40.0, 900.0), (30.0, 800.0)]]
    row = summarize("worker crash", events)
    assert row["count"] == 3
    assert (row["detect_ms"], row["restore_ms"], row["recovery_ms"]) == (30.0, 800.0, 840.0)
    assert row["plan_ms"] is None
    assert row["each_recovery_ms"] == [730.0, 950.0, 840.0]


# A restarted job that completes a step at once.
QUICK_RESTART = """
import json, sys
args = sys.argv[1:]
with open(args[args.index("--metrics") + 1], "w") as f:
    f.write(json.dumps({"kind": "run"}) + "\\n" + json.dumps({"kind": "step", "step": 5, "loss": 1.0}) + "\\n")
"""


def test_the_table_and_result_json_put_every_cause_beside_the_restart(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", LIVE)
    program = stand_in(tmp_path / "oobleck-run", QUICK_RESTART)
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--repeats", 1,
                       "--past-f", "mirror", live, "past f, from mirrors", "--oobleck-run", program,
                       "--", "--plan", "plan.json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[:6] == ["node", "loss", "within", "f", "replicas", "1"] and line.split()[6:11] ==
               ["30.0", "25.0", "225.5", "0", "225.5"] for line in lines), result.stdout
    assert any(line.split()[:8] == ["past", "f,", "from", "mirrors", "mirror", "1", "60.0", "12.5"] and
               line.split()[8:11] == ["300.0", "1", "400.0"] for line in lines), result.stdout
    assert "worker crash / node loss, to the next completed step: 3.5x (800 against 226 ms)" in result.stdout
    assert ("worker crash, restarted in place, after detection: the new worker up in 600.0 ms (forked from the zygote "
            "in 0 of 1), its communicators 70.0 ms, its state read in 15.0 ms") in result.stdout

    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["format"] == "oobleck.bench-recovery.v2"
    assert [r["name"] for r in saved["rows"]] == ["node loss within f", "worker crash, restarted in place",
                                                  "past f, from mirrors"]
    crash = saved["rows"][1]
    assert (crash["source"], crash["restore_ms"], crash["step_ms"]) == ("own memory", 15.0, 80.0)
    assert (crash["process_ms"], crash["communicators_ms"], crash["standby"]) == (600.0, 70.0, 0)
    restart_ms = saved["restart"]["back_ms"]
    assert saved["restart"]["detect_ms"] == 30.0  # the median detection within f
    assert restart_ms == pytest.approx(30.0 + saved["restart"]["launch_ms"])
    assert saved["rows"][2]["restart_over_back"] == pytest.approx(restart_ms / 400.0)


def test_a_rollback_to_another_source_than_scripted_fails_the_check(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", LIVE)
    program = stand_in(tmp_path / "oobleck-run", QUICK_RESTART)
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--repeats", 1,
                       "--past-f", "memory", live, "past f, from memory", "--oobleck-run", program,
                       "--", "--plan", "plan.json")
    assert result.returncode == 1
    assert 'check failed: "past f, from memory" rolled back to mirror, not memory' in result.stderr


@pytest.mark.parametrize("past_f, message", [
    (["tape", "LIVE", "x"], "--past-f tape: the source is one of memory, mirror, checkpoint"),
    (["mirror", "NONE", "x"], "none.jsonl: no rollback past f that trained"),
])
def test_bad_past_f_runs_are_bad_input(tmp_path, past_f, message):
    live = write_lines(tmp_path / "live.jsonl", LIVE)
    none = write_lines(tmp_path / "none.jsonl", [HEADER, step(0, 100)])
    past_f = [str(live) if a == "LIVE" else str(none) if a == "NONE" else a for a in past_f]
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--past-f", *past_f,
                       "--", "--plan", "p")
    assert result.returncode == 2
    assert message in result.stderr
    assert_no_traceback(result)


def test_a_master_restart_is_timed_from_the_kill_to_the_restarted_master_and_the_next_step(tmp_path):
    from oobleck_tools.bench_recovery import read_master_restart
    metrics = tmp_path / "master.jsonl"
    write_lines(metrics, [HEADER, step(0, 100.0), step(1, 200.0),
                          {"kind": "master_restart", "at_ms": 1300.0, "resumed_after_step": 1, "state_dir": "s",
                           "unix_ms": 10_000_800.0},
                          step(2, 1500.0, generation=2), step(3, 1600.0, generation=2)])
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({"training_start_unix_ms": 9_999_500.0}))
    err = tmp_path / "master.err"
    err.write_text("oobleck-run: --inject line 1: killing the master (SIGKILL) at unix ms 10000000\n")
    event = read_master_restart(metrics, state, err)
    # Killed at 10,000,000; back at 10,000,800; step 2 done at 9,999,500 + 1,500.
    assert event["restore_ms"] == 800.0
    assert event["recovery_ms"] == event["back_ms"] == 1000.0
    assert event["step_ms"] == 200.0
    err.write_text("nothing of a kill\n")
    with pytest.raises(InputError, match="killing the master"):
        read_master_restart(metrics, state, err)


def test_crashes_without_a_standby_get_a_row_of_their_own_and_a_ratio(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", LIVE)
    cold = write_lines(tmp_path / "cold.jsonl", [HEADER, split_restart(1, 3, 20.0, 400.0, 480.0, 330.0, 40.0, 15.0,
                                                                        False), step(3, 600)])
    program = stand_in(tmp_path / "oobleck-run", QUICK_RESTART)
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path, "--repeats", 1,
                       "--crashes-without-standby", cold, "--oobleck-run", program, "--", "--plan", "plan.json")
    assert result.returncode == 0, result.stderr
    saved = json.loads((tmp_path / "result.json").read_text())
    assert [r["name"] for r in saved["rows"]] == ["node loss within f", "worker crash, restarted in place",
                                                  "worker crash, a new process (no standby)"]
    assert (saved["rows"][2]["process_ms"], saved["rows"][2]["recovery_ms"]) == (330.0, 480.0)
    assert ("worker crash without the zygote / with it, to the next completed step: 0.6x (480 against 800 ms)"
            in result.stdout)


def test_crashes_without_a_standby_need_crashes_on_both_sides(tmp_path):
    live = write_lines(tmp_path / "live.jsonl", LIVE)
    none = write_lines(tmp_path / "none.jsonl", [HEADER, step(0, 100)])
    result = run_tools("bench-recovery", live, tmp_path / "checkpoint", "--out", tmp_path,
                       "--crashes-without-standby", none, "--", "--plan", "p")
    assert result.returncode == 2
    assert "none.jsonl: no worker restarted in place" in result.stderr
    assert_no_traceback(result)
