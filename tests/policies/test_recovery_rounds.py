"""Recovery rounds inside one training run (policies/recovery_rounds.py): the policy being trained drives
the simulator between cycles, and the expert's recoveries become training rows of the next cycle."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_vla_policies.dataset import TrainArrays
from omni_vla_policies.export import load_checkpoint
from omni_vla_policies.recovery_rounds import ROUND_SEED_STRIDE, append_arrays, collect_round, focus_weights, round_seeds
from fixtures_policy import make_tiny_checkpoint, write_synthetic_dataset
from omni_vla_policies.train import TrainConfig, last_cycle_path, train
from omni_vla_sim.dataset import read_episode
from omni_vla_sim.recovery import RECOVERY_SEED_BASE
from omni_vla_sim.tasks import EVAL_SEED_BASE

SUITE_TASKS = ["pick_red", "place_blue_on_green", "stack_red_on_blue", "touch_yellow"]  # the synthetic demos' tasks
TINY_MODEL = {"width": 32, "heads": 2, "prefix_layers": 1, "head_layers": 1, "mlp_ratio": 2,
              "cnn_channels": [8, 16, 16], "num_steps": 3, "max_prefix": 4}


def _arrays(tasks: list[str], instructions: list[str], task_index: list[int], instr_index: list[int],
            episode_index: list[int], value: float) -> TrainArrays:
    n = len(task_index)
    return TrainArrays(
        front=np.full((n, 4, 4, 3), value, np.uint8), wrist=np.full((n, 4, 4, 3), value, np.uint8),
        state=np.full((n, 8), value, np.float32), chunks=np.full((n, 2, 8), value, np.float32),
        instr_index=np.array(instr_index, np.int64), instructions=instructions,
        episode_index=np.array(episode_index, np.int64), future=np.full((n, 1, 8), value, np.float32),
        task_index=np.array(task_index, np.int64), tasks=tasks,
    )


def test_appended_rows_keep_their_phrase_task_and_episode_under_the_first_tables() -> None:
    arr = _arrays(["pick_red", "touch_yellow"], ["pick up the red cube", "touch the yellow ball"],
                  [0, 0, 1], [0, 0, 1], [0, 0, 1], 1)
    new = _arrays(["touch_yellow"], ["tap the yellow sphere", "touch the yellow ball"], [0, 0], [0, 1], [0, 1], 2)
    out = append_arrays(arr, new)
    assert len(out) == 5 and out.tasks == arr.tasks
    assert out.instructions == ["pick up the red cube", "touch the yellow ball", "tap the yellow sphere"]
    assert [out.instructions[i] for i in out.instr_index[3:]] == ["tap the yellow sphere", "touch the yellow ball"]
    assert out.task_index[3:].tolist() == [1, 1]  # touch_yellow is row 1 of the first table, not row 0
    assert out.episode_index.tolist() == [0, 0, 1, 2, 3]  # new episodes never merge with old ones
    assert (out.front[3:] == 2).all() and (out.future[:3] == 1).all()


def test_recovery_rows_of_a_task_the_dataset_lacks_are_refused_by_name() -> None:
    arr = _arrays(["pick_red"], ["pick up the red cube"], [0], [0], [0], 1)
    new = _arrays(["stack_red_on_blue"], ["stack the red cube on the blue cube"], [0], [0], [0], 2)
    with pytest.raises(ValueError, match="stack_red_on_blue"):
        append_arrays(arr, new)


def test_recovery_episodes_need_a_later_cycle_to_train_on() -> None:
    with pytest.raises(ValueError, match="needs cycles > 1"):
        TrainConfig(recovery_episodes=10, cycles=1)
    assert TrainConfig(recovery_episodes=10, cycles=2).recovery_episodes == 10


def test_a_task_the_policy_fails_more_gets_more_batch_rows_after_a_round() -> None:
    per_task = {"pick_red": {"ran": 100, "policy_succeeded": 90}, "place_blue_on_green": {"ran": 100, "policy_succeeded": 40},
                "stack_red_on_blue": {"ran": 100, "policy_succeeded": 70}, "touch_yellow": {"ran": 100, "policy_succeeded": 100}}
    w = focus_weights(per_task, 0.5)
    assert sum(w.values()) == pytest.approx(1.0)
    assert w["place_blue_on_green"] > w["stack_red_on_blue"] > w["pick_red"] > w["touch_yellow"] > 0
    assert w["place_blue_on_green"] == pytest.approx(0.5 * 0.25 + 0.5 * 0.6 / 1.0)  # failures 0.1 + 0.6 + 0.3 + 0
    assert w["touch_yellow"] == pytest.approx(0.125)  # never failed: keeps its even part only
    assert set(focus_weights(per_task, 0.0).values()) == {0.25}


def test_a_round_the_policy_finished_everywhere_keeps_the_rows_even() -> None:
    per_task = {t: {"ran": 5, "policy_succeeded": 5} for t in ("pick_red", "touch_yellow")}
    assert focus_weights(per_task, 0.9) == {"pick_red": 0.5, "touch_yellow": 0.5}


@pytest.mark.parametrize("focus, per_task, message", [
    (1.0, {"pick_red": {"ran": 5, "policy_succeeded": 1}}, r"\[0, 1\)"),
    (0.5, {"pick_red": {"ran": 0, "policy_succeeded": 0}}, "ran no episode")])
def test_focus_that_could_starve_a_task_or_divide_by_zero_is_refused(focus: float, per_task: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        focus_weights(per_task, focus)


@pytest.mark.parametrize("extra", [dict(recovery_episodes=0, cycles=2, balance_tasks=True),
                                   dict(recovery_episodes=10, cycles=2, balance_tasks=False)])
def test_recovery_focus_needs_rounds_and_balanced_batches(extra: dict) -> None:
    with pytest.raises(ValueError, match="recovery_focus"):
        TrainConfig(recovery_focus=0.5, **extra)


def test_a_recovery_focus_of_1_is_refused_by_the_config_before_a_run_starts() -> None:
    with pytest.raises(ValueError, match="less than 1"):
        TrainConfig(recovery_focus=1.0, recovery_episodes=10, cycles=2, balance_tasks=True)


def test_round_seeds_are_disjoint_and_stay_in_the_recovery_range() -> None:
    a, b = round_seeds(1, 300), round_seeds(2, 300)
    assert not set(a) & set(b)
    assert RECOVERY_SEED_BASE <= min(a) and max(b) < EVAL_SEED_BASE
    with pytest.raises(ValueError, match="at most"):
        round_seeds(1, ROUND_SEED_STRIDE + 1)
    with pytest.raises(ValueError, match="evaluation range"):
        round_seeds(25, 10)


@pytest.mark.slow
def test_a_round_runs_the_cycles_policy_and_its_recoveries_become_training_rows(tmp_path: Path) -> None:
    demos = write_synthetic_dataset(tmp_path / "demos", episodes_per_task=3, steps=30, held_out_every=3)
    out = tmp_path / "run" / "policy.pt"
    cfg = TrainConfig.model_validate(dict(
        dataset=demos, out=out, seed=3, num_threads=2, max_minutes=10.0, max_steps=45, batch_size=12, lr=3e-3,
        warmup_steps=5, ema_decay=0.9, log_every=5, save_every=0, val_fraction=0.1, embeddings="random",
        model=TINY_MODEL, cycles=3, recovery_episodes=1, recovery_workers=2, balance_tasks=True, recovery_focus=0.5))
    events: list[dict] = []
    summary = train(cfg, log=lambda s: events.append(json.loads(s)))
    start = next(e for e in events if e.get("event") == "start")
    rounds = [e for e in events if e.get("event") == "recovery_round"]
    assert [r["round"] for r in rounds] == [1, 2] and all(r["ran"] == 4 for r in rounds)  # 1 seed x 4 tasks each
    for r in rounds:
        assert {t: c["ran"] for t, c in r["per_task"].items()} == {t: 1 for t in SUITE_TASKS}
        assert sum(c["written"] for c in r["per_task"].values()) == r["written"]
        assert r["task_weights"] == pytest.approx(focus_weights(r["per_task"], 0.5))  # the next cycle's shares
    eps = []
    for r in rounds:
        files = sorted(Path(r["episodes_dir"]).rglob("*.hdf5"))
        assert len(files) == r["written"]
        round_eps = [read_episode(f) for f in files]
        assert {e.seed for e in round_eps} <= set(round_seeds(r["round"], 1))
        assert r["samples_added"] == sum(len(e.actions) for e in round_eps)
        eps += round_eps
    assert eps, "no round wrote a recovery: the expert could not finish from where the tiny policy left the arm"
    assert all(e.success for e in eps)
    assert summary["train_samples"] == start["train_samples"] + sum(r["samples_added"] for r in rounds)
    assert summary["recovery_minutes"] > 0 and summary["wall_minutes"] > summary["minutes"]
    ckpt = load_checkpoint(out)
    assert [r.get("episodes_sha256") for r in ckpt["recovery_rounds"]] == [r.get("episodes_sha256") for r in rounds]
    # The sim's phrasings the synthetic demos lack were trained on, so they are in the table with embeddings.
    assert {e.instruction for e in eps} <= set(ckpt["trained_instructions"])
    assert len(ckpt["instructions"]) == len(ckpt["instruction_embeddings"])
    last = load_checkpoint(last_cycle_path(out))  # the checkpoint is the mean of cycles 2 and 3: not the last alone
    assert any(not torch.equal(last["state_dict"][k], v) for k, v in ckpt["state_dict"].items() if v.is_floating_point())


@pytest.mark.slow
def test_a_round_rerun_keeps_only_its_own_episodes_at_the_models_image_size(tmp_path: Path) -> None:
    stale = tmp_path / "episodes" / "touch_yellow" / "touch_yellow_recovery_0999999.hdf5"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier run's episode")
    ckpt = make_tiny_checkpoint(image_size=32)  # not the default 64: the rows must follow the model
    info = collect_round(ckpt, tmp_path, 1, 1, ["touch_yellow"], "random", 1)
    assert info["ran"] == 1
    assert not stale.exists()
    files = list((tmp_path / "episodes").rglob("*.hdf5"))
    assert len(files) == info["written"]
    size = ckpt["model_config"]["image_size"]
    assert all(read_episode(f).front.shape[1:] == (size, size, 3) for f in files)  # rows the model can train on
