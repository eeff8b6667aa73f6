"""Hosts made of network namespaces (tools/netns-cluster.sh) for live runs
across hosts, and what the tests of such runs share: a small job set up by
tools/cluster-setup.sh, its single-process reference, and the checks that a
live run's committed steps are the reference's, bit for bit."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
NETNS = REPOSITORY / "tools" / "netns-cluster.sh"
BIN = Path(os.environ.get("OOBLECK_BIN", REPOSITORY / "build" / "bin"))
RUN = BIN / "oobleck-run"
# Every command a test starts ends within this (a hang fails the test).
COMMAND_TIMEOUT_S = 300


def namespaces_unavailable():
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    if not Path("/usr/sbin/sshd").exists():
        return "no sshd (apt-get install openssh-server)"
    probe = f"oobleck-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return made.stderr.strip() or "ip netns add failed"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Cluster:
    """N namespace hosts node0..node{N-1} and master, under a prefix of
    this test process's own (clusters of tests running side by side do not
    meet)."""

    def __init__(self, hosts, slurm=False):
        self.hosts = hosts
        self.slurm = slurm
        self.env = {**os.environ, "NETNS_PREFIX": f"obt{os.getpid()}"}
        self.prefix = self.env["NETNS_PREFIX"]

    def script(self, *args, **kwargs):
        return subprocess.run([str(NETNS), *map(str, args)], env=self.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, **kwargs)

    def up(self):
        made = self.script("up", self.hosts, *(["--slurm"] if self.slurm else []))
        assert made.returncode == 0, made.stderr

    def down(self):
        self.script("down")

    def on(self, host, *command, stdout=subprocess.DEVNULL):
        """COMMAND started on HOST; the Popen (its standard error a pipe: a
        few lines, read at the end)."""
        return subprocess.Popen([str(NETNS), "exec", host, *map(str, command)], env=self.env,
                                stdout=stdout, stderr=subprocess.PIPE, text=True)

    def run_on(self, host, *command, stdin=None):
        """COMMAND run to its end on HOST; the finished process."""
        return subprocess.run([str(NETNS), "exec", host, *map(str, command)], env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)

    def address(self, host):
        return self.script("address", host).stdout.strip()

    def pids(self, host):
        listed = subprocess.run(["ip", "netns", "pids", f"{self.prefix}-{host}"], capture_output=True, text=True)
        return [int(p) for p in listed.stdout.split()]

    def commands(self, host):
        """The command lines running on HOST."""
        lines = []
        for pid in self.pids(host):
            try:
                lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
            except OSError:
                pass
        return lines

    def job_processes(self, host):
        """HOST's command lines but its daemons' (sshd, slurmd)."""
        return [c for c in self.commands(host) if not c.startswith(("sshd", "/usr/sbin/sshd", "/usr/sbin/slurmd",
                                                                     "slurmd"))]

    def wait_for_no_job_processes(self, host, timeout_s=60):
        """Until nothing of the job runs on HOST (processes of a job that
        ended take a moment to go); what is left after TIMEOUT_S."""
        deadline = time.monotonic() + timeout_s
        while self.job_processes(host) and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.job_processes(host)

    def kill_host(self, host):
        """Every process of HOST, sshd included, SIGKILLed: the host is gone."""
        pids = self.pids(host)
        if pids:
            subprocess.run(["kill", "-9", *map(str, pids)], capture_output=True)


@pytest.fixture
def cluster(request):
    """Up with the hosts the test's `hosts` mark asks for (default 5), and
    a Slurm cluster of them with the `slurm` mark; down afterwards, whatever
    happened."""
    why = namespaces_unavailable()
    if why:
        pytest.skip(f"network namespaces cannot be made here: {why}")
    mark = request.node.get_closest_marker("hosts")
    slurm = request.node.get_closest_marker("slurm") is not None
    if slurm and not all(Path(f"/usr/sbin/{d}").exists() for d in ("munged", "slurmctld", "slurmd")):
        pytest.skip("no Slurm here: apt-get install slurm-wlm munge")
    made = Cluster(mark.args[0] if mark else 5, slurm)
    made.down()
    try:
        made.up()
    except BaseException as failed:
        made.down()
        # slurmd needs a cgroup hierarchy it can use; some containers have none.
        if slurm and "cgroup" in str(failed):
            pytest.skip(f"Slurm cannot run here: {str(failed).splitlines()[0]}")
        raise
    try:
        yield made
    finally:
        made.down()


@pytest.fixture(scope="session")
def tiny_job(tmp_path_factory):
    """GPT-tiny planned for 4 nodes with f = 1 (two 2-node pipelines), 8
    microbatches: (folder, its --plan/--profile/--data/--seed flags)."""
    folder = tmp_path_factory.mktemp("tiny")
    made = subprocess.run([str(REPOSITORY / "tools" / "cluster-setup.sh"), "tiny", str(folder), "--nodes", "4",
                           "--fault-tolerance", "1", "--global-microbatches", "8"],
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                          env={**os.environ, "OOBLECK_BIN": str(BIN)})
    assert made.returncode == 0, made.stderr
    flags = ["--plan", folder / "plan.json", "--profile", folder / "profile.json", "--data", folder / "tokens.bin",
             "--seed", "1"]
    return folder, [str(f) for f in flags]


def metrics(path, partial_ok=False):
    """The JSON lines of PATH; with PARTIAL_OK, a last line still being
    written is left out."""
    lines = []
    for text in Path(path).read_text().splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            if not partial_ok:
                raise
    return lines


def reference_losses(job, steps, folder):
    """Step -> loss of the single-process run of the same job."""
    out = folder / f"reference-{steps}.jsonl"
    if not out.exists():
        made = subprocess.run([str(RUN), *job[1], "--steps", str(steps), "--single-process", "--metrics", str(out)],
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        assert made.returncode == 0, made.stderr
    return {line["step"]: line["loss"] for line in metrics(out) if line["kind"] == "step"}


def assert_reference_losses(lines, reference, steps, batch):
    """Every step 0..steps-1 committed once, in order, with the whole batch
    and the reference's loss to the bit."""
    committed = [line for line in lines if line["kind"] == "step"]
    assert [line["step"] for line in committed] == list(range(steps))
    for line in committed:
        assert line["loss"] == reference[line["step"]], f"step {line['step']}"
        assert line["samples"] == (line["step"] + 1) * batch


def finish(run):
    """The run's standard error once it has ended by itself, successfully
    (killed if it has not within the bound)."""
    try:
        _, err = run.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    return err


def wait_for_line(path, wanted, process, timeout_s=COMMAND_TIMEOUT_S):
    """The first line of the metrics at PATH that WANTED accepts, polling
    until it is written; the run must still be going until then, else the
    test's premise is gone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if Path(path).exists():
            for line in metrics(path, partial_ok=True):
                if wanted(line):
                    return line
        assert process.poll() is None, f"the run ended first: {process.stderr.read()}"
        time.sleep(0.01)
    raise AssertionError(f"no such line within {timeout_s} s")


def wait_for_step(path, step, process, timeout_s=COMMAND_TIMEOUT_S):
    """Until the metrics at PATH commit STEP."""
    wait_for_line(path, lambda line: line.get("kind") == "step" and line["step"] >= step, process, timeout_s)
