"""Read a LeRobot checkpoint directory as `lerobot-train` writes it, without LeRobot (ACT here; the checks every
importer shares too: the features, the robot the bundle is for, the bundle directory appearing whole).

`checkpoints/<step>/pretrained_model/` holds config.json (the policy config), model.safetensors and the
processor pipelines (policy_preprocessor.json / policy_postprocessor.json, each naming a .safetensors state file
with the dataset statistics). Normalisation lives in those pipelines, outside the model: here it becomes plain
per-feature affine maps (`Affine`) that the bundle carries and the runtime applies. Anything this reader does not
support is refused with one line naming the field and what is expected.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from safetensors.numpy import load_file

from omni_vla_policies.act_model import RESNET_BLOCKS, ActShape

CAMERA_PREFIX = "observation.images."
STATE_KEY, ENV_KEY, ACTION_KEY = "observation.state", "observation.environment_state", "action"


QUANTILE_STATS = {"QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}  # LeRobot's NormalizationMode -> stats


class CheckpointError(ValueError):
    """The directory is not an ACT checkpoint this importer can convert; the message says why."""


@dataclass(frozen=True)
class Affine:
    """normalised = (raw - subtract) / divide; raw = normalised * divide + subtract (per element, broadcast)."""

    subtract: np.ndarray
    divide: np.ndarray


@dataclass(frozen=True)
class ActCheckpoint:
    shape: ActShape
    cameras: list[str]  # LeRobot's camera names, in the model's token order
    weights: dict[str, np.ndarray]
    inputs: dict[str, Affine]  # camera name, "state", and "environment_state" when the policy has one
    action: Affine  # the postprocessor's inverse map
    n_action_steps: int
    config: dict


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: expected a LeRobot pretrained_model directory")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from exc


def read_tensors(path: Path, what: str) -> dict[str, np.ndarray]:
    """A safetensors file's tensors; a missing or unreadable one is refused naming it."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: expected {what}")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own SafetensorError (not a ValueError) on a broken file
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc}); expected {what}") from exc


def read_normalizer(directory: Path, pipeline: str, registry_name: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, statistics) of the (un)normalizer step of one processor pipeline."""
    spec = read_json(directory / f"{pipeline}.json")
    steps = [s for s in spec.get("steps", []) if s.get("registry_name") == registry_name]
    if len(steps) != 1 or "state_file" not in steps[0]:
        raise CheckpointError(f"{directory / pipeline}.json: expected one {registry_name} step with a state_file")
    return steps[0]["config"], read_tensors(directory / steps[0]["state_file"], "the dataset statistics")


def affine_map(key: str, kind: str, config: dict, stats: dict[str, np.ndarray], inverse: bool) -> Affine:
    """LeRobot's NormalizerProcessorStep arithmetic as an affine map (eps where LeRobot adds it)."""
    mode = config["norm_map"].get(kind, "IDENTITY")
    eps = np.float32(config.get("eps", 1e-8))
    if mode == "IDENTITY" or not any(f"{key}.{s}" in stats for s in ("mean", "min", "q01", "q10")):
        one = np.ones(1, np.float32)
        return Affine(np.zeros(1, np.float32), one)
    if mode == "MEAN_STD":
        std = stats[f"{key}.std"].astype(np.float32)
        return Affine(stats[f"{key}.mean"].astype(np.float32), std if inverse else std + eps)
    if mode == "MIN_MAX":
        lo, hi = stats[f"{key}.min"].astype(np.float32), stats[f"{key}.max"].astype(np.float32)
        span = np.where(hi - lo == 0, eps, hi - lo).astype(np.float32)
        return Affine(lo + span / 2, span / 2)
    if mode in QUANTILE_STATS:  # 2 (x - lo) / (hi - lo) - 1, the quantiles as MIN_MAX's bounds
        low, high = QUANTILE_STATS[mode]
        if f"{key}.{low}" not in stats or f"{key}.{high}" not in stats:
            raise CheckpointError(f"{key}: normalisation {mode} needs the {low} and {high} statistics; the "
                                  "checkpoint's processor state has none")
        lo, hi = stats[f"{key}.{low}"].astype(np.float32), stats[f"{key}.{high}"].astype(np.float32)
        span = np.where(hi - lo == 0, eps, hi - lo).astype(np.float32)
        return Affine(lo + span / 2, span / 2)
    raise CheckpointError(f"{key}: normalisation {mode} is not supported; expected MEAN_STD, MIN_MAX, "
                          f"{', '.join(QUANTILE_STATS)} or IDENTITY")


@dataclass(frozen=True)
class VlaFeatures:
    cameras: list[str]  # LeRobot's camera names, in the prefix's token order
    hw: tuple[int, int]  # every camera's (height, width)
    state_dim: int
    action_dim: int


