"""A LeRobot 0.6.x pi0 / pi0.5 checkpoint (`pretrained_model/` as `lerobot-train` writes it) -> a kind-"vla" bundle,
without LeRobot (the model: policies/vla/pi0_model.py).

config.json names Gemma variants, not sizes, so the widths, depths and head layout are read from the weights'
safetensors header (8 query heads, as LeRobot's joint attention fixes them; SigLIP heads of 72 as So400m/14), and
checked against LeRobot's variant table when the name is one it knows. The tokenizer is the preprocessor's
`tokenizer_name`: a local directory, the Hugging Face cache's copy, or --tokenizer; never downloaded. What the
importer cannot reproduce exactly is refused in one line naming the field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable


from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.bundle import sha256_file
from omni_vla.runtime.vla_manifest import VLAManifest
from omni_vla_policies.lerobot_checkpoint import (ACTION_KEY, STATE_KEY, Affine, CheckpointError, affine_map,
                                                   check_robot, read_json, read_normalizer, read_vla_features)
from omni_vla_policies.lerobot_smolvla import find_tokenizer
from omni_vla_policies.vla.imported import QUANTIZATION, vla_manifest, write_imported_bundle
from omni_vla_policies.vla.pi0_model import (GEMMA_HEADS, SIGLIP_HEAD_DIM, GemmaArch, Pi0, Pi0Arch,
                                             load_lerobot_weights)
from omni_vla_policies.vla.smolvla_config import VisionArch

KINDS = ("pi0", "pi05")
PUBLISHED_TOKENIZER = "google/paligemma-3b-pt-224"
# LeRobot's get_gemma_config (openpi gemma.py): variant -> (width, depth, mlp_dim, heads, kv_heads, head_dim)
VARIANTS = {"gemma_300m": (1024, 18, 4096, 8, 1, 256), "gemma_2b": (2048, 18, 16384, 8, 1, 256)}
FIXED = {"n_obs_steps": 1, "empty_cameras": 0, "use_relative_actions": False, "dtype": "float32"}
VLM = "model.paligemma_with_expert.paligemma.model."
EXPERT = "model.paligemma_with_expert.gemma_expert.model."


@dataclass(frozen=True)
class Pi0Checkpoint:
    arch: Pi0Arch
    cameras: list[str]
    weights: Path
    state: Affine
    action: Affine  # the postprocessor's inverse map
    n_action_steps: int
    tokenizer: Path
    tokenizer_name: str
    config: dict


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor shapes from the header alone (a full-size checkpoint is 14-16 GB)."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: expected the policy weights")
    try:
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from exc
    header.pop("__metadata__", None)
    return {k: v["shape"] for k, v in header.items()}


def _gemma(shapes: dict[str, list[int]], prefix: str, variant: str, what: str) -> GemmaArch:
    depth = len({k[len(prefix) + 7:].split(".")[0] for k in shapes if k.startswith(prefix + "layers.")})
    q, k, gate = (shapes.get(f"{prefix}layers.0.{name}.weight")
                  for name in ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj"))
    if not depth or q is None or k is None or gate is None or q[0] % GEMMA_HEADS:
        raise CheckpointError(f"model.safetensors: no Gemma layers under {prefix}; expected the {what}'s weights")
    head_dim = q[0] // GEMMA_HEADS
    g = GemmaArch(width=q[1], depth=depth, mlp_dim=gate[0], num_heads=GEMMA_HEADS, num_kv_heads=k[0] // head_dim,
                  head_dim=head_dim)
    known = VARIANTS.get(variant)
    if known is not None and known != (g.width, g.depth, g.mlp_dim, g.num_heads, g.num_kv_heads, g.head_dim):
        raise CheckpointError(f"{what} variant {variant!r}: the weights are {g.width} wide, {g.depth} deep; expected "
                              f"LeRobot's {variant} {known[:2]}")
    return g


def _arch(cfg: dict, shapes: dict[str, list[int]], cameras: int, hw: tuple[int, int], state_dim: int,
          action_dim: int) -> Pi0Arch:
    pi05 = cfg["type"] == "pi05"
    res = cfg.get("image_resolution", [224, 224])
    if len(res) != 2 or res[0] != res[1]:
        raise CheckpointError(f"image_resolution {res}: expected a square resolution (PaliGemma's)")
    vt = VLM + "vision_tower.vision_model."
    patch = shapes.get(vt + "embeddings.patch_embedding.weight")
    fc1 = shapes.get(vt + "encoder.layers.0.mlp.fc1.weight")
    if patch is None or fc1 is None or patch[0] % SIGLIP_HEAD_DIM:
        raise CheckpointError(f"model.safetensors: no SigLIP tower with heads of {SIGLIP_HEAD_DIM} under {vt}; "
                              "expected PaliGemma's vision weights")
    positions = shapes[vt + "embeddings.position_embedding.weight"][0]
    if positions != (res[0] // patch[2]) ** 2:
        raise CheckpointError(f"image_resolution {res}: the vision tower has {positions} positions of {patch[2]} px "
                              "patches; expected the resolution it was trained at")
    vision = VisionArch(hidden_size=patch[0], intermediate_size=fc1[0], image_size=res[0], patch_size=patch[2],
                        num_hidden_layers=len({k[len(vt) + 15:].split(".")[0] for k in shapes
                                               if k.startswith(vt + "encoder.layers.")}),
                        num_attention_heads=patch[0] // SIGLIP_HEAD_DIM, layer_norm_eps=1e-6)
    vlm = _gemma(shapes, VLM + "language_model.", cfg.get("paligemma_variant", "gemma_2b"), "PaliGemma")
    expert = _gemma(shapes, EXPERT, cfg.get("action_expert_variant", "gemma_300m"), "action expert")
    if (vlm.depth, vlm.head_dim, vlm.num_kv_heads) != (expert.depth, expert.head_dim, expert.num_kv_heads):
        raise CheckpointError("the PaliGemma and expert layers differ in depth or head layout; expected one expert "
                              "layer per PaliGemma layer attending jointly")
    return Pi0Arch(pi05=pi05, vision=vision, vlm=vlm, expert=expert,
                   vocab_size=shapes[VLM + "language_model.embed_tokens.weight"][0],
                   cameras=cameras, state_dim=state_dim, action_dim=action_dim,
                   camera_hw=None if hw == (res[0], res[0]) else hw,
                   **{k: cfg[k] for k in ("chunk_size", "max_state_dim", "max_action_dim", "tokenizer_max_length",
                                          "min_period", "max_period") if k in cfg},
                   num_steps=cfg.get("num_inference_steps", 10))


def _tokenizer_name(d: Path) -> str:
    spec = read_json(d / "policy_preprocessor.json")
    names = [s.get("config", {}).get("tokenizer_name") for s in spec.get("steps", [])
             if s.get("registry_name") == "tokenizer_processor"]
    if len(names) != 1 or not names[0]:
        raise CheckpointError(f"{d / 'policy_preprocessor.json'}: expected one tokenizer_processor step naming its "
                              "tokenizer")
    return names[0]


def read_pi0_checkpoint(directory: str | Path, tokenizer: Path | None = None) -> Pi0Checkpoint:
    d = Path(directory)
    cfg = read_json(d / "config.json")
    if cfg.get("type") not in KINDS:
        raise CheckpointError(f"{d / 'config.json'}: policy type {cfg.get('type')!r}, expected one of {KINDS}")
    if (cfg.get("rtc_config") or {}).get("enabled"):
        raise CheckpointError("rtc_config.enabled is true: expected it off (the runtime pins committed actions itself)")
    f = read_vla_features(d, cfg, FIXED, "pi0")
    weights = d / "model.safetensors"
    arch = _arch(cfg, safetensors_shapes(weights), len(f.cameras), f.hw, f.state_dim, f.action_dim)
    if f.state_dim > arch.max_state_dim or f.action_dim > arch.max_action_dim:
        raise CheckpointError(f"state {f.state_dim} / action {f.action_dim} exceed max_state_dim / max_action_dim "
                              f"{arch.max_state_dim} / {arch.max_action_dim}")
    pre_cfg, pre_stats = read_normalizer(d, "policy_preprocessor", "normalizer_processor")
    post_cfg, post_stats = read_normalizer(d, "policy_postprocessor", "unnormalizer_processor")
    name = _tokenizer_name(d)
    return Pi0Checkpoint(
        arch=arch, cameras=f.cameras, weights=weights,
        state=affine_map(STATE_KEY, "STATE", pre_cfg, pre_stats, False),
        action=affine_map(ACTION_KEY, "ACTION", post_cfg, post_stats, True),
        n_action_steps=int(cfg.get("n_action_steps", arch.chunk_size)),
        tokenizer=find_tokenizer(name, tokenizer), tokenizer_name=name, config=cfg)


PI0_PROMPT_SUFFIX = "\n"  # Pi0NewLineProcessor
PI05_PROMPT = "Task: {task}, State: {state};\nAction: "  # Pi05PrepareStateTokenizerProcessorStep
STATE_BINS = 256


def build_pi0(arch: Pi0Arch, weights: Path) -> Pi0:
    """Our stages' model with the checkpoint's weights."""
    model = Pi0(arch).eval()
    try:
        load_lerobot_weights(model, weights)
    except ValueError as exc:
        raise CheckpointError(f"{weights}: {str(exc).splitlines()[0]}") from exc
    return model


def manifest_for(ck: Pi0Checkpoint, joint_names: list[str], rate_hz: float, gripper: str | None,
                 src: Path) -> Callable[[Path, tuple[str, ...]], VLAManifest]:
    prompt = ({"state_prompt": {"template": PI05_PROMPT, "bins": STATE_BINS}} if ck.arch.pi05
              else {"prompt_suffix": PI0_PROMPT_SUFFIX})
    return lambda tmp, backends: vla_manifest(
        policy=f"lerobot_{ck.config['type']}", arch=ck.arch, cameras=ck.cameras, tmp=tmp, joint_names=joint_names,
        rate_hz=rate_hz, gripper=gripper, backends=backends, execute_steps=ck.n_action_steps, state=ck.state,
        action=ck.action,
        source={"checkpoint": str(src), "weights_sha256": sha256_file(ck.weights), "tokenizer": ck.tokenizer_name,
                "config": ck.config},
        language={"tokenizer": f"{ck.tokenizer_name} tokenizer", **prompt})


def import_pi0(checkpoint_dir: str | Path, out: str | Path, joint_names: list[str], rate_hz: float,
               gripper: str | None = None, backends: tuple[str, ...] = ROBOT_BACKENDS,
               tokenizer: Path | None = None, quantize: str | None = None, delegate: str = "xnnpack") -> VLAManifest:
    """Export every stage with the checkpoint's weights into a kind-"vla" bundle; `out` appears only when whole. Each
    robot runtime's chunk is checked against the eager fp32 stages on one observation (source.parity_db)."""
    if quantize not in (None, *QUANTIZATION):
        raise CheckpointError(f"--quantize {quantize!r}: expected one of {', '.join(QUANTIZATION)}")
    src, out = Path(checkpoint_dir), Path(out)
    ck = read_pi0_checkpoint(src, tokenizer)
    check_robot(joint_names, ck.arch.state_dim, ck.arch.action_dim, gripper, out)
    return write_imported_bundle(partial(build_pi0, ck.arch, ck.weights), out, ck.tokenizer, backends,
                                 manifest_for(ck, joint_names, rate_hz, gripper, src.resolve()),
                                 int8=quantize == "int8", delegate=delegate)
