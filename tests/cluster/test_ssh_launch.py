"""Agents placed on other hosts over SSH (--hostfile): a job across namespace
hosts trains the single-process run's losses, bit for bit, through a node
killed by the job, a host that dies whole (its sshd too), and two joins."""
import pytest
from conftest import RUN, finish, assert_reference_losses, metrics, reference_losses, wait_for_step

STEPS = 16
BATCH = 16  # 8 microbatches of 2


@pytest.mark.hosts(6)
def test_ssh_agents_train_the_reference_through_kills_and_joins(cluster, tiny_job, tmp_path):
    folder, job = tiny_job
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"node{i}\n" for i in range(6)))
    inject = tmp_path / "inject.csv"
    inject.write_text("step:2,remove,node1\nstep:4,add,node4\nstep:12,add,node5\n")
    live = tmp_path / "live.jsonl"
    run = cluster.on("master", RUN, *job, "--steps", STEPS, "--hostfile", hostfile,
                     "--master-addr", cluster.address("master"), "--inject", inject, "--metrics", live,
                     "--heartbeat-timeout-ms", 5000)
    # (The cluster's teardown ends the run if a check below fails first.)
    wait_for_step(live, 0, run)
    for node in ("node0", "node2", "node3"):
        here = cluster.commands(node)
        assert any("oobleck-agent " in c and f"--node {node} " in c for c in here), here
        assert any(f"worker --node {node} " in c for c in here), here
        assert not any("token" in c for c in here), here  # it came on standard input
    # node2's host dies whole once the job has healed from node1's loss
    # and taken node4 in.
    wait_for_step(live, 7, run)
    cluster.kill_host("node2")
    finish(run)
    lines = metrics(live)
    assert_reference_losses(lines, reference_losses(tiny_job, STEPS, folder), STEPS, BATCH)
    changes = [line for line in lines if line["kind"] == "reconfiguration" and not line["superseded"]]
    assert [c["lost"] for c in changes if c["lost"]] == [["node1"], ["node2"]]
    assert sorted(n for c in changes for n in c["added"]) == ["node4", "node5"]
    # Seen by whichever closes first: the agent's connection, or the ssh
    # that started it.
    reason = changes[[c["lost"] for c in changes].index(["node2"])]["reasons"]["node2"]
    assert "connection closed" in reason or "ssh" in reason, reason
    # Nothing of the job is left on any host: only the sshds.
    for node in ("node0", "node1", "node3", "node4", "node5"):
        assert cluster.wait_for_no_job_processes(node) == []
    assert cluster.commands("node2") == []