def read_vla_features(d: Path, cfg: dict, fixed: dict[str, object], model: str) -> VlaFeatures:
    """What every staged VLA's config.json must say: the `fixed` fields at the values the exported stages compute,
    images left unnormalised (the model scales them itself), cameras of one shape, a state input, an action output."""
    for field, want in fixed.items():
        if cfg.get(field, want) != want:
            raise CheckpointError(f"{field} = {cfg.get(field)!r} is not supported; expected {want!r}")
    if cfg.get("normalization_mapping", {}).get("VISUAL", "IDENTITY") != "IDENTITY":
        raise CheckpointError(f"normalization_mapping.VISUAL must be IDENTITY ({model} scales images itself)")
    feats = cfg.get("input_features", {})
    cameras = [k[len(CAMERA_PREFIX):] for k in feats if k.startswith(CAMERA_PREFIX)]
    if not cameras or STATE_KEY not in feats or ACTION_KEY not in cfg.get("output_features", {}):
        raise CheckpointError(f"{d / 'config.json'}: expected observation.images.* inputs, {STATE_KEY} and "
                              f"an {ACTION_KEY} output")
    hw = {tuple(feats[CAMERA_PREFIX + c]["shape"][1:]) for c in cameras}
    if len(hw) != 1:
        raise CheckpointError(f"cameras have different shapes {sorted(hw)}; expected one (one vision program)")
    return VlaFeatures(cameras, hw.pop(), feats[STATE_KEY]["shape"][0],  # type: ignore[arg-type]
                       cfg["output_features"][ACTION_KEY]["shape"][0])


def check_robot(joint_names: list[str], state_dim: int, action_dim: int, gripper: str | None, out: Path) -> None:
    """The bundle is for a robot whose joints are the policy's state and action, element by element, and is new."""
    if len(joint_names) != state_dim or state_dim != action_dim:
        raise CheckpointError(f"{len(joint_names)} joint names for state {state_dim} / action {action_dim}; "
                              "expected one name per state and action element (absolute joint positions)")
    if gripper is not None and gripper not in joint_names:
        raise CheckpointError(f"gripper {gripper!r} is not one of the joint names {joint_names}")
    if out.exists():
        raise CheckpointError(f"{out} exists; expected a new bundle directory")


@contextmanager
def new_bundle_dir(out: Path) -> Iterator[Path]:
    """A directory beside `out` to write the bundle into; it becomes `out` only when the block completes, and is
    removed otherwise (also on Ctrl-C): a bundle is there whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_act_checkpoint(directory: str | Path) -> ActCheckpoint:
    d = Path(directory)
    cfg = read_json(d / "config.json")
    if cfg.get("type") != "act":
        raise CheckpointError(f"{d / 'config.json'}: policy type {cfg.get('type')!r}, expected 'act'")
    feats = cfg.get("input_features", {})
    cameras = [k[len(CAMERA_PREFIX):] for k in feats if k.startswith(CAMERA_PREFIX)]
    if not cameras:
        raise CheckpointError(f"{d / 'config.json'}: no observation.images.* input; expected at least one camera")
    if STATE_KEY not in feats:
        raise CheckpointError(f"{d / 'config.json'}: no {STATE_KEY} input; expected the robot's joint state")
    hw = {tuple(feats[CAMERA_PREFIX + c]["shape"][1:]) for c in cameras}
    if len(hw) != 1:
        raise CheckpointError(f"cameras have different shapes {sorted(hw)}; ACT expects one")
    for field, want in (("n_obs_steps", 1), ("replace_final_stride_with_dilation", False)):
        if cfg.get(field, want) != want:
            raise CheckpointError(f"{field} = {cfg.get(field)!r} is not supported; expected {want!r}")
    if cfg.get("vision_backbone") not in RESNET_BLOCKS:
        raise CheckpointError(f"vision_backbone {cfg.get('vision_backbone')!r}: expected one of {sorted(RESNET_BLOCKS)}")
    shape = ActShape(
        cameras=len(cameras), image_hw=tuple(hw.pop()), state_dim=feats[STATE_KEY]["shape"][0],
        env_dim=feats[ENV_KEY]["shape"][0] if ENV_KEY in feats else 0,
        action_dim=cfg["output_features"][ACTION_KEY]["shape"][0], chunk_size=cfg["chunk_size"],
        dim_model=cfg["dim_model"], n_heads=cfg["n_heads"], n_encoder_layers=cfg["n_encoder_layers"],
        n_decoder_layers=cfg["n_decoder_layers"], pre_norm=cfg["pre_norm"],
        activation=cfg["feedforward_activation"], backbone=cfg["vision_backbone"])
    weights = read_tensors(d / "model.safetensors", "the policy weights")
    pre_cfg, pre_stats = read_normalizer(d, "policy_preprocessor", "normalizer_processor")
    post_cfg, post_stats = read_normalizer(d, "policy_postprocessor", "unnormalizer_processor")
    inputs = {c: affine_map(CAMERA_PREFIX + c, "VISUAL", pre_cfg, pre_stats, False) for c in cameras}
    inputs["state"] = affine_map(STATE_KEY, "STATE", pre_cfg, pre_stats, False)
    if ENV_KEY in feats:
        inputs["environment_state"] = affine_map(ENV_KEY, "ENV", pre_cfg, pre_stats, False)
    return ActCheckpoint(shape=shape, cameras=cameras, weights=weights, inputs=inputs,
                         action=affine_map(ACTION_KEY, "ACTION", post_cfg, post_stats, True),
                         n_action_steps=int(cfg.get("n_action_steps", cfg["chunk_size"])), config=cfg)
