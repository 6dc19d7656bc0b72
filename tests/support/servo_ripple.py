"""How far the simulated arm's servo outruns the commands it follows when they reach it late.

A command stream within a velocity limit, applied to a stiff position servo (sim/robot.py's actuators), is followed
at its own velocity only while each command arrives on time. When commands reach the physics late and several at
once (a late sim tick, a command delivered late on a loaded machine), the servo catches up on the jump, briefly
faster than the stream. tests/sim/test_robot_model.py measures this on the sim's own physics; the live-graph fault
tests (tests/ros/test_sim_faults.py) judge the measured velocity against the bound for the lateness they saw.
"""
from __future__ import annotations

ON_TIME = 1.10  # commands on time: up to 1.03 in the sim test (its reported velocity; over a period <= 1.0)
PER_LATE_PERIOD = 0.13  # each period of lateness adds at most this (the sim test: 0.07-0.13 on average, up to 12)
# The most a stall makes the sim miss: the supervisor's joint-state timeout (0.1 s, 10 periods) of commands, then
# its braking (about 2 periods' travel at the gripper's limits). Longer stalls are judged at this bound.
MAX_LATENESS = 12.0


def ripple_bound(late_periods: float) -> float:
    """The largest ratio of the servo's velocity (reported, or over consecutive samples) to the command stream's,
    when commands reach the physics up to `late_periods` command periods apart (1: on time; capped at MAX_LATENESS)."""
    return ON_TIME + PER_LATE_PERIOD * (min(max(late_periods, 1.0), MAX_LATENESS) - 1.0)
