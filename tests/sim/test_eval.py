"""The evaluation suite: reproducible whatever the workers or engine, crash-tolerant, honest reports."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from omni_vla.core.settings import LoopSettings, VlaNodeConfig, load_node_yaml
from omni_vla_sim.eval import EvalSettings, evaluate, main
from omni_vla_sim.report import comparable, wilson

EXPERT = EvalSettings(backend="expert", tasks=("touch_yellow", "pick_red"), episodes=3, image_size=64)


def test_eval_defaults_are_what_vla_node_runs_with_its_parameter_file() -> None:
    """A default evaluation measures the robot's configuration, so its figures are the robot's."""
    node = VlaNodeConfig.from_ros_parameters(load_node_yaml(Path(__file__).parents[2] / "config" / "vla_node.yaml"))
    ev = EvalSettings(bundle_dir=node.bundle_dir)
    assert (ev.strategy, ev.execution_horizon, ev.noise_scale, ev.backend) == (
        node.strategy, node.execution_horizon, node.noise_scale, node.backend)
    # The node's delay is the p95 latency rounded up to ticks: any real inference is at least one tick.
    assert ev.delay_ticks == 1


def test_wilson_interval_matches_reference_values() -> None:
    lo, hi = wilson(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    assert wilson(0, 20)[0] == 0.0 and wilson(20, 20)[1] == 1.0
    assert wilson(20, 20)[0] < 1.0, "a perfect score still has uncertainty"


@pytest.fixture(scope="module")
def serial_report() -> dict:
    return evaluate(EXPERT, workers=1, progress=False)


def test_report_has_the_interface_keys_and_counts(serial_report: dict, tmp_path: Path) -> None:
    r = serial_report
    assert set(r["tasks"]) == {"touch_yellow", "pick_red"}
    for g in [*r["tasks"].values(), r["overall"]]:
        assert {"successes", "episodes", "rate", "ci95"} <= set(g)
        assert g["ci95"][0] <= g["rate"] <= g["ci95"][1]
    assert r["overall"]["episodes"] == 6
    assert r["tasks"]["pick_red"]["seeds"] == [1_000_000, 1_000_001, 1_000_002]
    assert {"mujoco", "MUJOCO_GL", "omni_vla"} <= set(r["versions"])
    assert r["overall"]["successes"] >= 5, "the scripted expert through the supervisor should succeed"


def test_report_names_the_weights_it_measured() -> None:
    import hashlib

    from omni_vla_sim.eval import REPO, versions

    bundle = REPO / "bundles" / "reference"
    v = versions(EvalSettings(backend="mnn", bundle_dir=bundle, episodes=1))
    assert v["bundle_manifest_sha256"] == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert v["bundle_checkpoint_sha256"] == hashlib.sha256((bundle / "policy.pt").read_bytes()).hexdigest()


def test_results_are_identical_with_one_or_two_workers(serial_report: dict) -> None:
    parallel = evaluate(EXPERT, workers=2, progress=False)
    assert comparable(parallel) == comparable(serial_report)


@pytest.mark.slow
def test_crashed_worker_is_reported_and_its_episodes_rerun(serial_report: dict) -> None:
    box: dict = {}

    def run() -> None:
        box["report"] = evaluate(EXPERT, workers=2, progress=False)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 60
    killed = False
    while not killed and time.monotonic() < deadline:
        time.sleep(0.05)
        kids = mp.active_children()
        if len(kids) >= 2:  # both workers spawned, episodes not yet done (workers import for ~1 s)
            os.kill(kids[0].pid, signal.SIGKILL)
            killed = True
    t.join(timeout=240)
    assert killed and "report" in box
    report = box["report"]
    assert report["settings"]["worker_crashes"], "the crash must be reported"
    assert comparable(report) == comparable(serial_report), "no episode may be lost or changed"


@pytest.mark.slow
def test_ray_cluster_on_loopback_gives_the_same_report(serial_report: dict) -> None:
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # AF_UNIX paths must stay short
    ray_bin = Path(sys.executable).parent / "ray"
    port = 20000 + os.getpid() % 20000
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": str(tmp_path)}
    start = subprocess.run(
        [str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp_path / 'ray'}"],
        env=env, capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    try:
        report = evaluate(EXPERT, ray_address=f"127.0.0.1:{port}", progress=False)
        assert report["settings"]["ray"] is True
        assert comparable(report) == comparable(serial_report)
    finally:
        import ray

        ray.shutdown()
        subprocess.run([str(ray_bin), "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_unknown_task_is_refused_before_any_episode(capsys) -> None:
    assert main(["--backend", "expert", "--tasks", "juggle", "--episodes", "1"]) == 2
    assert "unknown task 'juggle'" in capsys.readouterr().err


def test_bundle_failing_its_manifest_is_refused_before_any_episode(tmp_path: Path, capsys) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"format": "something else"}))
    assert main(["--backend", "mnn", "--bundle", str(bundle), "--episodes", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "manifest" in err.lower() and not (tmp_path / "r").exists()


def test_report_files_and_recorded_episodes_are_written(tmp_path: Path) -> None:
    from omni_vla_sim.dataset import iter_episodes

    s = EvalSettings(backend="expert", tasks=("touch_yellow",), episodes=1, image_size=64)
    evaluate(s, workers=1, out=tmp_path, videos=1, progress=False, record_dir=tmp_path / "rec")
    (ep,) = list(iter_episodes(tmp_path / "rec"))
    assert ep.success and ep.seed == 1_000_000 and len(ep) == len(ep.actions) > 5
    for name in ("report.json", "report.md", "success.png", "episodes.json", "touch_yellow_1000000.mp4"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "touch_yellow" in (tmp_path / "report.md").read_text()


def test_cloud_policy_over_the_openpi_protocol_runs_in_simulated_time() -> None:
    from omni_vla_sim.oracle import ExpertOraclePolicy
    from omni_vla_sim.openpi_server import PolicyServer

    with PolicyServer(ExpertOraclePolicy(horizon=16)).thread() as st:
        s = EvalSettings(backend="openpi", openpi_url=st.uri, tasks=("touch_yellow",), episodes=2, image_size=64)
        report = evaluate(s, workers=1, progress=False)
    assert report["tasks"]["touch_yellow"]["successes"] == 2


def test_unreachable_openpi_server_is_refused_before_any_episode(capsys) -> None:
    assert main(["--backend", "openpi", "--openpi-url", "ws://127.0.0.1:9", "--episodes", "1"]) == 2
    assert "unreachable" in capsys.readouterr().err


def test_backend_comparison_runs_each_runtime_on_the_same_seeds(tmp_path: Path, capfd) -> None:
    import numpy as np

    argv = ["--compare", "backends", "--tasks", "touch_yellow", "--episodes", "2", "--workers", "1",
            "--videos", "0", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    result = json.loads(capfd.readouterr().out)
    assert set(result["variants"]) == {"torch", "executorch", "mnn"}
    assert all(v["episodes"] == 2 for v in result["variants"].values())
    eps = {b: json.loads((tmp_path / b / "episodes.json").read_text()) for b in result["variants"]}
    assert [e["seed"] for e in eps["torch"]] == [e["seed"] for e in eps["mnn"]] == [1_000_000, 1_000_001]
    for backend in ("executorch", "mnn"):  # the same policy: the first executed commands match eager PyTorch
        for ours, ref in zip(eps[backend], eps["torch"]):
            assert np.abs(np.array(ours["actions"][:10]) - np.array(ref["actions"][:10])).max() < 1e-3
    assert "agree within 95% intervals" in (tmp_path / "comparison.md").read_text()
    # The CLI's defaults are the node's: eval measures what ships.
    assert result["settings"]["execution_horizon"] == LoopSettings().execution_horizon == 12
    assert result["settings"]["noise_scale"] == 0.0


def test_chunking_comparison_varies_only_strategy_and_delay() -> None:
    from omni_vla_sim.compare import variants
    from omni_vla_sim.eval import REPO

    base = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference", episodes=5)
    vs = variants("chunking", base)
    assert set(vs) == {f"{s}_d{d}" for s in ("naive", "average", "rtc") for d in (0, 1, 2, 4)}
    for name, v in vs.items():
        changed = {k for k, val in v.model_dump().items() if val != base.model_dump()[k]}
        assert changed <= {"strategy", "delay_ticks"}, name
        assert name == f"{v.strategy}_d{v.delay_ticks}"


def test_a_backend_comparison_of_a_staged_bundle_runs_the_robot_backends_it_holds(tiny_vla) -> None:
    """An imported VLA has no eager PyTorch checkpoint of ours: comparing backends compares its runtimes."""
    from omni_vla_sim.compare import variants

    base = EvalSettings(backend="mnn", bundle_dir=tiny_vla[1], episodes=2)
    assert list(variants("backends", base)) == ["executorch", "mnn"]


def test_backends_disagreeing_beyond_their_intervals_are_flagged() -> None:
    from omni_vla_sim.compare import intervals_agree

    def rep(k: int, n: int) -> dict:
        g = {"ci95": list(wilson(k, n))}
        return {"tasks": {"pick_red": g}, "overall": g}

    assert intervals_agree({"a": rep(45, 50), "b": rep(40, 50)}) == {"pick_red": True, "overall": True}
    assert intervals_agree({"a": rep(45, 50), "b": rep(10, 50)}) == {"pick_red": False, "overall": False}


def test_backend_comparison_without_a_bundle_is_refused_before_any_episode(tmp_path: Path, capsys) -> None:
    argv = ["--backend", "expert", "--compare", "backends", "--episodes", "1", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "needs a bundle_dir" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_episodes_recorded_as_mcap_bags_hold_what_the_robot_saw_and_executed(tmp_path: Path) -> None:
    import numpy as np
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    s = EvalSettings(backend="expert", tasks=("touch_yellow",), episodes=1, image_size=64)
    report = evaluate(s, workers=1, progress=False, out=tmp_path / "report", record_dir=tmp_path / "rec",
                      record_format="mcap")
    steps = report["tasks"]["touch_yellow"]["mean_episode_length"]
    bag = tmp_path / "rec" / "touch_yellow" / "touch_yellow_1000000.mcap"
    assert bag.is_dir() and [p.name for p in bag.parent.iterdir()] == [bag.name], "no temporary left behind"
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        commands, images, instruction = [], [], None
        for conn, stamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic == "/forward_position_controller/commands":
                commands.append((stamp, np.array(msg.data)))
            elif conn.topic == "/camera/wrist/image_raw":
                images.append((msg.height, msg.width, msg.encoding, len(msg.data)))
            elif conn.topic == "/omni_vla/instruction":
                instruction = msg.data
    assert counts["/joint_states"] == counts["/camera/front/image_raw"] == len(commands) == steps
    assert instruction in ("touch the yellow ball", "tap the yellow sphere")
    assert images[0] == (64, 64, "rgb8", 64 * 64 * 3)
    assert [t for t, _ in commands[:3]] == [0, 50_000_000, 100_000_000], "stamped in simulated time"
    (episode,) = json.loads((tmp_path / "report" / "episodes.json").read_text())
    np.testing.assert_allclose(np.stack([c for _, c in commands]), np.array(episode["actions"]), atol=1e-5)
