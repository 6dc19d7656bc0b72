"""Train the reference flow-matching VLA on recorded demonstrations (CPU, time-budgeted).

    python -m omni_vla_policies.train --config config/policy.yaml --dataset data/demos --out runs/policy/policy.pt

Each step: a batch of observations, their H-step action chunks and instruction embeddings (MiniLM,
computed once per distinct instruction); prefix conditioning draws d ~ U{0..max_prefix} pinned rows
per sample; `flow_repeats` noise/time draws share one encoder pass. Saves an EMA-weight checkpoint
(seed, config, dataset sha256, normalisation statistics, instruction table) atomically. With
`recovery_episodes`, the policy makes recovery data between cycles (policies/recovery_rounds.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from copy import deepcopy
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from omni_vla.tools.errors import UsageError, existing_dir, existing_file, explain, positive_int
from omni_vla.tools.outputs import output_dir
from omni_vla_policies.dataset import TrainArrays, build_arrays, dataset_sha256, normalization_stats, read_episodes
from omni_vla_policies.export import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint, with_task_instructions
from omni_vla_policies.model import ModelConfig, VLAPolicy, count_params
from omni_vla_policies.recovery_rounds import add_round_rows, collect_round, focus_weights
from omni_vla_policies.text_encoder import encode_texts, random_embeddings


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: Path = Path("data/demos")
    out: Path = Path("runs/policy/policy.pt")
    seed: int = 0
    num_threads: int = 2
    max_minutes: float = Field(60.0, gt=0)
    max_steps: int = Field(20000, ge=1)
    batch_size: int = Field(64, ge=1)
    flow_repeats: int = Field(2, ge=1)
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_steps: int = 300
    ema_decay: float = Field(0.999, ge=0, lt=1)
    extra_ema_decays: list[float] = Field(default_factory=list, description=(
        "more EMA tracks from the same run, each saved as <out stem>_ema<decay>.pt: one hour compares several decays; "
        "with cycles > 1 only the main track is souped"))
    grad_clip: float = 1.0
    val_fraction: float = Field(0.05, ge=0, lt=1)
    augment_shift_px: int = 4
    state_dropout: float = Field(0.0, ge=0, lt=1, description="samples whose backbone does not see the joint state")
    aux_weight: float = Field(0.0, ge=0, description="weight of the future-joint-position regression (model.aux_offsets)")
    log_every: int = 50
    save_every: int = 1000
    control_rate_hz: float = 20.0
    only_success: bool = True
    balance_tasks: bool = Field(False, description="draw every batch row's task uniformly (recovery rounds skew the dataset)")
    task_weights: dict[str, float] = Field(default_factory=dict, description="with balance_tasks: relative share of batch rows per task (default 1)")
    bf16_autocast: bool = Field(False, description="run the loss's matmuls/convs in bfloat16 (weights, optimizer, EMA stay float32)")
    compile: bool = Field(False, description="torch.compile the training loss: 1-2 min of compiling at the first step")
    cycles: int = Field(1, ge=1, description="cosine cycles; with > 1 the checkpoint is the mean of the EMA at the end of cycles 2.. (snapshot soup)")
    base_fraction: float = Field(0.5, gt=0, lt=1, description="share of the budget in the first cycle when cycles > 1")
    restart_lr_scale: float = Field(0.75, gt=0, le=1, description="peak LR of cycles 2.. relative to lr")
    recovery_episodes: int = Field(0, ge=0, description=(
        "per task: at the end of every cycle but the last, the EMA policy runs this many recovery episodes "
        "(sim/recovery.py) and the written ones join the training rows; needs cycles > 1"))
    recovery_handover: Literal["random", "failure"] = "random"
    recovery_workers: int = Field(2, ge=1, description="simulator processes while the training clock is paused")
    recovery_focus: float = Field(0.0, ge=0, lt=1, description=(
        "after each round, this share of the batch rows goes to tasks in proportion to the round's failures "
        "(the rest evenly); needs recovery_episodes and balance_tasks, replaces task_weights from the first round; "
        "0.5 with failure handovers: no gain in one hour (docs/decisions/0008)"))
    model: ModelConfig = ModelConfig()
    embeddings: str = Field("minilm", pattern="^(minilm|random)$")  # random: tests only (no MiniLM load)
    init_from: Path | None = None  # continue from a checkpoint's (EMA) weights; fresh optimizer and warm-up

    @model_validator(mode="after")
    def _distinct_ema_tracks(self) -> "TrainConfig":
        d = self.extra_ema_decays
        if any(not 0 < x < 1 or x == self.ema_decay for x in d) or len(set(d)) != len(d):
            raise ValueError(f"extra_ema_decays: each must be in (0, 1), distinct, and not ema_decay {self.ema_decay}; got {d}")
        return self

    @model_validator(mode="after")
    def _recovery_needs_cycles(self) -> "TrainConfig":
        if self.recovery_episodes and self.cycles < 2:
            raise ValueError(f"recovery_episodes: {self.recovery_episodes} needs cycles > 1 (rounds are collected between cycles)")
        if self.recovery_focus and not (self.recovery_episodes and self.balance_tasks):
            raise ValueError(f"recovery_focus: {self.recovery_focus} needs recovery_episodes > 0 and balance_tasks: true "
                             "(it shares batch rows between tasks by what a round measured)")
        return self


def extra_ema_path(out: Path, decay: float) -> Path:
    """Where the EMA track of `decay` is saved next to the main checkpoint."""
    return out.with_name(f"{out.stem}_ema{decay:g}{out.suffix}")


def last_cycle_path(out: Path) -> Path:
    """Where the EMA at the end of the last cycle is saved when the checkpoint is a snapshot soup."""
    return out.with_name(f"{out.stem}_last_cycle{out.suffix}")


def load_config(path: Path | None, overrides: dict) -> TrainConfig:
    raw = yaml.safe_load(path.read_text()) if path else {}
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ValueError(f"expected a mapping of training settings, got a YAML {type(raw).__name__}")
    model_over = {k[6:]: v for k, v in overrides.items() if k.startswith("model.")}
    raw.update({k: v for k, v in overrides.items() if not k.startswith("model.") and v is not None})
    if model_over:
        raw["model"] = {**raw.get("model", {}), **model_over}
    return TrainConfig.model_validate(raw)


def augment(img: torch.Tensor, shift: int, gen: torch.Generator) -> torch.Tensor:
    """Random translation by up to `shift` px (border padding) and brightness x U(0.9, 1.1)."""
    b = img.shape[0]
    if shift > 0:
        theta = torch.zeros(b, 2, 3)
        theta[:, 0, 0] = theta[:, 1, 1] = 1.0
        theta[:, :, 2] = (torch.rand(b, 2, generator=gen) * 2 - 1) * (2 * shift / img.shape[-1])
        grid = torch.nn.functional.affine_grid(theta, list(img.shape), align_corners=False)
        img = torch.nn.functional.grid_sample(img, grid, padding_mode="border", align_corners=False)
    scale = 0.9 + 0.2 * torch.rand(b, 1, 1, 1, generator=gen)
    return (img * scale).clamp_(0.0, 1.0)


def to_images(u8: np.ndarray) -> torch.Tensor:
    """uint8 [B,H,W,3] -> float32 [B,3,H,W] in [0,1] (the exported graphs' image contract)."""
    return torch.from_numpy(u8).permute(0, 3, 1, 2).float().div_(255.0)


class Batches:
    def __init__(self, arr: TrainArrays, idx: np.ndarray, emb: torch.Tensor, cfg: TrainConfig, seed: int,
                 task_weights: dict[str, float] | None = None) -> None:
        """`task_weights`: this batcher's shares (a recovery round's focus); default `cfg.task_weights`."""
        self.arr, self.idx, self.emb, self.cfg = arr, idx, emb, cfg
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator().manual_seed(seed)
        weights = cfg.task_weights if task_weights is None else task_weights
        unknown = sorted(set(weights) - set(arr.tasks))
        if unknown:
            raise ValueError(f"task_weights: {unknown} not among the dataset's tasks {arr.tasks}")
        if any(w <= 0 for w in weights.values()):
            raise ValueError(f"task_weights: every weight must be > 0, got {weights}")
        if weights and not cfg.balance_tasks:
            raise ValueError("task_weights needs balance_tasks: true (it shares batch rows between tasks)")
        groups = [(idx[arr.task_index[idx] == t], weights.get(name, 1.0)) for t, name in enumerate(arr.tasks)]
        kept = [(g, w) for g, w in groups if len(g)] if cfg.balance_tasks else []
        self.groups = [g for g, _ in kept]
        share = np.array([w for _, w in kept])
        self.share = share / share.sum() if len(share) else share

    def rows(self, batch_size: int) -> np.ndarray:
        """Sorted sample rows of one batch: uniform over rows, or over tasks first (`balance_tasks`, `task_weights`)."""
        if self.groups:
            counts = self.rng.multinomial(batch_size, self.share)
            return np.sort(np.concatenate([self.rng.choice(g, size=c) for g, c in zip(self.groups, counts)]))
        return np.sort(self.rng.choice(self.idx, size=min(batch_size, len(self.idx)), replace=len(self.idx) < batch_size))

    def sample(self, batch_size: int, train: bool = True) -> tuple[torch.Tensor, ...]:
        i = self.rows(batch_size)
        a = self.arr
        front, wrist = to_images(a.front[i]), to_images(a.wrist[i])
        if train:
            front = augment(front, self.cfg.augment_shift_px, self.gen)
            wrist = augment(wrist, self.cfg.augment_shift_px, self.gen)
        d = torch.from_numpy(self.rng.integers(0, self.cfg.model.max_prefix + 1, len(i)))
        future = torch.from_numpy(a.future[i]) if a.future is not None else None
        return (front, wrist, torch.from_numpy(a.state[i]), self.emb[torch.from_numpy(a.instr_index[i])],
                torch.from_numpy(a.chunks[i]), d, future)


def cycle_at(cfg: TrainConfig, progress: float) -> tuple[int, float]:
    """(cycle index, progress within it): the first cycle spans base_fraction, the others share the rest."""
    progress = min(max(progress, 0.0), 1.0)
    if cfg.cycles == 1:
        return 0, progress
    if progress < cfg.base_fraction:
        return 0, progress / cfg.base_fraction
    width = (1.0 - cfg.base_fraction) / (cfg.cycles - 1)
    k = min(int((progress - cfg.base_fraction) / width), cfg.cycles - 2)
    return k + 1, min((progress - cfg.base_fraction - k * width) / width, 1.0)


def lr_at(cfg: TrainConfig, step: int, progress: float, cycle_step: int | None = None) -> float:
    """Warm-up, then cosine to 5% of the peak in each cycle; later cycles restart at restart_lr_scale x lr
    with a warm-up a third as long (`cycle_step`: steps since the cycle began)."""
    cycle, q = cycle_at(cfg, progress)
    peak = cfg.lr if cycle == 0 else cfg.lr * cfg.restart_lr_scale
    since, warm = (step, cfg.warmup_steps) if cycle == 0 or cycle_step is None else (cycle_step, max(cfg.warmup_steps // 3, 1))
    if since < warm:
        return peak * (since + 1) / warm
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * q)))


