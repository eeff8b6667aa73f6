"""A job no outsider can join: a process on another host of the cluster
floods the master's ports (the control channel and the rendezvous store's
guard) with wrong tokens, an endless line and a silent connection. Every
connection with a wrong token or an endless line is closed, none is
answered, and the job trains on to the single-process run's losses."""
import json
import sys
from pathlib import Path

import pytest
from conftest import RUN, assert_reference_losses, finish, metrics, reference_losses, wait_for_step

STEPS = 150  # the job outlives the attack (seconds) by far
BATCH = 16  # 8 microbatches of 2


def listening_ports(cluster, host, address):
    """TCP ports listening on ADDRESS (or every address) on HOST."""
    listed = cluster.run_on(host, "ss", "-Htln").stdout.split("\n")
    ports = set()
    for line in listed:
        fields = line.split()
        if len(fields) >= 4:
            where, port = fields[3].rsplit(":", 1)
            if where in (address, "0.0.0.0", "*", "[::]"):
                ports.add(int(port))
    return sorted(ports)


@pytest.mark.hosts(5)
def test_an_intruder_is_refused_everywhere_and_the_job_trains_on(cluster, tiny_job, tmp_path):
    folder, job = tiny_job  # planned on node0..node3; node4 is the intruder's host
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"node{i}\n" for i in range(4)))
    live = tmp_path / "live.jsonl"
    run = cluster.on("master", RUN, *job, "--steps", STEPS, "--hostfile", hostfile, "--metrics", live)
    wait_for_step(live, 1, run)
    master = cluster.address("master")
    ports = listening_ports(cluster, "master", master)
    assert len(ports) == 2, ports  # the control channel and the store's guard: the store itself is on loopback
    attack = cluster.run_on("node4", sys.executable, Path(__file__).parent / "intruder.py", master, 20, 300, *ports)
    assert attack.returncode == 0, attack.stderr
    assert run.poll() is None, "the job ended before the attack did: the closes prove nothing"
    for outcome in map(json.loads, attack.stdout.splitlines()):
        assert outcome["closed"] == outcome["connections"], outcome
        assert not outcome["answered"], outcome
    finish(run)
    lines = metrics(live)
    assert [line for line in lines if line["kind"] == "reconfiguration"] == []
    assert_reference_losses(lines, reference_losses(tiny_job, STEPS, folder), STEPS, BATCH)
