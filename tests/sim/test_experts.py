"""Scripted experts succeed on held-out seeds and never command beyond joint limits."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from omni_vla_sim import robot
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.collect import grasp_offset
from omni_vla_sim.experts import CLOSED, ScriptedExpert, _grasp_yaw, _yaw_of, run_episode
from omni_vla_sim.tasks import EVAL_SEED_BASE, TASKS

SEEDS = range(EVAL_SEED_BASE, EVAL_SEED_BASE + 100)


def _rollouts(task: str) -> tuple[int, list[np.ndarray]]:
    env = PandaTaskEnv(task, EnvConfig(render=False))
    wins, traces = 0, []
    for seed in SEEDS:
        obs = env.reset(seed)
        expert = ScriptedExpert(env)
        expert.reset()
        actions = [obs["qpos"]]
        done = False
        while not done:
            a = expert.act()
            actions.append(a)
            _, _, ok, truncated, _ = env.step(a)
            done = ok or truncated
        wins += ok
        traces.append(np.array(actions))
    return wins, traces


@pytest.fixture(scope="module", params=sorted(TASKS))
def rollouts(request) -> tuple[str, int, list[np.ndarray]]:
    return (request.param, *_rollouts(request.param))


@pytest.mark.slow
def test_expert_succeeds_on_95_percent_of_100_seeds(rollouts) -> None:
    task, wins, _ = rollouts
    assert wins >= 95, f"{task}: expert succeeded on {wins}/100 seeds"


@pytest.mark.slow
def test_expert_never_commands_beyond_position_or_velocity_limits(rollouts) -> None:
    task, _, traces = rollouts
    limits = robot.load_limits()
    lo = np.array([limits[j].min_position for j in robot.JOINT_NAMES])
    hi = np.array([limits[j].max_position for j in robot.JOINT_NAMES])
    vmax = np.array([limits[j].max_velocity for j in robot.JOINT_NAMES])
    dt = 1 / 20.0
    for trace in traces:
        commands = trace[1:]
        assert np.all(commands >= lo) and np.all(commands <= hi), f"{task}: position limit exceeded"
        # The first command starts from the measured position; later ones from the previous command.
        speed = np.abs(np.diff(trace, axis=0)) / dt
        assert np.all(speed <= vmax * 1.0001), f"{task}: velocity limit exceeded: {speed.max(0)}"


def _stack_after_grasping_off_centre(seed: int, dx: float, carried_correction: bool) -> tuple[bool, float]:
    """The expert grasps the red cube dx off its centre (as a policy before a recovery hand-over may)."""
    env = PandaTaskEnv("stack_red_on_blue", EnvConfig(render=False))
    env.reset(seed)
    expert = ScriptedExpert(env)
    expert.reset()
    shift = np.array([dx, 0.0, 0.0])
    expert.plan = [replace(w, pos=w.pos + shift) if i in (1, 2) else w for i, w in enumerate(expert.plan)]
    if not carried_correction:
        expert.plan = [replace(w, carried=None) for w in expert.plan]
    offset, done, ok = float("nan"), False, False
    while not done:
        _, _, ok, truncated, _ = env.step(expert.act())
        done = ok or truncated
        w = env.world_state()
        if np.isnan(offset) and "red_cube" in w.holding:
            offset = float(w.grip[0] - w.red[0])
    return ok, offset


def test_expert_places_the_carried_cube_not_the_grip_after_an_off_centre_grasp() -> None:
    seeds = range(EVAL_SEED_BASE, EVAL_SEED_BASE + 4)
    corrected = [_stack_after_grasping_off_centre(s, 0.025, True) for s in seeds]
    assert all(abs(off - 0.025) < 0.005 for _, off in corrected), f"grasp offsets {[o for _, o in corrected]}"
    assert all(ok for ok, _ in corrected), "a cube held 2.5 cm off-centre must still be stacked"
    # Without the correction the grip, not the cube, goes over the blue cube and the red one falls off.
    assert sum(_stack_after_grasping_off_centre(s, 0.025, False)[0] for s in seeds) <= 1


@pytest.mark.parametrize("offset", [0.02, -0.02])
def test_grasp_offset_moves_the_grasp_along_the_fingers_and_the_cube_is_still_stacked(offset: float) -> None:
    env = PandaTaskEnv("stack_red_on_blue", EnvConfig(render=False))
    env.reset(EVAL_SEED_BASE + 22)  # the red cube turned -30 degrees: "along the fingers" is not world x
    fingers = _grasp_yaw(_yaw_of(env, "red_cube"))
    along = np.array([np.cos(fingers), np.sin(fingers)])
    expert = ScriptedExpert(env, grasp_offset=offset)
    expert.reset()
    grasp = expert.plan[1].pos[:2] - env.world_state().red[:2]
    assert np.allclose(grasp, offset * along, atol=1e-9), f"grasp waypoint {grasp}, asked {offset} along {along}"
    held, done, ok = None, False, False
    while not done:
        _, _, ok, truncated, _ = env.step(expert.act())
        done = ok or truncated
        w = env.world_state()
        if held is None and "red_cube" in w.holding:
            held = (w.grip - w.red)[:2]
    assert held is not None, "the red cube was never grasped"
    assert abs(held @ along - offset) < 0.005, f"grasp {held} m off-centre, asked {offset} along {along}"
    assert ok, "the placement aims the carried cube, so an off-centre grasp is still stacked"


def test_correction_demonstration_records_only_from_the_closed_grasp_on() -> None:
    env = PandaTaskEnv("place_blue_on_green", EnvConfig(render=False))
    seed = EVAL_SEED_BASE + 3
    ok_full, steps_full, full = run_episode(env, seed, record=True)
    ok, steps, part = run_episode(env, seed, record=True, grasp_offset=0.02)
    assert ok_full and ok
    assert len(full) == steps_full, "an ordinary demonstration records every tick"
    assert 0 < len(part) < steps - 20, f"{len(part)} of {steps} ticks recorded: the approach must be left out"
    assert part[0][1][7] == CLOSED, "recording starts with the fingers closed on the cube"
    with pytest.raises(ValueError, match="pick_red"):
        run_episode(PandaTaskEnv("pick_red", EnvConfig(render=False)), seed, grasp_offset=0.02)


def test_grasp_offsets_are_seeded_within_bounds_and_take_both_signs() -> None:
    offsets = [grasp_offset(s, (0.008, 0.025)) for s in range(200)]
    assert offsets == [grasp_offset(s, (0.008, 0.025)) for s in range(200)], "the same seed, the same grasp"
    assert all(0.008 <= abs(o) <= 0.025 for o in offsets)
    assert 60 < sum(o > 0 for o in offsets) < 140, "both sides of the cube"
