"""vla_node's ROS parameter conventions over real rclpy: descriptors, unknown names, set_parameters."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rosutil import REPO, free_domain_id
from tiny_bundles import tiny_bundle

PARAMS_FILE = REPO / "config" / "vla_node.yaml"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bundle(tmp_path_factory)


@pytest.fixture
def make_node():
    """VlaNode in-process on a private context; destroyed (worker stopped) after the test."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from omni_vla.ros.node import VlaNode

    made = []

    def make(**overrides):
        ctx = Context()
        rclpy.init(context=ctx, domain_id=free_domain_id())
        node = VlaNode(context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
        made.append((node, ctx))
        return node

    yield make
    for node, ctx in made:
        node.release()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def test_every_parameter_has_a_typed_described_descriptor_with_ranges_and_read_only(make_node) -> None:
    from rcl_interfaces.msg import ParameterType

    from omni_vla.core.settings import VlaNodeConfig
    from omni_vla_safety.ros_params import model_fields

    node = make_node()
    names = [n for n, _ in model_fields(VlaNodeConfig)]
    assert "topics.cameras" in names and "max_future_stamp_s" in names
    desc = {d.name: d for d in node.describe_parameters(names)}
    for name in names:
        d = desc[name]
        assert d.type != ParameterType.PARAMETER_NOT_SET and not d.dynamic_typing, name
        assert d.description and d.description != name, f"{name} has no description"
    assert desc["rate_hz"].type == ParameterType.PARAMETER_DOUBLE
    rng = desc["rate_hz"].floating_point_range[0]
    assert (rng.from_value, rng.to_value) == (0.0, 1000.0)
    rng = desc["threads"].integer_range[0]
    assert (rng.from_value, rng.to_value) == (1, 64)
    assert desc["joint_names"].type == ParameterType.PARAMETER_STRING_ARRAY
    assert "one of: rtc, average, naive" in desc["strategy"].additional_constraints
    read_only = {n for n in names if desc[n].read_only}
    assert {"bundle_dir", "backend", "rate_hz", "strategy", "execution_horizon", "joint_names", "threads",
            "topics.joint_states", "autostart", "realtime_priority"} <= read_only
    assert set(names) - read_only == {"max_obs_age_s", "max_future_stamp_s", "average_old_weight",
                                      "diagnostics_period_s", "replan_intervention_kinds"}


def test_set_parameters_refuses_read_only_wrong_type_and_invalid_values_with_a_reason(make_node) -> None:
    from rclpy.parameter import Parameter

    node = make_node()
    refused = {
        "rate_hz": (Parameter("rate_hz", value=50.0), "read-only"),
        "max_obs_age_s type": (Parameter("max_obs_age_s", value="soon"), "expected 'Type.DOUBLE'"),
        "average_old_weight range": (Parameter("average_old_weight", value=1.5), "out of range Min: 0.0, Max: 1.0"),
        "max_obs_age_s zero": (Parameter("max_obs_age_s", value=0.0), "max_obs_age_s: must be > 0.0 (got 0.0)"),
    }
    for label, (param, reason) in refused.items():
        result = node.set_parameters([param])[0]
        assert not result.successful and reason in result.reason, (label, result.reason)
    assert node.get_parameter("max_obs_age_s").value == 0.5, "a refused value is not stored"
    ok = node.set_parameters([Parameter("max_obs_age_s", value=0.8)])[0]
    assert ok.successful and node.get_parameter("max_obs_age_s").value == 0.8


@pytest.mark.slow
def test_live_parameters_apply_to_the_running_loop_at_once(make_node, bundle: Path) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    node = make_node(bundle_dir=str(bundle), backend="mnn")
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.hardware_id.endswith(" (mnn)") and "@" in node.hardware_id
    results = node.set_parameters([Parameter("max_obs_age_s", value=0.9), Parameter("max_future_stamp_s", value=0.2),
                                   Parameter("diagnostics_period_s", value=0.25)])
    assert all(r.successful for r in results), [r.reason for r in results]
    assert node.controller.config.max_obs_age_s == 0.9
    assert node.store.max_future_stamp_s == 0.2
    assert node._timer.timer_period_ns == 250_000_000
    o = {"front": 1, "wrist": 1, "qpos": 1, "stamps": {"front": 0.0, "wrist": 0.0, "joints": 0.0}}
    assert node.controller._input_problem(o, 1.0) == ("STALE", "front camera image older than max_obs_age_s=0.9 s")


def _run_node(*args: str, params_file: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "omni_vla.ros.node", "--ros-args", *args]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    env = {**os.environ, "ROS_DOMAIN_ID": str(free_domain_id())}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


def test_misspelled_key_in_a_params_file_fails_startup_naming_it_and_the_nearest_name(tmp_path: Path) -> None:
    """The shipped file with one key misspelled, as an integrator would: one line, exit 1, no traceback."""
    bad = tmp_path / "vla_node.yaml"
    bad.write_text(PARAMS_FILE.read_text().replace("    bundle_dir:", "    max_obs_age_sec: 0.2\n    bundle_dir:"))
    res = _run_node(params_file=bad)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "configure failed: unknown parameter(s) 'max_obs_age_sec' (did you mean 'max_obs_age_s'?)"), out
    assert "Traceback" not in out