def split_episodes(arr: TrainArrays, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    eps = np.unique(arr.episode_index)
    rng = np.random.default_rng(seed)
    n_val = int(round(frac * len(eps))) if len(eps) > 1 else 0
    val_eps = set(rng.choice(eps, size=n_val, replace=False).tolist()) if n_val else set()
    is_val = np.isin(arr.episode_index, list(val_eps))
    return np.nonzero(~is_val)[0], np.nonzero(is_val)[0]


def instruction_embeddings(texts: list[str], kind: str, dim: int) -> np.ndarray:
    if kind == "random":
        return random_embeddings(texts, dim)
    return encode_texts(texts)


def train(cfg: TrainConfig, log=print) -> dict:
    """Run training; returns a summary (also stored in the checkpoint)."""
    t_start = time.monotonic()
    # Before the data is read: a missing or unwritable output directory must not surface at the first
    # periodic save, minutes into the run.
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(cfg.out.parent, os.W_OK):
        raise PermissionError(f"out: cannot write into {cfg.out.parent}")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    mcfg = cfg.model
    episodes, joint_names = read_episodes(cfg.dataset)
    arr = build_arrays(episodes, mcfg.horizon, only_success=cfg.only_success, aux_offsets=mcfg.aux_offsets)
    # The bundle's lookup table also carries the held-out phrasings (never trained on), so the robot
    # can embed them without the text encoder; training indexes only the first len(arr.instructions).
    held_out = sorted({e.instruction for e in episodes} - set(arr.instructions))
    table = arr.instructions + held_out
    del episodes
    ds_hash = dataset_sha256(cfg.dataset)
    stats = normalization_stats(arr, mcfg.action_mode)
    emb_np = instruction_embeddings(table, cfg.embeddings, mcfg.embedding_dim)
    emb = torch.from_numpy(emb_np[: len(arr.instructions)])
    train_idx, val_idx = split_episodes(arr, cfg.val_fraction, cfg.seed)
    model = VLAPolicy(mcfg)
    if cfg.init_from is not None:
        init = load_checkpoint(cfg.init_from)
        ours = {k: v for k, v in mcfg.to_dict().items() if k != "aux_offsets"}
        if {k: v for k, v in init["model_config"].items() if k != "aux_offsets"} != ours:
            raise ValueError(f"{cfg.init_from}: model config {init['model_config']} differs from {mcfg.to_dict()}")
        missing, unexpected = model.load_state_dict(init["state_dict"], strict=False)
        if unexpected or any(not k.startswith("aux_") for k in missing):
            raise ValueError(f"{cfg.init_from}: weights do not match (missing {missing}, unexpected {unexpected})")
        stats = init["normalization"]  # the weights were fitted to these, even if the dataset grew since
    model.norm.set(stats)
    if arr.future is not None:  # per-offset, per-joint scale of how far the arm goes: unit-variance targets
        delta = arr.future - arr.state[:, None, :]
        model.aux_scale.copy_(torch.from_numpy(np.maximum(delta.std(axis=0), 1e-3).astype(np.float32)))
    ema = deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    tracks = {d: deepcopy(ema) for d in cfg.extra_ema_decays}
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "pos" in n or "type" in n else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95), fused=True)  # 1.8 ms/step against 9.2 for the default loop
    batches = Batches(arr, train_idx, emb, cfg, cfg.seed)
    val_batches = Batches(arr, val_idx, emb, cfg, cfg.seed + 1) if len(val_idx) else None
    log(json.dumps({"event": "start", "params": count_params(model), "samples": len(arr), "train_samples": int(len(train_idx)),
                    "val_samples": int(len(val_idx)), "instructions": arr.instructions, "held_out_instructions": held_out, "dataset_sha256": ds_hash,
                    "setup_s": round(time.monotonic() - t_start, 1)}))
    budget = cfg.max_minutes * 60.0
    t0 = time.monotonic()
    history: list[dict] = []
    running = None
    step = 0
    cfg_dump = json.loads(cfg.model_dump_json())

    def checkpoint(final: bool, net: VLAPolicy | None = None, decay: float | None = None) -> dict:
        return {
            "format": CHECKPOINT_FORMAT, "model_config": mcfg.to_dict(), "state_dict": (net or ema).state_dict(),
            "ema_decay": decay or cfg.ema_decay,
            "normalization": stats, "joint_names": joint_names, "control_rate_hz": cfg.control_rate_hz,
            "instructions": table, "instruction_embeddings": emb_np, "trained_instructions": arr.instructions,
            "held_out_instructions": held_out, "seed": cfg.seed,
            "dataset_sha256": ds_hash, "train_config": cfg_dump, "steps": step, "final": final,
            "final_loss": running, "history": history, "torch_version": torch.__version__,
            "recovery_rounds": rounds,
        }

    # Measured on this 2-core box (docs/decisions/0008): eager 287 ms/step, bf16 212, compiled alone 318,
    # compiled + bf16 133; only the combination pays.
    loss_fn = torch.compile(model.loss) if cfg.compile else model.loss
    # Snapshot soup: the recovery lineage's mean of warm-restarted rounds beat its last round by 9 points
    # (docs/decisions/0008); the EMA at the end of each later cycle is one ingredient. Within one hour on the same
    # data alone it lost 9 points to a single cosine; with a recovery round before each later cycle it is what
    # config/policy.yaml trains with (results/one_hour/validation.json).
    soup: list[dict[str, torch.Tensor]] = []
    cycle, cycle_start = 0, 0
    rounds: list[dict] = []

    def end_cycle() -> None:
        if cycle > 0:
            soup.append({k: v.detach().clone() for k, v in ema.state_dict().items()})
        log(json.dumps({"event": "cycle_end", "cycle": cycle, "step": step, "snapshots": len(soup)}))

    while step < cfg.max_steps:
        elapsed = time.monotonic() - t0
        if elapsed > budget:
            break
        progress = max(step / cfg.max_steps, elapsed / budget)
        now, _ = cycle_at(cfg, progress)
        if now != cycle:
            end_cycle()
            if cfg.recovery_episodes:
                paused = time.monotonic()
                ckpt = with_task_instructions(checkpoint(False), lambda texts: instruction_embeddings(texts, cfg.embeddings, mcfg.embedding_dim))
                info = collect_round(ckpt, cfg.out.parent / f"{cfg.out.stem}_recovery" / f"round{cycle + 1}", cycle + 1,
                                     cfg.recovery_episodes, arr.tasks, cfg.recovery_handover, cfg.recovery_workers)
                n0 = len(arr)
                arr, table, emb_np = add_round_rows(arr, held_out, ckpt, info, mcfg.horizon, mcfg.aux_offsets)
                emb = torch.from_numpy(emb_np[: len(arr.instructions)])
                train_idx = np.concatenate([train_idx, np.arange(n0, len(arr))])  # recovery rows train, never validate
                if cfg.recovery_focus:
                    info["task_weights"] = focus_weights(info["per_task"], cfg.recovery_focus)
                batches = Batches(arr, train_idx, emb, cfg, cfg.seed + 10 + cycle, info.get("task_weights"))
                val_batches = Batches(arr, val_idx, emb, cfg, cfg.seed + 1) if len(val_idx) else None
                rounds.append(info)
                log(json.dumps({"event": "recovery_round", **info, "train_samples": int(len(train_idx))}))
                t0 += time.monotonic() - paused  # the schedule and the budget count training time only
            cycle, cycle_start = now, step
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step, progress, step - cycle_start)
        model.train()
        front, wrist, state, instr, chunks, d, future = batches.sample(cfg.batch_size)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            loss = loss_fn(front, wrist, state, instr, chunks, d, repeats=cfg.flow_repeats,
                           state_dropout=cfg.state_dropout, future=future, aux_weight=cfg.aux_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        with torch.no_grad():
            params = list(model.parameters())
            for net, decay in [(ema, cfg.ema_decay), *((t, d) for d, t in tracks.items())]:
                torch._foreach_lerp_(list(net.parameters()), params, 1 - min(decay, (1 + step) / (10 + step)))
        lv = loss.item()
        running = lv if running is None else 0.98 * running + 0.02 * lv
        step += 1
        if step % cfg.log_every == 0 or step == 1:
            rec = {"step": step, "loss": round(lv, 5), "loss_avg": round(running, 5), "lr": opt.param_groups[0]["lr"],
                   "elapsed_s": round(time.monotonic() - t0, 1)}
            if val_batches is not None and step % (cfg.log_every * 10) == 0:
                rec["val_loss"] = round(validate(ema, val_batches, cfg), 5)
            history.append(rec)
            log(json.dumps(rec))
        if cfg.save_every and step % cfg.save_every == 0:
            save_checkpoint(checkpoint(False), cfg.out)
            for d, t in tracks.items():
                save_checkpoint(checkpoint(False, t, d), extra_ema_path(cfg.out, d))
    if cfg.cycles > 1:
        end_cycle()
        save_checkpoint(checkpoint(True), last_cycle_path(cfg.out))
        if soup:
            mean = {k: torch.stack([s[k].float() for s in soup]).mean(0).to(v.dtype) if v.is_floating_point() else v
                    for k, v in ema.state_dict().items()}
            ema.load_state_dict(mean)
    summary = {"steps": step, "final_loss_avg": running, "minutes": round((time.monotonic() - t0) / 60, 2),
               "averaged_snapshots": len(soup), "wall_minutes": round((time.monotonic() - t_start) / 60, 2),
               "recovery_minutes": round(sum(r["minutes"] for r in rounds), 2), "train_samples": int(len(train_idx))}
    if val_batches is not None:
        summary["val_loss"] = validate(ema, val_batches, cfg)
    for d, t in tracks.items():
        if val_batches is not None:
            summary[f"val_loss_ema{d:g}"] = validate(t, val_batches, cfg)
        save_checkpoint(checkpoint(True, t, d), extra_ema_path(cfg.out, d))
    save_checkpoint(checkpoint(True), cfg.out)
    summary["checkpoint"] = str(cfg.out)
    summary["checkpoint_mb"] = round(cfg.out.stat().st_size / 1e6, 2)
    log(json.dumps({"event": "done", **summary}))
    return {**summary, "history": history}


@torch.no_grad()
def validate(model: VLAPolicy, batches: Batches, cfg: TrainConfig, n: int = 4) -> float:
    """Flow loss of the EMA model on held-out episodes, fixed seed so values are comparable over time."""
    state = torch.random.get_rng_state()
    torch.manual_seed(1234)
    batches.rng = np.random.default_rng(cfg.seed + 1)
    losses = [float(model.loss(*batches.sample(cfg.batch_size, train=False)[:6], repeats=1)) for _ in range(n)]
    torch.random.set_rng_state(state)
    return float(np.mean(losses))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla train", description="Train the reference flow-matching VLA policy.")
    p.add_argument("--config", type=existing_file, default=None, help="YAML (default config/policy.yaml if present)")
    p.add_argument("--dataset", type=existing_dir, help="collected demonstrations (omni-vla collect --out)")
    p.add_argument("--out", type=Path, help="checkpoint path (.pt)")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-minutes", type=float, dest="max_minutes")
    p.add_argument("--max-steps", type=positive_int, dest="max_steps")
    p.add_argument("--batch-size", type=positive_int, dest="batch_size")
    p.add_argument("--num-threads", type=positive_int, dest="num_threads")
    p.add_argument("--embeddings", choices=["minilm", "random"])
    p.add_argument("--init-from", type=existing_file, dest="init_from", help="continue from this checkpoint's weights")
    a = p.parse_args(argv)
    cfg_path = a.config
    if cfg_path is None and Path("config/policy.yaml").is_file():
        cfg_path = Path("config/policy.yaml")
    over = {k: v for k, v in vars(a).items() if k != "config" and v is not None}
    cfg = config_from_cli(cfg_path, over)
    with output_dir(cfg.out.parent):  # a run that fails leaves no empty output folder behind
        train(cfg)
    return 0


def config_from_cli(path: Path | None, overrides: dict) -> TrainConfig:
    """load_config with every bad input as one UsageError: YAML syntax, unknown keys, values, missing paths."""
    where = f"{path}: " if path else ""
    try:
        cfg = load_config(path, overrides)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{where}not valid YAML{at} ({getattr(exc, 'problem', None) or exc})") from exc
    except ValidationError as exc:
        raise UsageError(where + explain(exc, TrainConfig.model_fields)) from exc
    except ValueError as exc:  # a YAML list or scalar where the mapping of settings belongs
        raise UsageError(f"{where}{exc}") from exc
    if not cfg.dataset.is_dir():
        raise UsageError(f"dataset: {cfg.dataset}: no such directory (expected demonstrations from omni-vla collect)")
    if cfg.out.is_dir() or not cfg.out.suffix:
        raise UsageError(f"out: {cfg.out}: expected a checkpoint file path, e.g. runs/policy/policy.pt (got a folder)")
    if cfg.init_from is not None and not cfg.init_from.is_file():
        raise UsageError(f"init_from: {cfg.init_from}: no such checkpoint file")
    return cfg


if __name__ == "__main__":
    raise SystemExit(main())
