"""Robots for the invariant fuzzing: our Panda plus real descriptions that PyPI packages ship.

The supervisor reads each description through safety/ (with a joint_limits overlay for the
velocity and acceleration limits no MJCF or these URDFs carry); the oracle takes the position
ranges from MuJoCo's own compiled model and the rates from the overlay YAML, read apart.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import yaml
from mujoco_robot_limits import DESCRIPTIONS, ROBOTS, compile_without_meshes, mujoco_limits
from safety_fuzz import Robot
from safety_oracle import Joint, joints_from_yaml

from omni_vla_safety.limits import load_enforced_limits

REPO = Path(__file__).resolve().parents[2]
PANDA_YAML = REPO / "config" / "joint_limits.yaml"
PANDA_NAMES = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
# Real descriptions fuzzed: a 7-DoF arm, a 6-DoF arm, and a bimanual robot split over <include> files.
FUZZED = ("iiwa", "ur5e", "aloha_vx300s")


def panda() -> Robot:
    return Robot("panda", PANDA_NAMES, load_enforced_limits(PANDA_YAML, PANDA_NAMES),
                 joints_from_yaml(PANDA_YAML, PANDA_NAMES))


def _rates(lo: float, hi: float, jerk: bool) -> dict[str, float | bool]:
    """Plausible rate limits scaled to the joint's travel (a slide of a few cm gets m/s-sized ones). A jerk-limited
    joint gets a jerk limit that binds at 100 Hz (J dt = 3 A / 10) and equal acceleration and deceleration limits
    (the limiter holds such a joint to the smaller of the two: docs/safety.md); the others keep D > A."""
    span = hi - lo
    scale = 1.0 if span > 0.5 else 0.2
    if jerk:
        return {"max_velocity": 2.0 * scale, "max_acceleration": 10.0 * scale, "max_deceleration": 10.0 * scale,
                "has_jerk_limits": True, "max_jerk": 300.0 * scale}
    return {"max_velocity": 2.0 * scale, "max_acceleration": 10.0 * scale, "max_deceleration": 12.0 * scale}


def described(key: str, overlay_dir: Path) -> Robot:
    """A shipped description: joints with a finite range in MuJoCo's model, rates from an overlay we write."""
    path = ROBOTS / DESCRIPTIONS[key]
    ranges = {n: (float(lo), float(hi)) for n, (lo, hi, _) in mujoco_limits(compile_without_meshes(path)).items()
              if math.isfinite(lo) and math.isfinite(hi)}
    names = sorted(ranges)
    # Every other joint is jerk-limited: each description exercises the jerk-limited and the rate-limited path.
    fields = {n: {"has_velocity_limits": True, "has_acceleration_limits": True, "has_deceleration_limits": True,
                  **_rates(*ranges[n], jerk=k % 2 == 0)} for k, n in enumerate(names)}
    overlay = overlay_dir / f"{key}_overlay.yaml"
    overlay.write_text(yaml.safe_dump({"joint_limits": fields}))
    raw = yaml.safe_load(overlay.read_text())["joint_limits"]
    joints = [Joint(ranges[n][0], ranges[n][1], raw[n]["max_velocity"], raw[n]["max_acceleration"],
                    raw[n]["max_deceleration"], raw[n].get("max_jerk", math.inf)) for n in names]
    # Coupled or mimic joints are not enforced by the supervisor: leave out what it refuses to enforce.
    enforced = load_enforced_limits(path, names, overlay) if names else []
    return Robot(key, names, enforced, joints)


def fuzz_robots() -> list[Robot]:
    with tempfile.TemporaryDirectory(prefix="omni_vla_fuzz_") as overlay_dir:  # read in full by described()
        return [panda()] + [described(key, Path(overlay_dir)) for key in FUZZED]
