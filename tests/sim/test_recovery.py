"""Recovery demonstrations (sim/recovery.py): the policy's states, the expert's actions."""
from __future__ import annotations

import random

import numpy as np
import pytest

from omni_vla_sim.dataset import read_episode
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.recovery import (
    MAX_HANDOVER_FRACTION, MIN_HANDOVER, RECOVERY_SEED_BASE, STALL_TICKS, FailureWatch, recover_one,
)
from omni_vla_sim.tasks import WorldState
from rosutil import REPO


@pytest.mark.slow
def test_recovery_starts_where_the_policy_left_the_arm_and_the_expert_finishes_the_task(tmp_path):
    task = "pick_red"
    for seed in range(RECOVERY_SEED_BASE, RECOVERY_SEED_BASE + 6):  # some the policy finishes alone
        _, _, written, handover, reason = recover_one(
            (task, seed, str(tmp_path), 64, "mnn", str(REPO / "bundles" / "reference"), "random"))
        if written:
            break
    env = PandaTaskEnv(task, EnvConfig(render=False))
    assert written, "no recovery episode in 6 seeds: the expert could not finish from where the policy left the arm"
    assert reason == "random"
    assert handover == random.Random(seed).randint(MIN_HANDOVER, int(MAX_HANDOVER_FRACTION * env.task.max_steps))
    ep = read_episode(tmp_path / task / f"{task}_recovery_{seed:07d}.hdf5")
    assert ep.success and ep.seed == seed and len(ep.actions) == len(ep.qpos) == len(ep.front)
    assert ep.front.shape[1:] == (64, 64, 3)
    start = env.reset(seed)["qpos"]
    assert np.abs(ep.qpos[0] - start).max() > 0.05  # the policy moved the arm first


def test_recovery_refuses_a_missing_bundle(tmp_path):
    from omni_vla_sim.collect import main

    with pytest.raises(SystemExit, match="no bundle"):
        main(["--recovery", str(tmp_path / "nope"), "--episodes", "1", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_recovery_seeds_outside_their_range_are_refused(tmp_path):
    from omni_vla_sim.collect import main

    for first in (5, 999_999):  # demonstration seeds; evaluation seeds
        with pytest.raises(SystemExit, match="recovery seeds must lie"):
            main(["--recovery", str(REPO / "bundles" / "reference"), "--first-seed", str(first), "--episodes", "2",
                  "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def _world(grip, opening: float, holding=()) -> WorldState:
    z = np.zeros(3)
    return WorldState(red=z, blue=z, ball=z, pad=z, grip=np.asarray(grip, float), gripper_opening=opening,
                      touching_ball=False, holding=frozenset(holding))


def test_failure_watch_names_a_grasp_that_closed_on_nothing():
    watch = FailureWatch("place_blue_on_green")
    assert watch.check(_world([0.5, 0, 0.03], 0.04)) is None  # open, descending
    assert watch.check(_world([0.5, 0, 0.03], 0.02, {"blue_cube"})) is None  # closed on the cube
    assert watch.check(_world([0.5, 0, 0.03], 0.005, {"red_cube"})) == "missed_grasp"  # wrong cube is not the grasp
    assert FailureWatch("touch_yellow").check(_world([0.5, 0, 0.03], 0.0)) is None  # closed by design there


def test_failure_watch_names_a_stall_only_after_a_full_second_in_place():
    watch = FailureWatch("pick_red")
    for i in range(STALL_TICKS):
        assert watch.check(_world([0.5, 0.0005 * i, 0.1], 0.04)) is None  # still inside the window
    assert watch.check(_world([0.5, 0.0, 0.1], 0.04)) == "stall"
    moving = FailureWatch("pick_red")
    assert all(moving.check(_world([0.5, 0.002 * i, 0.1], 0.04)) is None for i in range(3 * STALL_TICKS))


def test_failure_handover_hands_over_at_a_failure_sign_or_the_latest_tick(tmp_path):
    task = "place_blue_on_green"
    bundle = str(REPO / "bundles" / "reference")
    latest = int(MAX_HANDOVER_FRACTION * PandaTaskEnv(task, EnvConfig(render=False)).task.max_steps)
    for seed in range(RECOVERY_SEED_BASE, RECOVERY_SEED_BASE + 4):
        _, _, written, handover, reason = recover_one((task, seed, str(tmp_path), 64, "mnn", bundle, "failure"))
        if reason == "policy_succeeded":
            assert not written and handover <= latest
        else:
            assert reason in ("missed_grasp", "stall", "timeout")
            assert MIN_HANDOVER <= handover <= latest and (reason != "timeout" or handover == latest)
    with pytest.raises(ValueError, match="handover rule 'sometimes'"):
        recover_one((task, RECOVERY_SEED_BASE, str(tmp_path), 64, "mnn", bundle, "sometimes"))
