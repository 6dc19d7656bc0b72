"""Training on the synthetic demo fixture: the loss falls, and the checkpoint records what it came from."""
from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pytest
import torch

from omni_vla_policies.dataset import TrainArrays, build_arrays, dataset_sha256, read_episodes
from omni_vla_policies.export import load_checkpoint
from fixtures_policy import TASKS, write_synthetic_dataset
from omni_vla_policies.train import Batches, TrainConfig, cycle_at, load_config, lr_at, train
from omni_vla_sim.dataset import read_episode, write_episode

TINY_MODEL = {"width": 32, "heads": 2, "prefix_layers": 1, "head_layers": 1, "mlp_ratio": 2,
              "cnn_channels": [8, 16, 16], "num_steps": 3, "max_prefix": 4}


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_dataset(tmp_path_factory.mktemp("demos"), episodes_per_task=3, steps=30, held_out_every=3)


def tiny_config(demos: Path, out: Path, **kw: object) -> TrainConfig:
    base = dict(dataset=demos, out=out, seed=3, num_threads=2, max_minutes=10.0, max_steps=60, batch_size=12,
                flow_repeats=2, lr=3e-3, warmup_steps=5, ema_decay=0.9, log_every=5, save_every=0,
                val_fraction=0.1, embeddings="random", model=TINY_MODEL)
    base.update(kw)
    return TrainConfig.model_validate(base)


def test_training_loss_falls_and_checkpoint_records_provenance(demos: Path, tmp_path: Path) -> None:
    # Held-out flow loss with fixed noise/time draws: comparable across runs (single-batch losses are noisy).
    before = train(tiny_config(demos, tmp_path / "init.pt", max_steps=1), log=lambda s: None)["val_loss"]
    out = tmp_path / "policy.pt"
    summary = train(tiny_config(demos, out), log=lambda s: None)
    assert summary["val_loss"] < 0.9 * before, f"held-out loss did not fall: {before:.3f} -> {summary['val_loss']:.3f}"
    ckpt = load_checkpoint(out)
    assert ckpt["seed"] == 3
    assert ckpt["dataset_sha256"] == dataset_sha256(demos)
    assert ckpt["train_config"]["model"]["width"] == 32
    assert ckpt["steps"] == summary["steps"] == 60
    assert out.stat().st_size < 5e6


def test_compiled_bfloat16_training_still_learns_and_saves_float32_weights(demos: Path, tmp_path: Path) -> None:
    # The path config/policy.yaml trains with: bf16 must stay inside the loss, never reach the weights
    # the exporters and runtimes read.
    before = train(tiny_config(demos, tmp_path / "init.pt", max_steps=1), log=lambda s: None)["val_loss"]
    out = tmp_path / "policy.pt"
    # Compiling takes minutes on a loaded 2-core machine: the time cap must not cut the 60 steps short.
    summary = train(tiny_config(demos, out, compile=True, bf16_autocast=True, max_minutes=60.0), log=lambda s: None)
    assert summary["steps"] == 60, summary
    assert summary["val_loss"] < 0.9 * before, f"held-out loss did not fall: {before:.3f} -> {summary['val_loss']:.3f}"
    state = load_checkpoint(out)["state_dict"]
    assert {v.dtype for v in state.values() if v.is_floating_point()} == {torch.float32}


