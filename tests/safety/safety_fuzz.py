"""Hostile input sequences for the supervisor, checked step by step by the independent oracle.

`Rig` pairs a `Supervisor` with a `tests.safety_oracle.Oracle` and a robot that tracks the
published command perfectly; its event methods are the vocabulary of the hypothesis state
machine (tests/safety/test_invariants.py) and of `omni-vla bench safety --fuzz N`, which
draws them from a seeded generator (`run_random`).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from safety_oracle import Joint, Oracle, Rules

from omni_vla_safety.config import SupervisorConfig
from omni_vla_safety.limits import JointLimitSet
from omni_vla_safety.supervisor import Supervisor

HUGE = 1e307


@dataclass
class Robot:
    """What a fuzz run needs: the supervisor's limits (via safety/) and the oracle's (read apart)."""

    name: str
    names: list[str]
    limit_sets: list[JointLimitSet]
    oracle_joints: list[Joint]


def rules_of(config: SupervisorConfig) -> Rules:
    n = len(config.joint_names)
    tol = list(config.out_of_range_tolerance)
    return Rules(dt=config.dt, command_timeout=config.command_timeout_s, state_timeout=config.joint_state_timeout_s,
                 max_future=config.max_future_stamp_s, tolerance=tol * n if len(tol) == 1 else tol,
                 refuse_out_of_range=config.out_of_range == "refuse", margin=config.limit_margin)


def config_for(robot: Robot, rate_hz: float, **overrides: object) -> SupervisorConfig:
    n = len(robot.names)
    base = dict(joint_names=robot.names, rate_hz=rate_hz, max_relative_target=[0.25], out_of_range_tolerance=[0.02],
                command_timeout_s=max(0.2, 4.0 / rate_hz), joint_state_timeout_s=max(0.1, 3.0 / rate_hz))
    base.update(overrides)
    assert n > 0
    return SupervisorConfig(**base)


class Rig:
    """Supervisor + oracle + a perfectly tracking robot on a fake clock."""

    def __init__(self, robot: Robot, config: SupervisorConfig, start: Sequence[float]) -> None:
        self.robot = robot
        self.config = config
        self.sup = Supervisor(config, robot.limit_sets)
        self.oracle = Oracle(list(robot.names), list(robot.oracle_joints), rules_of(config))
        self.now = 0.0
        self.measured = [float(x) for x in start]
        self.joints = robot.oracle_joints

    # -- inputs --
    def joint_state(self, names: Sequence[str] | None = None, positions: Sequence[float] | None = None) -> None:
        names = list(self.robot.names) if names is None else list(names)
        positions = list(self.measured) if positions is None else list(positions)
        self.sup.on_joint_state(names, positions, self.now)
        self.oracle.joint_state(names, positions, self.now)

    def command(self, positions: Sequence[float], names: Sequence[str] | None = None,
                stamp: float | None = None) -> None:
        names = list(self.robot.names) if names is None else list(names)
        self.sup.on_command(names, list(positions), stamp, self.now)
        self.oracle.command(names, list(positions), stamp, self.now)

    def trajectory(self, rows: Sequence[tuple[float, Sequence[float]]], names: Sequence[str] | None = None,
                   stamp: float | None = None) -> None:
        names = list(self.robot.names) if names is None else list(names)
        self.sup.on_trajectory(names, [(t, list(p)) for t, p in rows], stamp, self.now)
        self.oracle.trajectory(names, [(t, list(p)) for t, p in rows], stamp, self.now)

    def estop(self, value: bool) -> None:
        self.sup.on_estop(value, self.now)
        self.oracle.estop(value)

    def reset_estop(self) -> None:
        ok, _ = self.sup.reset_estop(self.now)
        self.oracle.reset_estop(ok)

    def tick(self, joint_states: bool = True) -> None:
        self.now += self.config.dt
        if joint_states:
            self.joint_state()
        out = self.sup.tick(self.now)
        self.oracle.output(out, self.now)
        if out is not None:
            self.measured = list(out)

    # -- targets --
    def plausible(self, rng: random.Random, spread: float = 0.3) -> list[float]:
        return [min(max(m + rng.uniform(-spread, spread), j.lo), j.hi) for m, j in zip(self.measured, self.joints)]

    def corner(self, rng: random.Random) -> list[float]:
        return [j.lo if rng.random() < 0.5 else j.hi for j in self.joints]

    def far(self, rng: random.Random) -> list[float]:
        return [(j.hi + rng.uniform(0.1, 2.0)) if rng.random() < 0.5 else (j.lo - rng.uniform(0.1, 2.0))
                for j in self.joints]


def start_positions(robot: Robot, rng: random.Random, outside: bool, reach: float) -> list[float]:
    """In the range, or (`outside`) some joints beyond it by up to `reach` (the tolerance: farther is refused)."""
    out = []
    for j in robot.oracle_joints:
        if outside and rng.random() < 0.5:
            out.append(j.hi + rng.uniform(0, reach) if rng.random() < 0.5 else j.lo - rng.uniform(0, reach))
        else:
            out.append(rng.uniform(j.lo, j.hi))
    return out


def _bad_command(rig: Rig, rng: random.Random) -> tuple[list[float], list[str] | None]:
    names = list(rig.robot.names)
    target = rig.plausible(rng)
    kind = rng.randrange(7)
    if kind == 0:
        target[rng.randrange(len(target))] = rng.choice([math.nan, math.inf, -math.inf])
    elif kind == 1:
        target = [rng.choice([HUGE, -HUGE, 1e30, -1e30]) for _ in target]
    elif kind == 2:
        target = target[:-1] if len(target) > 1 else target + [0.0]
    elif kind == 3 and len(names) > 1:
        names[0] = names[1]
    elif kind == 4:
        names[0] = names[0] + "_typo"
    elif kind == 5:
        names = names[::-1]
        target = target[::-1]  # reordered but consistent: valid
    else:
        target = rig.far(rng)
    return target, names


def _stamp(rig: Rig, rng: random.Random) -> float | None:
    r = rng.random()
    if r < 0.5:
        return None
    if r < 0.75:
        return rig.now - rng.uniform(0, 0.5) * rig.config.command_timeout_s
    if r < 0.85:
        return rig.now - rng.uniform(1.5, 50.0) * rig.config.command_timeout_s
    if r < 0.95:
        return rig.now + rng.uniform(2.0, 100.0) * max(rig.config.max_future_stamp_s, rig.config.dt)
    return rng.choice([math.nan, math.inf, -math.inf])


def _bad_state(rig: Rig, rng: random.Random) -> None:
    names, pos = list(rig.robot.names), list(rig.measured)
    kind = rng.randrange(5)
    if kind == 0:
        pos[rng.randrange(len(pos))] = rng.choice([math.nan, math.inf])
    elif kind == 4:  # beyond the accepted bounds: a glitch, a unit error
        i = rng.randrange(len(pos))
        j, reach = rig.robot.oracle_joints[i], min(rig.config.out_of_range_tolerance)
        pos[i] = rng.choice([j.hi + reach * 1.0001 + rng.uniform(0, 3), j.lo - reach * 1.0001 - rng.uniform(0, 3), HUGE])
    elif kind == 1 and len(names) > 1:
        names[1] = names[0]
    elif kind == 2:
        names, pos = names[1:], pos[1:]
    else:
        pos = pos[:-1]
    rig.joint_state(names, pos)


def run_random(robot: Robot, rate_hz: float, steps: int, seed: int, on_violation: Callable[[Rig], None] | None = None,
               outside_start: bool = True, overrides: dict | None = None) -> Rig:
    """Drive a rig for `steps` ticks with a seeded mix of every event kind; returns it for its oracle."""
    rng = random.Random(seed)
    config = config_for(robot, rate_hz, **(overrides or {}))
    rig = Rig(robot, config, start_positions(robot, rng, outside_start and rng.random() < 0.2,
                                             min(config.out_of_range_tolerance)))
    proposal_every = max(1, round(rate_hz / 20.0))
    state_drop = command_drop = 0
    target = rig.plausible(rng)
    for k in range(steps):
        if rng.random() < 0.002:
            state_drop = rng.randrange(1, int(3 * rate_hz * rig.config.joint_state_timeout_s) + 2)
        if rng.random() < 0.002:
            command_drop = rng.randrange(1, int(3 * rate_hz * rig.config.command_timeout_s) + 2)
        if rng.random() < 0.01:
            _bad_state(rig, rng)
        if command_drop == 0 and k % proposal_every == 0:
            r = rng.random()
            if r < 0.6:
                if rng.random() < 0.1:
                    target = rig.corner(rng) if rng.random() < 0.5 else rig.plausible(rng, 2.0)
                else:
                    target = [t + rng.uniform(-0.05, 0.05) for t in target]
                stamp = _stamp(rig, rng) if rng.random() < 0.3 else None
                if rng.random() < 0.5:
                    rig.command(target, stamp=stamp)
                else:  # rows ahead, as vla_node sends them (sometimes a chunk of several)
                    rows = [(0.05 * (j + 1), [t + rng.uniform(-0.05, 0.05) * j for t in target])
                            for j in range(rng.choice([1, 1, 2, 5]))]
                    rig.trajectory(rows, stamp=stamp)
            elif r < 0.8:
                bad, names = _bad_command(rig, rng)
                rig.command(bad, names=names, stamp=_stamp(rig, rng))
            else:
                bad, names = _bad_command(rig, rng)
                times = rng.choice([[0.05, 0.1], [0.1, 0.05], [0.05, 0.05], [-0.01], [math.nan], []])
                rows = [(t, bad if j == len(times) - 1 else rig.plausible(rng)) for j, t in enumerate(times)]
                rig.trajectory(rows, names=names, stamp=_stamp(rig, rng))
        command_drop = max(0, command_drop - 1)
        r = rng.random()
        if r < 0.001:
            rig.estop(True)
        elif r < 0.003:
            rig.estop(False)
        elif r < 0.006:
            rig.reset_estop()
        rig.tick(joint_states=state_drop == 0)
        state_drop = max(0, state_drop - 1)
        if on_violation is not None and rig.oracle.violations:
            on_violation(rig)
    return rig
