"""Recovery demonstrations (sim/recovery.py): the policy's states, the expert's actions."""
from __future__ import annotations

import random

import numpy as np
import pytest

from omni_vla_sim.dataset import read_episode
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.recovery import MAX_HANDOVER_FRACTION, MIN_HANDOVER, RECOVERY_SEED_BASE, recover_one
from rosutil import REPO


@pytest.mark.slow
def test_recovery_starts_where_the_policy_left_the_arm_and_the_expert_finishes_the_task(tmp_path):
    task = "pick_red"
    for seed in range(RECOVERY_SEED_BASE, RECOVERY_SEED_BASE + 6):  # some the policy finishes alone
        _, _, written, handover = recover_one((task, seed, str(tmp_path), 64, "mnn", str(REPO / "bundles" / "reference")))
        if written:
            break
    env = PandaTaskEnv(task, EnvConfig(render=False))
    assert written, "no recovery episode in 6 seeds: the expert could not finish from where the policy left the arm"
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
