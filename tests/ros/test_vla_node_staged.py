"""vla_node runs a VLA exported stage by stage (kind "vla": SmolVLA's architecture at test size) over DDS with the
real supervisor, and `bench graph --compare-reference` measures it against the shipped reference in one command:
the loop's own figures (chunks, splices, starved ticks) and an independent check of every command the robot got
against config/joint_limits.yaml. Loose sanity only: the timing goals are met in results/vla_loop/, not here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omni_vla.tools.limits_oracle import check_commands, read_limits

pytest.importorskip("rclpy")
REPO = Path(__file__).resolve().parents[2]
JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]


@pytest.fixture(scope="module")
def bundle(tiny_vla) -> Path:  # noqa: ANN001
    return tiny_vla[1]


@pytest.mark.slow
def test_the_node_runs_a_staged_vla_with_rtc_and_the_bench_compares_it_with_the_reference(bundle: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "graph", "--json", "--bundle", str(bundle),
                           "--param", "strategy=rtc", "--duration", "8", "--warmup", "2", "--startup-timeout", "30",
                           "--compare-reference"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    policy, reference = result["policy"], result["reference"]
    assert policy["bundle"] == str(bundle) and reference["bundle"].endswith("bundles/reference")
    # the measured window is the one asked for, even when start-up + warm-up + duration exceed --startup-timeout
    assert policy["window_s"] == pytest.approx(8.0, abs=0.01) and reference["window_s"] == pytest.approx(8.0, abs=0.01)
    assert policy["vla_params"]["strategy"] == "rtc" == reference["vla_params"]["strategy"]
    loop = policy["vla_loop"]
    assert loop["rate_hz_target"] == 10.0 and loop["chunks"] >= 5 and loop["splices"] >= 3  # the bundle's 10 Hz
    assert loop["worker_restarts"] == 0 and loop["splice_jump_max"] >= loop["splice_jump_p95"] >= 0
    for side in (policy, reference):
        oracle = side["limits_oracle"]
        assert oracle["commands"] >= 400  # 8 s at 100 Hz, generous floor for a loaded machine
        assert oracle["outside_position_limits"] == 0 and oracle["over_velocity_steps"] == 0
    assert set(result["ratios"]) == {"tick_lateness_p99", "vla_tick_lateness_p99", "safe_period_p99"}


def test_the_oracle_counts_positions_outside_the_file_and_steps_over_the_velocity_limit() -> None:
    limits = read_limits(REPO / "config" / "joint_limits.yaml", JOINTS)
    home = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.03])
    ok = home + np.linspace(0, 0.001, 20)[:, None]  # 53 um per step: below every joint's max_velocity at 100 Hz
    assert check_commands(ok, limits, 100.0) == {"commands": 20, "outside_position_limits": 0, "over_velocity_steps": 0,
                                                 "max_step_fraction": pytest.approx(0.0263, abs=1e-3)}  # the gripper: 0.2 m/s
    bad = ok.copy()
    bad[5, 0] = limits["upper"][0] + 1e-3  # out of range, and a jump both into and out of it
    got = check_commands(bad, limits, 100.0)
    assert got["outside_position_limits"] == 1 and got["over_velocity_steps"] == 2 and got["max_step_fraction"] > 100
    at_limit = ok.copy()
    at_limit[1:, 1] = at_limit[0, 1] + np.arange(1, 20) * limits["velocity"][1] / 100.0  # exactly max_velocity
    assert check_commands(at_limit, limits, 100.0)["over_velocity_steps"] == 0


def test_a_joint_without_limits_in_the_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.yaml").write_text("joint_limits:\n  a: {has_position_limits: true, min_position: -1, max_position: 1}\n")
    with pytest.raises(ValueError, match="joint 'a' has no position or velocity limits"):
        read_limits(tmp_path / "l.yaml", ["a"])
