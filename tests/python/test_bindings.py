"""`import oobleck` against the programs it binds: the same inputs give the
same plans, reconfigurations and replays as oobleck-plan and oobleck-sim
write, and the programs' errors arrive as Python exceptions with their
messages. Run by CTest (python_bindings) with PYTHONPATH at the built module
and OOBLECK_BIN at the programs."""
import json
import os
import subprocess

import pytest

import oobleck

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = os.path.join(ROOT, "profiles", "gpt3-1.3b-a100.handwritten.json")
TRACE = os.path.join(ROOT, "traces", "1h.csv")
BIN = os.environ.get("OOBLECK_BIN", os.path.join(ROOT, "build", "bin"))


def program(name, *args):
    done = subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done


def program_json(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    program(name, *args, "--json", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def profile():
    return oobleck.load_profile(PROFILE)


def test_profile_round_trips_through_dict_json_and_file(profile, tmp_path):
    assert profile.layers == 26 and profile.gpus_per_node == 8 and profile.microbatch_size == 4
    again = oobleck.Profile.from_dict(profile.to_dict())
    assert again.fingerprint == profile.fingerprint
    assert oobleck.Profile.from_json(profile.to_json()).to_dict() == profile.to_dict()
    path = tmp_path / "saved.json"
    profile.save(path)
    assert oobleck.load_profile(path).fingerprint == profile.fingerprint
    assert profile.layer_names[0] == profile.to_dict()["layers"][0]["name"]


def test_plan_cluster_equals_oobleck_plan_instantiate(profile, tmp_path):
    ours = oobleck.plan_cluster(profile, 12, 1, 64)
    theirs = program_json(tmp_path, "oobleck-plan", "instantiate", "--profile", PROFILE, "--nodes", "12",
                          "--fault-tolerance", "1", "--global-microbatches", "64")
    assert ours.to_dict() == theirs
    assert ours.iteration_ms == pytest.approx(theirs["iteration_ms"])
    assert sum(p["microbatches"] for p in ours.pipelines) == 64
    assert len(ours.pipelines) >= 2


def test_plan_cluster_in_gradient_buckets_equals_oobleck_plan_instantiate(profile, tmp_path):
    ours = oobleck.plan_cluster(profile, 12, 1, 64, gradient_sync="buckets", gradient_bucket_mb=400)
    theirs = program_json(tmp_path, "oobleck-plan", "instantiate", "--profile", PROFILE, "--nodes", "12",
                          "--fault-tolerance", "1", "--global-microbatches", "64", "--gradient-sync", "buckets",
                          "--gradient-bucket-mb", "400")
    assert ours.to_dict() == theirs
    assert theirs["gradient_sync"] == "buckets"
    assert theirs["gradient_bucket_bytes"] == 400 * 2**20


def test_plan_cluster_with_stages_over_nodes_equals_oobleck_plan_instantiate(tmp_path):
    # Llama 3 70B's costs under a model section that names no heads, so that
    # a stage may take any degree (its own 8 key/value heads split over no
    # more than 8 GPUs): 16-GPU stages over two nodes are then faster.
    with open(os.path.join(ROOT, "profiles", "llama3-70b-h100.analytic.json")) as f:
        doc = json.load(f)
    doc["model"] = {"name": "llama3-70b"}
    path = str(tmp_path / "llama3-70b-any-degree.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    ours = oobleck.plan_cluster(oobleck.load_profile(path), 64, 1, 512, tensor_parallel_nodes=2)
    theirs = program_json(tmp_path, "oobleck-plan", "instantiate", "--profile", path, "--nodes", "64",
                          "--fault-tolerance", "1", "--global-microbatches", "512", "--tensor-parallel-nodes", "2")
    assert ours.to_dict() == theirs
    assert theirs["tensor_parallel_nodes"] == 2
    assert any(s["gpus"] == 16 for p in theirs["pipelines"] for s in p["stages"])


def test_pipelines_sharing_nodes_equal_oobleck_plan_and_reconfigure(tmp_path):
    path = os.path.join(ROOT, "profiles", "gpt3-1.3b-h100.analytic.json")
    shared_profile = oobleck.load_profile(path)
    ours = oobleck.plan_cluster(shared_profile, 8, 1, 64, pipelines_per_node=0)
    theirs = program_json(tmp_path, "oobleck-plan", "instantiate", "--profile", path, "--nodes", "8",
                          "--fault-tolerance", "1", "--global-microbatches", "64", "--pipelines-per-node", "auto")
    assert ours.to_dict() == theirs
    assert theirs["pipelines_per_node"] == 8 and len(theirs["pipelines"]) == 64
    plan_path = tmp_path / "shared.json"
    ours.save(plan_path)
    again = oobleck.reconfigure(oobleck.load_plan(plan_path, shared_profile), lost=["node0"], added=["node8"])
    theirs = program_json(tmp_path, "oobleck-plan", "reconfigure", "--profile", path, "--plan", str(plan_path),
                          "--lost", "node0", "--added", "node8")
    assert again.to_dict() == theirs
    assert {n for p in theirs["pipelines"] for n in p["nodes"]} == {f"node{i}" for i in range(1, 9)}
    assert {t["to_node"] for t in theirs["transfers"]} == {"node8"}


def test_interleaved_plans_equal_oobleck_plan_instantiate(tmp_path):
    path = os.path.join(ROOT, "profiles", "gpt3-175b-a100.analytic.json")
    ours = oobleck.plan_cluster(oobleck.load_profile(path), 64, 1, 128, interleave=4)
    theirs = program_json(tmp_path, "oobleck-plan", "instantiate", "--profile", path, "--nodes", "64",
                          "--fault-tolerance", "1", "--global-microbatches", "128", "--interleave", "4")
    assert ours.to_dict() == theirs
    assert theirs["interleave"] == 4 and any(p.get("interleave", 1) > 1 for p in theirs["pipelines"])


def test_templates_then_instantiate_uses_every_node_in_f_plus_one_pipelines(profile):
    templates = oobleck.build_templates(profile, 8)
    assert templates.node_counts == sorted(templates.node_counts) and templates.node_counts[-1] <= 8
    plan = oobleck.instantiate(templates, ["a", "b", "c", "d", "e", "f"], 2, 48)
    assert len(plan.pipelines) >= 3
    used = sorted(n for p in plan.pipelines for n in p["nodes"]) + plan.spare_nodes
    assert sorted(used) == ["a", "b", "c", "d", "e", "f"]
    assert sum(p["microbatches"] for p in plan.pipelines) == 48


def test_reconfigure_equals_oobleck_plan_reconfigure(profile, tmp_path):
    plan = oobleck.plan_cluster(profile, 8, 1, 64)
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = oobleck.load_plan(path, profile)
    assert loaded.pipelines == plan.pipelines and loaded.spare_nodes == plan.spare_nodes
    assert loaded.iteration_ms == pytest.approx(plan.iteration_ms)
    ours = oobleck.reconfigure(loaded, lost=["node0"], added=["node9"])
    theirs = program_json(tmp_path, "oobleck-plan", "reconfigure", "--profile", PROFILE, "--plan", str(path),
                          "--lost", "node0", "--added", "node9")
    assert ours.to_dict() == theirs
    nodes = {n for p in ours.plan.pipelines for n in p["nodes"]} | set(ours.plan.spare_nodes)
    assert "node0" not in nodes and "node9" in nodes
    slow = oobleck.reconfigure(loaded, lost=["node0"], node_speeds={"node3": 0.4})
    theirs = program_json(tmp_path, "oobleck-plan", "reconfigure", "--profile", PROFILE, "--plan", str(path),
                          "--lost", "node0", "--node-speed", "node3=0.4")
    assert slow.to_dict() == theirs
    with pytest.raises(ValueError, match="node9"):
        oobleck.reconfigure(loaded, lost=["node0"], node_speeds={"node9": 0.5})


def test_replay_and_sweep_equal_oobleck_sim(profile, tmp_path):
    trace = oobleck.load_trace(TRACE)
    ours = oobleck.replay(profile, trace, fault_tolerance=1, global_microbatches=64, policies="oobleck,checkpoint")
    theirs = program_json(tmp_path, "oobleck-sim", "replay", "--profile", PROFILE, "--trace", TRACE,
                          "--fault-tolerance", "1", "--global-microbatches", "64", "--policy", "oobleck,checkpoint")
    assert ours == theirs
    assert sorted(ours["policies"]) == ["checkpoint", "oobleck"]
    swept = oobleck.sweep(profile, trace, [0, 1], [None, 10], 64)
    theirs = program_json(tmp_path, "oobleck-sim", "sweep", "--profile", PROFILE, "--trace", TRACE,
                          "--fault-tolerance", "0,1", "--checkpoint-interval", "auto,10",
                          "--global-microbatches", "64")
    assert swept == theirs


@pytest.mark.parametrize("profile_name, batch, keywords, flags, bad", [
    ("gpt3-175b-a100.analytic.json", 128, {"interleave": 4}, ["--interleave", "4"], ({"interleave": 0}, "interleave")),
    ("gpt3-1.3b-h100.analytic.json", 512, {"pipelines_per_node": 0}, ["--pipelines-per-node", "auto"],
     ({"pipelines_per_node": 3}, "pipelines per node")),
])
def test_replay_of_interleaved_or_shared_node_plans_equals_oobleck_sim(tmp_path, profile_name, batch, keywords, flags,
                                                                       bad):
    path = os.path.join(ROOT, "profiles", profile_name)
    p3 = os.path.join(ROOT, "traces", "p3-trace.csv")
    loaded = oobleck.load_profile(path)
    trace = oobleck.load_trace(p3)
    ours = oobleck.replay(loaded, trace, fault_tolerance=1, global_microbatches=batch, policies="checkpoint",
                          **keywords)
    theirs = program_json(tmp_path, "oobleck-sim", "replay", "--profile", path, "--trace", p3, "--fault-tolerance",
                          "1", "--global-microbatches", str(batch), "--policy", "checkpoint", *flags)
    assert ours == theirs
    plain = oobleck.replay(loaded, trace, fault_tolerance=1, global_microbatches=batch, policies="checkpoint")
    assert ours["policies"]["checkpoint"]["samples"] > plain["policies"]["checkpoint"]["samples"]
    with pytest.raises(oobleck.InputError, match=bad[1]):
        oobleck.replay(loaded, trace, **bad[0])


def test_errors_are_the_programs_messages_as_exceptions(profile, tmp_path):
    with pytest.raises(oobleck.InputError, match=r"broken\.json: format"):
        oobleck.Profile.from_json("{}", "broken.json")
    with pytest.raises(ValueError):  # InputError is a ValueError
        oobleck.load_profile(tmp_path / "missing.json")
    with pytest.raises(oobleck.NoPlanError, match="f\\+1 = 4 pipelines"):
        oobleck.plan_cluster(profile, 1, 3, 64)
    with pytest.raises(oobleck.InputError, match="recompute"):
        oobleck.build_templates(profile, 4, recompute="sometimes")
    with pytest.raises(oobleck.InputError, match="1h-broken.csv"):
        oobleck.Trace.from_text("0,add,node1\nsoon,remove,node1\n", "1h-broken.csv")
    plan = oobleck.plan_cluster(profile, 4, 1, 16)
    with pytest.raises(oobleck.NoPlanError):
        oobleck.reconfigure(plan, lost=["node0", "node1", "node2", "node3"])


def test_replay_timeline_equals_the_programs_csv(profile, tmp_path):
    trace = oobleck.load_trace(TRACE)
    ours = oobleck.replay(profile, trace, fault_tolerance=1, global_microbatches=64, policies="oobleck",
                          timeline=True)
    csv_path = tmp_path / "timeline.csv"
    program("oobleck-sim", "replay", "--profile", PROFILE, "--trace", TRACE, "--fault-tolerance", "1",
            "--global-microbatches", "64", "--policy", "oobleck", "--timeline", str(csv_path))
    rows = [line.split(",") for line in csv_path.read_text().splitlines()[1:]]
    theirs = [(float(t), int(n), int(k), float(x)) for _, t, n, k, x in rows]
    assert len(ours["timeline"]["oobleck"]) == len(theirs) > 0
    for a, b in zip(ours["timeline"]["oobleck"], theirs):
        assert a[1:3] == b[1:3] and a[0] == pytest.approx(b[0], rel=1e-9) and a[3] == pytest.approx(b[3], rel=1e-9)


def test_analytic_profile_equals_oobleck_profile_analytic(tmp_path):
    if not os.path.exists(os.path.join(BIN, "oobleck-profile")):
        pytest.skip("oobleck-profile is not built here (no libtorch)")
    ours = oobleck.analytic_profile("gpt3-1.3b", "h100-80gb", microbatch_size=2, seq_len=2048, dtype="bf16")
    out = tmp_path / "analytic.json"
    program("oobleck-profile", "analytic", "--model", "gpt3-1.3b", "--hardware", "h100-80gb", "--microbatch-size",
            "2", "--seq-len", "2048", "--dtype", "bf16", "--out", str(out))
    assert ours.fingerprint == oobleck.load_profile(out).fingerprint
    assert ours.layers == 26 and ours.microbatch_size == 2
    # A Llama-style preset: its architecture's fields come along.
    llama = oobleck.analytic_profile("llama3-8b", "h100-80gb", microbatch_size=1, seq_len=8192)
    program("oobleck-profile", "analytic", "--model", "llama3-8b", "--hardware", "h100-80gb", "--microbatch-size",
            "1", "--seq-len", "8192", "--out", str(out))
    assert llama.fingerprint == oobleck.load_profile(out).fingerprint
    model = llama.to_dict()["model"]
    assert (model["architecture"], model["kv_heads"], model["parameters"]) == ("llama", 8, 8030261248)
    with pytest.raises(oobleck.InputError, match="gpt5"):
        oobleck.analytic_profile("gpt5", "h100-80gb", 1, 128)
    with pytest.raises(oobleck.InputError, match="hardware"):
        oobleck.analytic_profile("gpt3-1.3b", "tpu9", 1, 128)
