"""The task environment: seeded determinism, the observation contract, and refused bad input."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from omni_vla_sim import tasks
from omni_vla_sim.env import EnvConfig, PandaTaskEnv


@pytest.fixture(scope="module")
def env() -> PandaTaskEnv:
    e = PandaTaskEnv("stack_red_on_blue", EnvConfig(image_size=64))
    yield e
    e.close()


def test_observation_has_the_shared_contract(env: PandaTaskEnv) -> None:
    obs = env.reset(seed=11)
    assert obs["front"].shape == obs["wrist"].shape == (64, 64, 3)
    assert obs["front"].dtype == np.uint8
    assert obs["qpos"].shape == obs["qvel"].shape == (8,)
    assert obs["instruction"] in [i.text for i in env.task.train_instructions]


def test_same_seed_gives_identical_rollouts(env: PandaTaskEnv) -> None:
    def rollout() -> tuple[np.ndarray, np.ndarray]:
        obs = env.reset(seed=42)
        q = obs["qpos"].copy()
        for k in range(10):
            q[0] += 0.01
            q[7] = 0.04 - 0.003 * k
            obs, *_ = env.step(q)
        return obs["qpos"], obs["front"]

    q1, f1 = rollout()
    q2, f2 = rollout()
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(f1, f2)
    other = env.reset(seed=43)["qpos"]
    assert not np.allclose(other, env.reset(seed=42)["qpos"])


@pytest.mark.parametrize("action, message", [
    (np.full(8, np.nan), "non-finite"),
    (np.r_[np.zeros(7), np.inf], "panda_finger_joint1"),
    (np.zeros(7), "shape"),
    (np.zeros((2, 8)), "shape"),
])
def test_bad_action_is_refused_and_leaves_env_unchanged(env: PandaTaskEnv, action, message: str) -> None:
    env.reset(seed=5)
    before = (env.data.qpos.copy(), env.data.ctrl.copy(), env.steps, env.data.time)
    with pytest.raises(ValueError, match=message):
        env.step(action)
    np.testing.assert_array_equal(env.data.qpos, before[0])
    np.testing.assert_array_equal(env.data.ctrl, before[1])
    assert (env.steps, env.data.time) == before[2:]


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "3", True])
def test_invalid_seed_is_refused(env: PandaTaskEnv, seed) -> None:
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=seed)


def test_unknown_task_and_instruction_are_refused(env: PandaTaskEnv) -> None:
    with pytest.raises(ValueError, match="unknown task 'juggle'"):
        PandaTaskEnv("juggle")
    with pytest.raises(ValueError, match="not one of task"):
        env.reset(seed=1, instruction="pick up the red cube")


def test_every_task_has_three_paraphrases_one_held_out() -> None:
    assert len(tasks.TASKS) >= 4
    texts = [i.text for t in tasks.TASKS.values() for i in t.instructions]
    assert len(texts) == len(set(texts)), "instructions must tell the tasks apart"
    for task in tasks.TASKS.values():
        assert len(task.instructions) >= 3
        assert sum(i.held_out for i in task.instructions) == 1


def test_held_out_instruction_is_never_sampled_but_can_be_asked_for(env: PandaTaskEnv) -> None:
    held = next(i for i in env.task.instructions if i.held_out)
    sampled = {env.reset(seed=s)["instruction"] for s in range(30)}
    assert held.text not in sampled and len(sampled) == len(env.task.train_instructions)
    assert env.reset(seed=1, instruction=held.text)["instruction"] == held.text


def test_success_predicates_reject_the_initial_state() -> None:
    for name in tasks.TASKS:
        e = PandaTaskEnv(name, EnvConfig(render=False))
        for seed in range(5):
            e.reset(seed)
            assert not tasks.success(name, e.world_state()), (name, seed)


def test_step_budget_truncates_the_episode() -> None:
    e = PandaTaskEnv("touch_yellow", EnvConfig(render=False))
    obs = e.reset(seed=0)
    hold = obs["qpos"].copy()
    for _ in range(e.task.max_steps - 1):
        _, _, term, trunc, _ = e.step(hold)
        assert not term and not trunc
    _, _, term, trunc, _ = e.step(hold)
    assert trunc and not term


def _headless_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    return {**env, **extra}


_RENDER_ONE_FRAME = (
    "import os\n"
    "from omni_vla_sim.env import EnvConfig, PandaTaskEnv\n"
    "e = PandaTaskEnv('pick_red', EnvConfig(image_size=32))\n"
    "obs = e.reset(seed=3)\n"
    "print(os.environ['MUJOCO_GL'], int(obs['front'].std() > 0))\n")


def test_rendering_without_a_display_or_a_chosen_backend_uses_egl() -> None:
    """A headless robot computer (no MUJOCO_GL, no DISPLAY) renders instead of dying in GLFW."""
    out = subprocess.run([sys.executable, "-c", _RENDER_ONE_FRAME], env=_headless_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["egl", "1"]


def test_a_chosen_rendering_backend_is_kept() -> None:
    out = subprocess.run([sys.executable, "-c", "import os, omni_vla_sim; print(os.environ['MUJOCO_GL'])"],
                         env=_headless_env(MUJOCO_GL="osmesa"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "osmesa"