def test_out_of_range_override_fails_configure_with_the_settings_reason() -> None:
    res = _run_node("-p", "bundle_dir:=bundles/reference", "-p", "autostart:=true", "-p", "rate_hz:=5000.0")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "configure failed: invalid parameters: rate_hz: must be <= 1000.0 (got 5000.0)" in out, out
    assert "Traceback" not in out


def test_a_topic_name_rclpy_refuses_fails_configure_in_one_line_and_stops_the_worker(make_node, bundle: Path) -> None:
    """rclpy refuses the name only when the subscription is made, after the worker started: it must not outlive it."""
    from rclpy.lifecycle import TransitionCallbackReturn

    node = make_node(bundle_dir=str(bundle), backend="mnn", **{"topics.joint_states": "joint states"})
    started = set(_children())
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert node.inference is None and set(_children()) <= started
    res = _run_node("-p", f"bundle_dir:={bundle}", "-p", "backend:=mnn", "-p", "autostart:=true",
                    "-p", "topics.joint_states:='joint states'")
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if "[vla_node]" in ln]
    assert len(lines) == 1 and "configure failed: InvalidTopicNameException" in lines[0], out


def _children() -> list[int]:
    """This process's live multiprocessing children (inference workers; not the shared-memory resource tracker)."""
    pids = [int(p) for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()]
    return [p for p in pids if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_worker_placement_from_the_command_line_pins_the_worker(make_node, bundle: Path) -> None:
    """`-p worker_cpus:=1` reaches the node as an integer: taken as its text, and the worker runs there."""
    from rclpy.lifecycle import TransitionCallbackReturn

    cpu = max(os.sched_getaffinity(0))
    node = make_node(bundle_dir=str(bundle), backend="mnn", worker_cpus=cpu, worker_nice=3)
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    pid = node.inference.pid
    assert os.sched_getaffinity(pid) == {cpu}
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 3, 19)


@pytest.mark.parametrize("cpus, says", [
    ("0-x", "configure failed: invalid parameters: worker_cpus: '0-x' is not a CPU number or range"),
    ("4096", "configure failed: cannot start the mnn runtime for {bundle}: worker_cpus names CPU(s) 4096 this "
             "process may not use"),
])
def test_bad_worker_cpus_fail_configure_in_one_line(bundle: Path, cpus: str, says: str) -> None:
    res = _run_node("-p", f"bundle_dir:={bundle}", "-p", "backend:=mnn", "-p", "autostart:=true",
                    "-p", f"worker_cpus:='{cpus}'")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert says.format(bundle=bundle) in out and "Traceback" not in out, out
    assert len([ln for ln in out.splitlines() if "[vla_node]" in ln]) == 1, out


URDF = REPO / "tests" / "data" / "robots" / "robosuite_panda_urdf" / "panda_arm_hand.urdf"  # robosuite's, unmodified


def _acceleration_overlay(tmp_path: Path) -> Path:
    """What a URDF lacks, as an integrator gives it: the Panda's accelerations (datasheet values) in an overlay."""
    import yaml

    shipped = yaml.safe_load((REPO / "config" / "joint_limits.yaml").read_text())["joint_limits"]
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"joint_limits": {
        joint: {k: shipped[joint][k] for k in ("has_acceleration_limits", "max_acceleration")} for joint in shipped}}))
    return overlay


def test_shaping_takes_a_urdf_with_the_overlay_and_refuses_it_alone_in_one_line(make_node, tmp_path: Path) -> None:
    """robosuite's Panda URDF (velocities, no accelerations) as the robot's limits file."""
    common = dict(bundle_dir=str(REPO / "bundles" / "reference"), backend="mnn", command_accel_fraction=0.9,
                  joint_limits_file=str(URDF))
    node = make_node(**common, joint_limits_overlay=str(_acceleration_overlay(tmp_path)))
    node.trigger_configure()
    assert node.loop is not None and node.loop.shaper is not None
    import xml.etree.ElementTree as ET

    urdf = {j.get("name"): float(j.find("limit").get("velocity")) for j in ET.parse(URDF).getroot().iter("joint")
            if j.find("limit") is not None}
    # The URDF's own velocity limits (2.61 rad/s for joints 5-7, where config/joint_limits.yaml has 2.175).
    np.testing.assert_allclose(node.loop.shaper.vmax[:7], [0.9 * urdf[f"panda_joint{i}"] for i in range(1, 8)])
    refused = make_node(**common)
    refused.trigger_configure()
    assert refused.loop is None
    res = _run_node("-p", f"bundle_dir:={REPO / 'bundles' / 'reference'}", "-p", "backend:=mnn", "-p", "autostart:=true",
                    "-p", "command_accel_fraction:=0.9", "-p", f"joint_limits_file:={URDF}")
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out
    assert "command shaping: joint 'panda_joint1' needs has_velocity_limits and has_acceleration_limits" in out, out
    assert len([ln for ln in out.splitlines() if "[vla_node]" in ln]) == 1, out