def test_periodic_saves_create_an_output_directory_that_did_not_exist(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "round3" / "policy.pt"
    train(tiny_config(demos, out, max_steps=2, save_every=1), log=lambda s: None)
    assert load_checkpoint(out)["steps"] == 2


def test_held_out_phrasings_are_in_the_table_but_never_trained(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy.pt"
    train(tiny_config(demos, out, max_steps=2), log=lambda s: None)
    ckpt = load_checkpoint(out)
    assert sorted(ckpt["trained_instructions"]) == sorted(TASKS.values())
    assert ckpt["held_out_instructions"] and all(t.startswith("please ") for t in ckpt["held_out_instructions"])
    assert len(ckpt["instructions"]) == len(ckpt["instruction_embeddings"])
    episodes, _ = read_episodes(demos)
    arr = build_arrays(episodes, horizon=16)
    assert set(arr.instructions) == set(TASKS.values())  # held-out demos relabelled, not dropped
    assert len(arr) == sum(len(e.actions) for e in episodes)
    for k, ep in enumerate(episodes):  # every row knows its task (what balanced batches draw by)
        assert {arr.tasks[t] for t in arr.task_index[arr.episode_index == k]} == {ep.task}


def test_normalisation_statistics_travel_in_the_model_buffers(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy.pt"
    train(tiny_config(demos, out, max_steps=1), log=lambda s: None)
    ckpt = load_checkpoint(out)
    sd = ckpt["state_dict"]
    for k in ("state_mean", "state_std", "action_mean", "action_std"):
        assert torch.allclose(sd[f"norm.{k}"], torch.tensor(ckpt["normalization"][k], dtype=torch.float32))
    episodes, _ = read_episodes(demos)
    qpos = np.concatenate([e.qpos for e in episodes])
    np.testing.assert_allclose(ckpt["normalization"]["state_mean"], qpos.mean(0), atol=1e-5)


def test_config_file_and_overrides_are_validated(tmp_path: Path) -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "config" / "policy.yaml", {"max_steps": 7, "model.width": 64})
    assert cfg.max_steps == 7 and cfg.model.width == 64 and cfg.model.horizon == 16
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_sise: 3\n")
    with pytest.raises(Exception, match="batch_sise"):
        load_config(bad, {})


def test_reader_refuses_another_dataset_format(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / "x.hdf5", "w") as f:
        f.create_group("data").attrs["format"] = "robomimic/0"
    with pytest.raises(ValueError, match="dataset format"):
        read_episodes(tmp_path)


def test_future_positions_are_gathered_per_offset_and_clipped_at_the_episode_end(demos: Path) -> None:
    episodes, _ = read_episodes(demos)
    arr = build_arrays(episodes, 16, aux_offsets=(4, -1))
    ep = episodes[0]  # the first episode's rows come first
    t_len = len(ep.qpos)
    np.testing.assert_array_equal(arr.future[0, 0], ep.qpos[4])
    np.testing.assert_array_equal(arr.future[t_len - 2, 0], ep.qpos[t_len - 1])  # clipped, not wrapped
    np.testing.assert_array_equal(arr.future[:t_len, 1], np.repeat(ep.qpos[-1:], t_len, axis=0))


def test_auxiliary_future_head_trains_with_scaled_targets_and_stays_out_of_the_bundle(demos: Path,
                                                                                     tmp_path: Path) -> None:
    from omni_vla_policies.export import export_bundle, policy_from_checkpoint

    model = {**TINY_MODEL, "aux_offsets": [4, -1]}
    out = tmp_path / "aux.pt"
    train(tiny_config(demos, out, model=model, aux_weight=1.0, state_dropout=0.3, max_steps=10), log=lambda s: None)
    ckpt = load_checkpoint(out)
    policy = policy_from_checkpoint(ckpt)
    assert policy.aux_scale.shape == (2, 8) and not torch.allclose(policy.aux_scale, torch.ones(2, 8))
    bundle = export_bundle(ckpt, tmp_path / "bundle", backends=("onnx",))
    import onnx

    names = {i.name for i in onnx.load(str(bundle / "prefix.onnx")).graph.initializer}
    assert names and not any("aux" in n for n in names)
    # A checkpoint without the head still initialises a run that adds it.
    plain = tmp_path / "plain.pt"
    train(tiny_config(demos, plain, max_steps=2), log=lambda s: None)
    train(tiny_config(demos, tmp_path / "again.pt", model=model, aux_weight=1.0, init_from=plain, max_steps=2),
          log=lambda s: None)


def test_continuing_on_a_grown_dataset_keeps_the_weights_normalization(demos: Path, tmp_path: Path) -> None:
    import shutil

    model = {**TINY_MODEL, "aux_offsets": [4, -1]}
    first = tmp_path / "first.pt"
    train(tiny_config(demos, first, model=model, aux_weight=1.0, max_steps=2), log=lambda s: None)
    grown = tmp_path / "grown"
    shutil.copytree(demos, grown)
    src = sorted(grown.rglob("*.hdf5"))[0]
    ep = read_episode(src)
    ep.qpos = ep.qpos + np.float32(0.5)  # a recovery-like episode far from the others: stats would move
    write_episode(src.with_name("extra_recovery.hdf5"), ep, [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"])
    again = tmp_path / "again.pt"
    train(tiny_config(grown, again, model=model, aux_weight=1.0, init_from=first, max_steps=2), log=lambda s: None)
    a, b = load_checkpoint(first), load_checkpoint(again)
    assert a["dataset_sha256"] != b["dataset_sha256"]
    assert a["normalization"] == b["normalization"]
    fresh = tmp_path / "fresh.pt"
    train(tiny_config(grown, fresh, model=model, aux_weight=1.0, max_steps=1), log=lambda s: None)
    assert load_checkpoint(fresh)["normalization"]["state_mean"] != a["normalization"]["state_mean"]


def _skewed_arrays(n_major: int, n_minor: int) -> TrainArrays:
    n = n_major + n_minor
    tasks = np.r_[np.zeros(n_major, np.int64), np.ones(n_minor, np.int64)]
    return TrainArrays(front=np.zeros((n, 8, 8, 3), np.uint8), wrist=np.zeros((n, 8, 8, 3), np.uint8),
                       state=np.zeros((n, 2), np.float32), chunks=np.zeros((n, 4, 2), np.float32),
                       instr_index=tasks.copy(), instructions=["a", "b"], episode_index=np.arange(n),
                       task_index=tasks, tasks=["major", "minor"])


@pytest.mark.parametrize("balance, minor_share", [(True, 0.5), (False, 0.1)])
def test_balanced_batches_draw_each_task_equally_however_skewed_the_dataset(balance: bool, minor_share: float) -> None:
    arr = _skewed_arrays(900, 100)
    cfg = TrainConfig(balance_tasks=balance, model={"max_prefix": 2})
    idx = np.arange(len(arr))[::2]  # a train split: only these rows may be drawn
    batches = Batches(arr, idx, torch.zeros(2, 3), cfg, seed=0)
    drawn = np.concatenate([batches.rows(64) for _ in range(200)])
    assert np.isin(drawn, idx).all()
    assert abs(np.mean(arr.task_index[drawn] == 1) - minor_share) < 0.03


def test_task_weights_set_each_tasks_share_of_the_batch_rows() -> None:
    arr = _skewed_arrays(900, 100)
    cfg = TrainConfig(balance_tasks=True, task_weights={"minor": 3.0}, model={"max_prefix": 2})
    batches = Batches(arr, np.arange(len(arr)), torch.zeros(2, 3), cfg, seed=0)
    drawn = np.concatenate([batches.rows(64) for _ in range(200)])
    assert abs(np.mean(arr.task_index[drawn] == 1) - 0.75) < 0.03


def test_a_batchers_own_task_weights_override_the_configs() -> None:
    arr = _skewed_arrays(900, 100)
    cfg = TrainConfig(balance_tasks=True, task_weights={"minor": 3.0}, model={"max_prefix": 2})
    batches = Batches(arr, np.arange(len(arr)), torch.zeros(2, 3), cfg, seed=0, task_weights={"major": 0.8, "minor": 0.2})
    drawn = np.concatenate([batches.rows(64) for _ in range(200)])
    assert abs(np.mean(arr.task_index[drawn] == 1) - 0.2) < 0.03


@pytest.mark.parametrize("weights, balance, message", [
    ({"mnior": 2.0}, True, "mnior"), ({"minor": 0.0}, True, "must be > 0"), ({"minor": 2.0}, False, "balance_tasks")])
def test_task_weights_that_cannot_apply_are_refused_by_name(weights: dict, balance: bool, message: str) -> None:
    cfg = TrainConfig(balance_tasks=balance, task_weights=weights, model={"max_prefix": 2})
    with pytest.raises(ValueError, match=message):
        Batches(_skewed_arrays(90, 10), np.arange(100), torch.zeros(2, 3), cfg, seed=0)


def test_later_cycles_restart_the_learning_rate_and_each_ends_low() -> None:
    cfg = TrainConfig(lr=1e-3, warmup_steps=30, cycles=3, base_fraction=0.5, restart_lr_scale=0.5)
    assert [cycle_at(cfg, p)[0] for p in (0.0, 0.49, 0.5, 0.74, 0.76, 1.0)] == [0, 0, 1, 1, 2, 2]
    assert lr_at(cfg, 1000, 0.499) < 0.06e-3  # end of the base cycle: 5% of the peak
    assert lr_at(cfg, 1000, 0.5, cycle_step=0) == pytest.approx(0.5e-3 / 10)  # restart: a warm-up a third as long
    assert lr_at(cfg, 1100, 0.51, cycle_step=100) == pytest.approx(0.5e-3, rel=0.01)
    assert lr_at(cfg, 2000, 0.999, cycle_step=500) < 0.03e-3
    assert lr_at(TrainConfig(lr=1e-3, warmup_steps=30), 1000, 0.5) == pytest.approx(0.525e-3)  # one cycle: plain cosine


def test_cycled_training_averages_the_later_cycles_snapshots_and_still_learns(demos: Path, tmp_path: Path) -> None:
    before = train(tiny_config(demos, tmp_path / "init.pt", max_steps=1), log=lambda s: None)["val_loss"]
    events: list[dict] = []
    out = tmp_path / "soup.pt"
    summary = train(tiny_config(demos, out, cycles=3, base_fraction=0.5), log=lambda s: events.append(json.loads(s)))
    ends = [e for e in events if e.get("event") == "cycle_end"]
    assert [(e["cycle"], e["snapshots"]) for e in ends] == [(0, 0), (1, 1), (2, 2)]
    assert summary["averaged_snapshots"] == 2
    lr = {e["step"]: e["lr"] for e in events if "lr" in e}
    assert lr[35] > 3 * lr[30]  # the base cycle ends at step 30; the second began at its (restarted) peak
    assert summary["val_loss"] < 0.9 * before
    assert load_checkpoint(out)["final"] is True


def test_extra_ema_tracks_are_saved_beside_the_checkpoint_with_their_own_weights(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy.pt"
    # Both tracks start on the (1+step)/(10+step) warm-up; past step 9 the main track's 0.5 caps it.
    summary = train(tiny_config(demos, out, ema_decay=0.5, extra_ema_decays=[0.99], save_every=20), log=lambda s: None)
    main, slow = load_checkpoint(out), load_checkpoint(tmp_path / "policy_ema0.99.pt")
    assert (main["ema_decay"], slow["ema_decay"]) == (0.5, 0.99)
    assert slow["steps"] == main["steps"] == 60 and slow["final"] is True
    # A slower average lags further behind the trained weights: the tracks must really differ.
    diff = max(float((main["state_dict"][k] - slow["state_dict"][k]).abs().max()) for k in main["state_dict"]
               if main["state_dict"][k].is_floating_point())
    assert diff > 1e-3
    assert "val_loss_ema0.99" in summary


@pytest.mark.parametrize("decays", [[0.9], [0.99, 0.99], [1.0]])
def test_extra_ema_decays_that_repeat_or_leave_0_1_are_refused(decays: list[float]) -> None:
    with pytest.raises(ValueError, match="extra_ema_decays"):
        TrainConfig(ema_decay=0.9, extra_ema_decays=decays)
