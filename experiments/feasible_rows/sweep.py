"""Does a loop that sends rows the arm can follow remove the supervisor's clamps? A prototype, measured on validation seeds.

    python experiments/feasible_rows/sweep.py --accel-scale 0.8 [--gripper-window 0.018] --episodes 50 --workers 2 > out.jsonl

Each row the reference bundle's loop emits (MNN, `omni-vla eval`'s closed loop, everything else as shipped) passes a
per-joint filter before the supervisor: braking-aware approach to the row at `accel_scale` x the limits file's
acceleration (and its velocity limit), from the last emitted row and its velocity, so the 20 Hz rows have no
velocity step the 100 Hz supervisor would have to clamp; with `--gripper-window W` the gripper row also stays
within W of the measured finger (the supervisor's max_relative_target is 0.02 m). Seeds from 1,100,000.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from omni_vla_safety.limits import load_joint_limits
from omni_vla_sim import agents, robot
from omni_vla_sim.eval import REPO, EvalSettings, evaluate
from omni_vla_sim.report import headline


class FeasibleRows:
    """Emitted row q, its velocity v; each tick approaches the wanted row under |dv| <= a dt, |v| <= vmax."""

    def __init__(self, vmax: np.ndarray, amax: np.ndarray, dt: float, gripper_window: float | None) -> None:
        self.vmax, self.amax, self.dt, self.window = vmax, amax, dt, gripper_window
        self.q: np.ndarray | None = None
        self.v = np.zeros_like(vmax)

    def __call__(self, want: np.ndarray, measured: np.ndarray) -> np.ndarray:
        if self.q is None:
            self.q = np.asarray(measured, np.float64).copy()
        dt, a = self.dt, self.amax
        e = want - self.q
        # the speed from which braking at a stops within |e| (discrete: v^2 + a dt v <= 2 a |e|)
        brake = -0.5 * a * dt + np.sqrt((0.5 * a * dt) ** 2 + 2 * a * np.abs(e))
        vd = np.sign(e) * np.minimum(np.minimum(np.abs(e) / dt, brake), self.vmax)
        v = np.clip(vd, self.v - a * dt, self.v + a * dt)
        q = self.q + v * dt
        if self.window is not None:
            g = len(q) - 1
            q[g] = min(max(q[g], measured[g] - self.window), measured[g] + self.window)
            v[g] = (q[g] - self.q[g]) / dt
        self.q, self.v = q, v
        return q.copy()


def install(scale: float, window: float | None) -> None:
    limits = load_joint_limits(REPO / "config" / "joint_limits.yaml")
    names = list(robot.JOINT_NAMES)
    vmax = np.array([limits[n].max_velocity for n in names])
    amax = scale * np.array([min(limits[n].max_acceleration, limits[n].max_deceleration) for n in names])
    act = agents.LoopAgent.act

    def filtered(self: agents.LoopAgent, obs: dict, tick: int) -> np.ndarray | None:
        row = act(self, obs, tick)
        if row is None:
            return None
        if not hasattr(self, "_rows"):
            self._rows = FeasibleRows(vmax, amax, self.loop.settings.period_s, window)
        return self._rows(np.asarray(row, np.float64), np.asarray(obs["qpos"], np.float64))

    agents.LoopAgent.act = filtered


ENV = "OMNI_VLA_FEASIBLE_ROWS"  # "scale,window": set by main, read again by eval's spawned workers at import
if os.environ.get(ENV):
    _scale, _window = os.environ[ENV].split(",")
    install(float(_scale), float(_window) if _window else None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accel-scale", type=float, default=0.8, help="0: no filter (the shipped loop)")
    p.add_argument("--gripper-window", type=float, default=None)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed-base", type=int, default=1_100_000)
    args = p.parse_args()
    if args.accel_scale > 0:
        os.environ[ENV] = f"{args.accel_scale},{args.gripper_window if args.gripper_window is not None else ''}"
        install(args.accel_scale, args.gripper_window)
    settings = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference", episodes=args.episodes,
                            seed_base=args.seed_base)
    report = evaluate(settings, workers=args.workers, progress=False)
    print(json.dumps({"accel_scale": args.accel_scale, "gripper_window": args.gripper_window,
                      "seed_base": args.seed_base, **headline(report)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
