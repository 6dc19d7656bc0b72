"""A LeRobot SmolVLA checkpoint (`pretrained_model/` as `lerobot-train` writes it) -> a kind-"vla" bundle.

The checkpoint holds SmolVLAConfig (config.json), the weights (model.safetensors) and the processor pipelines with
the dataset statistics. It does not hold the VLM's architecture nor its tokenizer: those come from
`vlm_model_name`, a local directory (config.json, tokenizer.json) or the published SmolVLM2-500M, whose config
ships here and whose tokenizer is found in the Hugging Face cache or given with --tokenizer. Nothing is
downloaded. What this importer cannot reproduce exactly is refused in one line naming the field.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.bundle import sha256_file
from omni_vla.runtime.vla_manifest import VLAManifest
from omni_vla_policies.lerobot_checkpoint import (ACTION_KEY, STATE_KEY, Affine, CheckpointError, affine_map,
                                                   check_robot, read_json, read_normalizer, read_vla_features)
from omni_vla_policies.vla.export_vla import build
from omni_vla_policies.vla.model import SmolVLA
from omni_vla_policies.vla.imported import QUANTIZATION, vla_manifest, write_imported_bundle
from omni_vla_policies.vla.smolvla_config import PUBLISHED_VLM_CONFIG, SmolVLAArch, TextArch, VisionArch

PUBLISHED_VLM = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
PROMPT_SUFFIX = "\n"  # SmolVLANewLineProcessor: the task ends with a newline before tokenising
# Fields whose non-default values change what the network computes in ways the exported stages do not.
FIXED = {"n_obs_steps": 1, "empty_cameras": 0, "adapt_to_pi_aloha": False, "use_delta_joint_actions_aloha": False,
         "add_image_special_tokens": False, "attention_mode": "cross_attn"}


@dataclass(frozen=True)
class SmolVLACheckpoint:
    arch: SmolVLAArch
    cameras: list[str]  # LeRobot's camera names, in the prefix's token order
    weights: Path
    state: Affine
    action: Affine  # the postprocessor's inverse map
    n_action_steps: int
    tokenizer: Path
    vlm: str
    config: dict


def _vlm_config(name: str) -> dict:
    local = Path(name).expanduser()
    if (local / "config.json").is_file():
        return read_json(local / "config.json")
    if name == PUBLISHED_VLM:
        return json.loads(PUBLISHED_VLM_CONFIG.read_text())
    raise CheckpointError(f"vlm_model_name {name!r}: expected {PUBLISHED_VLM!r} or a local directory holding the "
                          "VLM's config.json")


def find_tokenizer(name: str, explicit: Path | None) -> Path:
    """--tokenizer, else the VLM directory's tokenizer.json, else the Hugging Face cache's copy (never fetched)."""
    if explicit is not None:
        if not Path(explicit).is_file():
            raise CheckpointError(f"--tokenizer {explicit}: no such file; expected the VLM's tokenizer.json")
        return Path(explicit)
    local = Path(name).expanduser() / "tokenizer.json"
    if local.is_file():
        return local
    hub = Path(os.environ.get("HF_HUB_CACHE", Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
                              / "hub"))
    cached = sorted(hub.glob(f"models--{name.replace('/', '--')}/snapshots/*/tokenizer.json"))
    if cached:
        return cached[-1]
    raise CheckpointError(f"no tokenizer.json for {name!r} (not a local directory, not in {hub}); expected "
                          "--tokenizer PATH/tokenizer.json")


def _arch(cfg: dict, vlm: dict, cameras: int, hw: tuple[int, int], state_dim: int, action_dim: int) -> SmolVLAArch:
    tc, vc = dict(vlm["text_config"]), vlm["vision_config"]
    tc.setdefault("head_dim", tc["hidden_size"] // tc["num_attention_heads"])
    tc.setdefault("num_key_value_heads", tc["num_attention_heads"])
    size = vc["image_size"]
    resize = cfg.get("resize_imgs_with_padding")
    if resize is None and hw != (size, size):
        raise CheckpointError(f"resize_imgs_with_padding is null and the cameras are {hw[0]}x{hw[1]}; expected "
                              f"{size}x{size} images (the vision encoder's size)")
    if resize is not None and tuple(resize) != (size, size):
        raise CheckpointError(f"resize_imgs_with_padding {list(resize)}: expected [{size}, {size}], the vision "
                              "encoder's size")
    experts = cfg.get("num_expert_layers", -1)
    if experts > 0 and experts != cfg.get("num_vlm_layers", 16):
        raise CheckpointError(f"num_expert_layers {experts}: expected <= 0 or num_vlm_layers (one expert layer "
                              "per VLM layer)")
    return SmolVLAArch(
        vision=VisionArch(**{k: vc[k] for k in VisionArch.model_fields}),
        text=TextArch(**{k: tc[k] for k in TextArch.model_fields}),
        scale_factor=vlm["scale_factor"], cameras=cameras, state_dim=state_dim, action_dim=action_dim,
        camera_hw=None if hw == (size, size) else hw,
        **{k: cfg[k] for k in ("num_vlm_layers", "expert_width_multiplier", "self_attn_every_n_layers", "chunk_size",
                               "num_steps", "max_state_dim", "max_action_dim", "tokenizer_max_length", "min_period",
                               "max_period") if k in cfg})


def read_smolvla_checkpoint(directory: str | Path, tokenizer: Path | None = None) -> SmolVLACheckpoint:
    d = Path(directory)
    cfg = read_json(d / "config.json")
    if cfg.get("type") != "smolvla":
        raise CheckpointError(f"{d / 'config.json'}: policy type {cfg.get('type')!r}, expected 'smolvla'")
    f = read_vla_features(d, cfg, FIXED, "SmolVLA")
    vlm_name = cfg.get("vlm_model_name", PUBLISHED_VLM)
    try:
        arch = _arch(cfg, _vlm_config(vlm_name), len(f.cameras), f.hw, f.state_dim, f.action_dim)
    except (KeyError, ValidationError) as exc:
        raise CheckpointError(f"{vlm_name}: the VLM config lacks or mistypes {exc}; expected a SmolVLM config") from exc
    pre_cfg, pre_stats = read_normalizer(d, "policy_preprocessor", "normalizer_processor")
    post_cfg, post_stats = read_normalizer(d, "policy_postprocessor", "unnormalizer_processor")
    weights = d / "model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{weights} is missing: expected the policy weights")
    return SmolVLACheckpoint(
        arch=arch, cameras=f.cameras, weights=weights,
        state=affine_map(STATE_KEY, "STATE", pre_cfg, pre_stats, False),
        action=affine_map(ACTION_KEY, "ACTION", post_cfg, post_stats, True),
        n_action_steps=int(cfg.get("n_action_steps", arch.chunk_size)),
        tokenizer=find_tokenizer(vlm_name, tokenizer), vlm=vlm_name, config=cfg)


def manifest_for(ck: SmolVLACheckpoint, joint_names: list[str], rate_hz: float, gripper: str | None,
                 src: Path) -> Callable[[Path, tuple[str, ...]], VLAManifest]:
    return lambda tmp, backends: vla_manifest(
        policy="lerobot_smolvla", arch=ck.arch, cameras=ck.cameras, tmp=tmp, joint_names=joint_names,
        rate_hz=rate_hz, gripper=gripper, backends=backends, execute_steps=ck.n_action_steps, state=ck.state,
        action=ck.action,
        source={"checkpoint": str(src), "weights_sha256": sha256_file(ck.weights), "vlm": ck.vlm, "config": ck.config},
        language={"tokenizer": f"{ck.vlm} tokenizer", "prompt_suffix": PROMPT_SUFFIX})


def built(arch: SmolVLAArch, weights: Path) -> SmolVLA:
    """The model with the checkpoint's weights; a file that does not fit the architecture is refused in one line."""
    try:
        return build(arch, weights)
    except ValueError as exc:
        raise CheckpointError(f"{weights}: {str(exc).splitlines()[0]}") from exc


def import_smolvla(checkpoint_dir: str | Path, out: str | Path, joint_names: list[str], rate_hz: float,
                   gripper: str | None = None, backends: tuple[str, ...] = ROBOT_BACKENDS,
                   tokenizer: Path | None = None, quantize: str | None = None, delegate: str = "xnnpack") -> VLAManifest:
    """Export every stage with the checkpoint's weights; `out` appears only when the bundle is whole. Each robot
    runtime's chunk is checked against the eager fp32 model on one observation and the figure written into the
    manifest (source.parity_db): what a quantised variant costs, measured on this checkpoint."""
    if quantize not in (None, *QUANTIZATION):
        raise CheckpointError(f"--quantize {quantize!r}: expected one of {', '.join(QUANTIZATION)}")
    src, out = Path(checkpoint_dir), Path(out)
    ck = read_smolvla_checkpoint(src, tokenizer)
    check_robot(joint_names, ck.arch.state_dim, ck.arch.action_dim, gripper, out)
    return write_imported_bundle(partial(built, ck.arch, ck.weights), out, ck.tokenizer, backends,
                                 manifest_for(ck, joint_names, rate_hz, gripper, src.resolve()),
                                 int8=quantize == "int8", delegate=delegate)
