"""Task classes (sim/tasks.py): each task owns its instructions, success, scene and expert plan."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest

from omni_vla_sim import tasks
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.experts import ScriptedExpert, run_episode
from omni_vla_sim.tasks import CUBE_HALF, EVAL_SEED_BASE, TASKS, Instruction, Task, WorldState, get_task

ORIGIN = np.array([0.5, 0.0, CUBE_HALF])


def _world(red=ORIGIN, blue=ORIGIN + [0, 0.2, 0], ball=ORIGIN + [0.1, -0.15, 0.005], pad=np.array([0.4, -0.1, 0.001]),
           holding=(), touching=False) -> WorldState:
    return WorldState(red=np.asarray(red, float), blue=np.asarray(blue, float), ball=np.asarray(ball, float),
                      pad=np.asarray(pad, float), grip=np.array([0.5, 0.0, 0.3]), gripper_opening=0.04,
                      touching_ball=touching, holding=frozenset(holding))


@pytest.fixture(scope="module")
def env() -> PandaTaskEnv:
    return PandaTaskEnv("pick_red", EnvConfig(render=False))


def test_every_task_has_three_paraphrases_one_held_out() -> None:
    assert sorted(TASKS) == ["pick_red", "place_blue_on_green", "stack_red_on_blue", "touch_yellow"]
    for task in TASKS.values():
        assert len(task.instructions) == 3
        held = [i for i in task.instructions if i.held_out]
        assert held == [task.held_out_instruction]
        assert task.held_out_instruction not in task.train_instructions and len(task.train_instructions) == 2


def test_unknown_task_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown task 'juggle'") as err:
        get_task("juggle")
    assert all(name in str(err.value) for name in TASKS)
    with pytest.raises(ValueError, match="unknown task 'juggle'"):
        tasks.success("juggle", _world())


class _Wave(Task):
    name = "wave"
    instructions = (Instruction("wave"), Instruction("wave hello"), Instruction("say goodbye", held_out=True))
    max_steps = 10

    def success(self, w: WorldState) -> bool:
        return False

    def expert_plan(self, env, grasp_offset: float = 0.0) -> list:
        return []


class _TwoHeldOut(_Wave):
    name = "two_held_out"
    instructions = (Instruction("a"), Instruction("b", held_out=True), Instruction("c", held_out=True))


class _SharesAPhrase(_Wave):
    name = "shares"
    instructions = (Instruction("pick up the red cube"), Instruction("x"), Instruction("y", held_out=True))


@pytest.mark.parametrize("suite, message", [
    ((_Wave(), _Wave()), "'wave' registered twice"),
    ((_TwoHeldOut(),), "2 held out"),
    ((_SharesAPhrase(), *TASKS.values()), "'pick up the red cube' of 'pick_red' is also 'shares'"),
])
def test_registry_refuses_tasks_the_suite_could_not_tell_apart_or_hold_out(suite, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tasks.build_registry(suite)
    assert tasks.build_registry([_Wave()])["wave"].max_steps == 10


def test_stack_success_needs_red_resting_on_blue() -> None:
    stack = get_task("stack_red_on_blue")
    on_top = ORIGIN + [0, 0, 2 * CUBE_HALF]
    assert stack.success(_world(red=on_top, blue=ORIGIN))
    assert not stack.success(_world(red=on_top, blue=ORIGIN, holding={"red_cube"})), "still held: not stacked"
    assert not stack.success(_world(red=on_top + [0.03, 0, 0], blue=ORIGIN)), "off the blue cube's top"
    assert not stack.success(_world(red=on_top + [0, 0, 0.02], blue=ORIGIN)), "hovering above it"
    assert not stack.success(_world(red=ORIGIN + [0.05, 0, 0], blue=ORIGIN)), "side by side on the table"


def test_pick_success_needs_red_lifted_and_held() -> None:
    pick = get_task("pick_red")
    high = ORIGIN + [0, 0, 0.1]
    assert pick.success(_world(red=high, holding={"red_cube"}))
    assert not pick.success(_world(red=high)), "thrown, not held"
    assert not pick.success(_world(red=ORIGIN + [0, 0, 0.05], holding={"red_cube"})), "held too low"
    assert not pick.success(_world(red=high, holding={"blue_cube"}))


def test_place_success_needs_blue_released_flat_inside_the_pad() -> None:
    place = get_task("place_blue_on_green")
    pad = np.array([0.4, -0.1, 0.001])
    on_pad = np.array([0.43, -0.1, CUBE_HALF])
    assert place.success(_world(blue=on_pad, pad=pad))
    assert not place.success(_world(blue=on_pad, pad=pad, holding={"blue_cube"})), "still held"
    assert not place.success(_world(blue=on_pad + [0.03, 0, 0], pad=pad)), "over the pad's rim"
    assert not place.success(_world(blue=on_pad + [0, 0, 0.01], pad=pad)), "not resting on the table"
    assert not place.success(_world(red=on_pad, blue=ORIGIN, pad=pad)), "the red cube on the pad does not count"


def test_touch_success_is_contact_with_the_ball() -> None:
    touch = get_task("touch_yellow")
    assert touch.success(_world(touching=True))
    assert not touch.success(_world(ball=np.array([0.5, 0.0, 0.3]), touching=False)), "near is not touching"


def test_every_task_sees_the_same_scene_for_a_seed(env: PandaTaskEnv) -> None:
    """Only the instruction tells the tasks apart: no task may lay the scene out its own way."""
    scenes = []
    for name in TASKS:
        env.reset(EVAL_SEED_BASE + 7, task=name)
        scenes.append(np.concatenate([env.data.qpos, env.data.mocap_pos.ravel()]))
    for scene in scenes[1:]:
        np.testing.assert_array_equal(scene, scenes[0])


def test_initialisation_spreads_the_objects_apart_within_reach(env: PandaTaskEnv) -> None:
    data = mujoco.MjData(env.model)
    for seed in range(20):
        get_task("touch_yellow").initialize_episode(env.model, data, np.random.default_rng(seed))
        xy = [data.qpos[env.model.joint(n).qposadr[0]:][:2] for n in ("red_cube", "blue_cube", "yellow_ball")]
        xy.append(data.mocap_pos[env.model.body("green_pad").mocapid[0]][:2])
        for i, p in enumerate(xy):
            assert 0.40 <= p[0] <= 0.65 and -0.22 <= p[1] <= 0.22, (seed, p)
            assert all(np.linalg.norm(p - q) > 0.12 for q in xy[i + 1:]), seed


def test_only_placing_tasks_move_their_grasp_for_a_grasp_offset(env: PandaTaskEnv) -> None:
    for name, task in TASKS.items():
        env.reset(EVAL_SEED_BASE + 2, task=name)
        centred, shifted = task.expert_plan(env), task.expert_plan(env, 0.02)
        moved = [i for i, (a, b) in enumerate(zip(centred, shifted)) if not np.array_equal(a.pos, b.pos)]
        assert moved == ([1, 2] if task.placed_object else []), name


@pytest.mark.parametrize("name, destination", [
    ("place_blue_on_green", lambda w: w.pad + [0, 0, CUBE_HALF]),
    ("stack_red_on_blue", lambda w: w.blue + [0, 0, 2 * CUBE_HALF]),
])
def test_a_placing_plan_aims_the_carried_object_at_its_destination(env: PandaTaskEnv, name: str, destination) -> None:
    env.reset(EVAL_SEED_BASE + 4, task=name)
    task, w = get_task(name), env.world_state()
    plan = task.expert_plan(env)
    np.testing.assert_allclose(plan[1].pos[:2], w.position(task.placed_object)[:2])
    put_down = [wp for wp in plan if wp.carried is not None]
    assert len(put_down) == 4 and {wp.carried for wp in put_down} == {task.placed_object}
    lowest = min(put_down, key=lambda wp: wp.pos[2])
    np.testing.assert_allclose(lowest.pos[:2], destination(w)[:2])


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_expert_closes_on_the_grasped_object_and_solves_the_task(env: PandaTaskEnv, name: str) -> None:
    task = get_task(name)
    env.reset(EVAL_SEED_BASE + 1, task=name)
    expert = ScriptedExpert(env)
    expert.reset()
    held: set[str] = set()
    ok = done = False
    while not done:
        _, _, ok, truncated, _ = env.step(expert.act())
        held |= env.world_state().holding
        done = ok or truncated
    assert ok, f"{name}: the expert's plan did not solve it"
    if task.grasped_object is not None:
        assert held == {task.grasped_object}, (name, held)
    else:  # the closed fingers pressing on the ball count as both touching it, but no cube is picked up
        assert not held & {"red_cube", "blue_cube"}, (name, held)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_grasp_offset_is_refused_for_tasks_that_place_nothing(env: PandaTaskEnv, name: str) -> None:
    env.reset(0, task=name)
    if get_task(name).placed_object is None:
        with pytest.raises(ValueError, match=f"{name!r} places nothing"):
            run_episode(env, EVAL_SEED_BASE, grasp_offset=0.02)
    else:
        assert run_episode(env, EVAL_SEED_BASE, record=True, grasp_offset=0.02)[0]
