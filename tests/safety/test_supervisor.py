"""Supervisor state machine on a fake clock: fail-closed validation, watchdog, e-stop, hold."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from omni_vla_safety.config import SupervisorConfig, config_from_yaml
from omni_vla_safety.limits import load_limit_sets, require_joints
from omni_vla_safety.supervisor import ACTIVE, ESTOP, HOLD, WAITING, WATCHDOG, Supervisor

REPO = Path(__file__).resolve().parents[2]
CONFIG = config_from_yaml(REPO / "config" / "safety_supervisor.yaml")
NAMES = list(CONFIG.joint_names)
HOME = [0.0, 0.0, 0.0, -1.5, 0.0, 1.8, 0.0, 0.02]
DT = CONFIG.dt


class Rig:
    """A supervisor plus a perfectly tracking robot and a fake clock."""

    def __init__(self, **overrides: object) -> None:
        config = CONFIG.model_copy(update=overrides) if overrides else CONFIG
        limits = require_joints(load_limit_sets(REPO / "config" / "joint_limits.yaml"), NAMES, "joint_limits")
        self.sup = Supervisor(config, limits)
        self.now = 0.0
        self.robot = list(HOME)
        self.outputs: list[list[float]] = []

    def tick(self, n: int = 1, joint_states: bool = True) -> list[float] | None:
        out = None
        for _ in range(n):
            self.now += DT
            if joint_states:
                self.sup.on_joint_state(NAMES, self.robot, self.now)
            out = self.sup.tick(self.now)
            if out is not None:
                self.robot = list(out)
                self.outputs.append(list(out))
        return out

    def command(self, positions: list[float], names: list[str] | None = None, stamp: float | None = -1.0) -> bool:
        return self.sup.on_command(NAMES if names is None else names, positions,
                                   self.now if stamp == -1.0 else stamp, self.now)

    def velocities(self, joint: int) -> list[float]:
        qs = [o[joint] for o in self.outputs]
        return [(b - a) / DT for a, b in zip(qs, qs[1:])]


def moving(rig: Rig, ticks: int = 30, speed_target: float = 2.0) -> None:
    """Drive joint 1 towards a far target at 20 Hz proposals until it moves fast."""
    for k in range(ticks):
        if k % 5 == 0:
            target = list(HOME)
            target[0] = speed_target
            assert rig.command(target)
        rig.tick()


def test_no_output_before_first_joint_state() -> None:
    rig = Rig()
    assert rig.tick(5, joint_states=False) is None
    assert rig.sup.state == WAITING
    assert not rig.command(HOME)  # nothing measured: rejected
    assert rig.sup.counts["rejected_no_joint_state"] == 1
    out = rig.tick()
    assert out == HOME and rig.sup.state == HOLD  # first state: hold where the robot is


def test_valid_command_followed_within_limits() -> None:
    rig = Rig()
    rig.tick()
    target = list(HOME)
    target[1] = 0.3
    for k in range(200):
        if k % 5 == 0:
            assert rig.command(target)
        rig.tick()
    assert rig.sup.state == ACTIVE
    assert math.isclose(rig.robot[1], 0.3, abs_tol=1e-4)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_command_rejected_and_held(bad: float) -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    v_before = rig.velocities(0)[-1]
    assert v_before > 0.5
    target = list(HOME)
    target[2] = bad
    assert not rig.command(target)
    assert rig.sup.counts["rejected_non_finite"] == 1
    assert "panda_joint3" in rig.sup.reason
    rig.tick(40)
    assert rig.sup.state == HOLD
    assert all(math.isfinite(x) for o in rig.outputs for x in o)
    speeds = rig.velocities(0)
    assert speeds[-1] == 0.0 and rig.outputs[-1] == rig.outputs[-2]  # stopped, holding
    decel = [(a - b) / DT for a, b in zip(speeds, speeds[1:]) if a > b]
    assert max(decel) <= 15.0 + 1e-6  # held through a controlled stop, not a jump


@pytest.mark.parametrize("names, positions, kind, needle", [
    (NAMES[:7], HOME[:7], "rejected_size", "expected 8"),
    (NAMES, HOME[:7], "rejected_size", "8 joint names but 7 positions"),
    (NAMES[:7] + ["panda_finger_joint2"], HOME, "rejected_names", "unknown joint 'panda_finger_joint2'"),
    (NAMES[:7] + ["panda_joint1"], HOME, "rejected_names", "'panda_joint1' twice"),
])
def test_malformed_command_rejected_naming_the_problem(names: list[str], positions: list[float], kind: str,
                                                       needle: str) -> None:
    rig = Rig()
    rig.tick()
    assert not rig.command(positions, names=names)
    assert rig.sup.counts[kind] == 1 and needle in rig.sup.reason
    assert rig.sup.target is None


def test_reordered_joint_names_indexed_by_name() -> None:
    rig = Rig()
    rig.tick()
    target = list(HOME)
    target[6] = 0.5
    order = list(reversed(range(8)))
    assert rig.command([target[i] for i in order], names=[NAMES[i] for i in order])
    assert rig.sup.target == target


def test_old_and_future_stamped_commands_rejected() -> None:
    rig = Rig()
    rig.tick()
    assert not rig.command(HOME, stamp=rig.now - 0.5)
    assert rig.sup.counts["rejected_stale"] == 1
    assert not rig.command(HOME, stamp=rig.now + 1.0)
    assert rig.sup.counts["rejected_future_stamp"] == 1
    assert rig.command(HOME, stamp=rig.now - 0.05)


def test_zero_stamp_uses_receive_time() -> None:
    rig = Rig()
    rig.tick()
    assert rig.command(HOME, stamp=None)
    assert rig.sup.command_time == rig.now


def test_stale_command_brings_robot_to_controlled_stop() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=40)
    last_command = rig.now
    v_at_loss = rig.velocities(0)[-1]
    assert v_at_loss > 1.0
    n_before = len(rig.outputs)
    rig.tick(60)  # proposals stop arriving, joint states keep coming
    assert rig.sup.state == WATCHDOG and "proposals stopped" in rig.sup.reason
    assert rig.sup.counts["watchdog_command"] == 1
    speeds = rig.velocities(0)[n_before - 1:]
    decel = [(a - b) / DT for a, b in zip(speeds, speeds[1:])]
    assert max(decel) <= 15.0 + 1e-6 and min(decel) >= -1e-9  # monotone ramp within max_deceleration
    stop_tick = next(k for k, v in enumerate(speeds) if v == 0.0)
    timeout_ticks = math.ceil(CONFIG.command_timeout_s / DT)
    assert stop_tick <= timeout_ticks + math.ceil(v_at_loss / (15.0 * DT)) + 2
    assert all(o == rig.outputs[-1] for o in rig.outputs[n_before + stop_tick:])  # then holds
    assert rig.now - last_command > CONFIG.command_timeout_s


def test_stale_joint_state_brings_robot_to_controlled_stop_and_rejects_commands() -> None:
    rig = Rig()
    rig.tick()
    moving(rig, ticks=40)
    rig.tick(30, joint_states=False)
    assert rig.sup.state == WATCHDOG and rig.sup.counts["watchdog_joint_state"] == 1
    assert rig.sup.limiter.stopped
    assert not rig.command(HOME)
    assert rig.sup.counts["rejected_no_joint_state"] == 1


def test_new_valid_command_resumes_after_watchdog_stop() -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.tick(50)
    assert rig.sup.state == WATCHDOG
    assert rig.command(HOME)
    rig.tick()
    assert rig.sup.state == ACTIVE


def test_estop_latches_and_resets_only_when_clear() -> None:
    rig = Rig()
    rig.tick()
    moving(rig)
    rig.sup.on_estop(True, rig.now)
    rig.tick()
    assert rig.sup.state == ESTOP
    ok, why = rig.sup.reset_estop(rig.now)
    assert not ok and "still True" in why
    rig.sup.on_estop(False, rig.now)  # condition gone, but the robot is still braking
    ok, why = rig.sup.reset_estop(rig.now)
    assert not ok and "braking" in why
    moving_cmd = list(HOME)
    moving_cmd[0] = 2.0
    assert not rig.command(moving_cmd)  # ignored while latched
    rig.tick(40)
    assert rig.sup.state == ESTOP and rig.sup.limiter.stopped  # False alone does not unlatch
    rig.sup.on_estop(True, rig.now)
    rig.sup.on_estop(False, rig.now)
    ok, why = rig.sup.reset_estop(rig.now)
    assert ok, why
    rig.tick()
    assert rig.sup.state == HOLD  # needs a fresh proposal to move again
    assert rig.command(moving_cmd)
    rig.tick()
    assert rig.sup.state == ACTIVE


def test_interventions_counted_and_described_with_joint_limit_and_values() -> None:
    rig = Rig(target_horizon_s=0.0)
    rig.tick()
    target = list(HOME)
    target[4] = 2.8
    for _ in range(40):
        rig.command(target)
        rig.tick()
    assert rig.sup.counts["velocity"] > 0 and rig.sup.counts["acceleration"] > 0
    messages = [m for kind, m in rig.sup.events if kind == "velocity"]
    limit = 2.61 * (1 - CONFIG.limit_margin)  # the margin kept below the configured limit
    assert f"panda_joint5: velocity limit {limit:g}: requested velocity" in messages[0]
    status = rig.sup.status()
    assert status["state"] == ACTIVE and status["counts"]["velocity"] == rig.sup.counts["velocity"]


def test_config_refuses_inconsistent_parameters_naming_them() -> None:
    with pytest.raises(ValidationError, match="max_relative_target"):
        SupervisorConfig(max_relative_target=[0.1, 0.2])
    with pytest.raises(ValidationError, match="command_timeout_s"):
        SupervisorConfig(command_timeout_s=0.01)
    with pytest.raises(ValidationError, match="joint_names"):
        SupervisorConfig(joint_names=["a", "a"])
    with pytest.raises(ValidationError, match="unknown_parameter"):
        SupervisorConfig(unknown_parameter=1)


def test_parameter_file_defaults_match_the_validated_model() -> None:
    """config/safety_supervisor.yaml and SupervisorConfig must not drift apart."""
    assert CONFIG == SupervisorConfig()


def test_joint_limits_file_resolved_from_cwd_then_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from omni_vla_safety.config import resolve_path

    monkeypatch.chdir(tmp_path)
    assert resolve_path("config/joint_limits.yaml").samefile(REPO / "config" / "joint_limits.yaml")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "joint_limits.yaml").write_text("joint_limits: {}\n")
    assert resolve_path("config/joint_limits.yaml") == tmp_path / "config" / "joint_limits.yaml"
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        resolve_path("config/nowhere.yaml")
