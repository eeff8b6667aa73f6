"""oobleck-run inside a Slurm allocation (a real slurmctld and a slurmd per
namespace host): agents start as job steps with srun on the allocation's
nodes, the nodes the plan leaves out are spares that join as nodes are lost,
and a failed node is left out of later steps. The losses are the
single-process run's, bit for bit."""
import pytest
from conftest import RUN, finish, assert_reference_losses, metrics, reference_losses, wait_for_line, wait_for_step

STEPS = 200  # room for two spares to start (a few seconds each) while training goes on
BATCH = 16  # 8 microbatches of 2


@pytest.mark.slurm
@pytest.mark.hosts(6)
def test_agents_are_job_steps_and_spares_replace_lost_nodes(cluster, tiny_job, tmp_path):
    folder, job = tiny_job  # planned on node0..node3; node4 and node5 are spares
    inject = tmp_path / "inject.csv"
    inject.write_text("step:2,remove,node1\nstep:190,add,node1\n")
    live = tmp_path / "live.jsonl"
    run = cluster.on("master", "salloc", "--nodes", 6, "--quiet", RUN, *job, "--steps", STEPS, "--join-spares",
                     "--inject", inject, "--metrics", live, "--heartbeat-timeout-ms", 5000)
    # (The cluster's teardown ends the run if a check below fails first.)
    wait_for_step(live, 0, run)
    steps_on_node0 = cluster.commands("node0")
    assert any("slurmstepd" in c for c in steps_on_node0), steps_on_node0
    assert any("oobleck-agent " in c and "--node node0 " in c for c in steps_on_node0), steps_on_node0
    # Once the spare has taken node1's place: node2's host dies whole.
    wait_for_line(live, lambda line: line.get("kind") == "reconfiguration" and line["added"] == ["node4"], run)
    cluster.kill_host("node2")  # slurmd, job steps and all
    err = finish(run)
    lines = metrics(live)
    assert_reference_losses(lines, reference_losses(tiny_job, STEPS, folder), STEPS, BATCH)
    changes = [line for line in lines if line["kind"] == "reconfiguration" and not line["superseded"]]
    lost = [n for c in changes for n in c["lost"]]
    added = [n for c in changes for n in c["added"]]
    assert lost == ["node1", "node2"]
    assert added == ["node4", "node5"]  # the spares, in order, one per loss
    assert "node node1 failed earlier; later job steps leave it out" in err
    for node in ("node0", "node1", "node3", "node4", "node5"):
        assert cluster.wait_for_no_job_processes(node) == []


@pytest.mark.slurm
@pytest.mark.hosts(5)
def test_a_batch_job_runs_the_master_on_its_first_node(cluster, tiny_job, tmp_path):
    folder, job = tiny_job
    steps = 20
    live, out = tmp_path / "live.jsonl", tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -euo pipefail\necho \"batch on $(hostname)\"\n" +
                      " ".join([str(RUN), *job, "--steps", str(steps), "--inject", str(tmp_path / "inject.csv"),
                                "--metrics", str(live)]) + "\n")
    script.chmod(0o755)
    (tmp_path / "inject.csv").write_text("step:3,remove,node2\n")
    # sbatch --wait ends with the job, with its exit status.
    submitted = cluster.run_on("master", "sbatch", "--wait", "--nodes", 5, "--output", out, script)
    assert submitted.returncode == 0, out.read_text() if out.exists() else submitted.stderr
    text = out.read_text()
    assert "batch on node0" in text  # the allocation's first node: its agent is local there, the others' srun steps
    assert "node node2 lost" in text
    assert_reference_losses(metrics(live), reference_losses(tiny_job, steps, folder), steps, BATCH)
