"""How far the simulated arm's servo outruns the commands it follows when they reach it late.

A command stream within a velocity limit, applied to a stiff position servo (sim/robot.py's actuators), is followed
at its own velocity only while each command arrives on time. When commands reach the physics late and several at
once (a late sim tick, a command delivered late on a loaded machine), the servo catches up on the jump, briefly
faster than the stream. tests/sim/test_robot_model.py measures this on the sim's own physics; the live-graph fault
tests (tests/ros/test_sim_faults.py) judge the measured velocity against the bound for the lateness they saw.
"""
from __future__ import annotations

ON_TIME = 1.10  # commands on time: the servo's velocity over the stream's, joints coupled (measured up to 1.083)
PER_LATE_PERIOD = 0.13  # each command period of lateness adds at most this (measured 0.07-0.128 per period)


def ripple_bound(late_periods: float) -> float:
    """The largest ratio of the servo's velocity (reported, or over consecutive samples) to the command stream's,
    when commands reach the physics up to `late_periods` command periods apart (1: on time)."""
    return ON_TIME + PER_LATE_PERIOD * max(0.0, late_periods - 1.0)
