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
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.torch import load_file

from omni_vla.backends import ARTIFACT_FORMATS, ROBOT_BACKENDS, SUFFIX_OF
from omni_vla.runtime.bundle import artifact_spec, sha256_file, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT
from omni_vla.runtime.vla_manifest import VLA_KIND, VLAManifest
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_policies.converters import versions
from omni_vla_policies.lerobot_checkpoint import (ACTION_KEY, CAMERA_PREFIX, STATE_KEY, Affine, CheckpointError,
                                                   affine_map, read_json, read_normalizer)
from omni_vla_policies.lerobot_smolvla import find_tokenizer
from omni_vla_policies.vla.bundle_vla import stage_specs
from omni_vla_policies.vla.export_vla import export_stages
from omni_vla_policies.vla.parity_import import self_parity
from omni_vla_policies.vla.pi0_model import (GEMMA_HEADS, SIGLIP_HEAD_DIM, GemmaArch, Pi0, Pi0Arch,
                                             load_lerobot_state_dict)
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
    for field, want in FIXED.items():
        if cfg.get(field, want) != want:
            raise CheckpointError(f"{field} = {cfg.get(field)!r} is not supported; expected {want!r}")
    if (cfg.get("rtc_config") or {}).get("enabled"):
        raise CheckpointError("rtc_config.enabled is true: expected it off (the runtime pins committed actions itself)")
    if cfg.get("normalization_mapping", {}).get("VISUAL", "IDENTITY") != "IDENTITY":
        raise CheckpointError("normalization_mapping.VISUAL must be IDENTITY (pi0 scales images itself)")
    feats = cfg.get("input_features", {})
    cameras = [k[len(CAMERA_PREFIX):] for k in feats if k.startswith(CAMERA_PREFIX)]
    if not cameras or STATE_KEY not in feats or ACTION_KEY not in cfg.get("output_features", {}):
        raise CheckpointError(f"{d / 'config.json'}: expected observation.images.* inputs, {STATE_KEY} and "
                              f"an {ACTION_KEY} output")
    hw = {tuple(feats[CAMERA_PREFIX + c]["shape"][1:]) for c in cameras}
    if len(hw) != 1:
        raise CheckpointError(f"cameras have different shapes {sorted(hw)}; expected one (one vision program)")
    weights = d / "model.safetensors"
    state_dim, action_dim = feats[STATE_KEY]["shape"][0], cfg["output_features"][ACTION_KEY]["shape"][0]
    arch = _arch(cfg, safetensors_shapes(weights), len(cameras), hw.pop(), state_dim, action_dim)
    if state_dim > arch.max_state_dim or action_dim > arch.max_action_dim:
        raise CheckpointError(f"state {state_dim} / action {action_dim} exceed max_state_dim / max_action_dim "
                              f"{arch.max_state_dim} / {arch.max_action_dim}")
    pre_cfg, pre_stats = read_normalizer(d, "policy_preprocessor", "normalizer_processor")
    post_cfg, post_stats = read_normalizer(d, "policy_postprocessor", "unnormalizer_processor")
    name = _tokenizer_name(d)
    return Pi0Checkpoint(
        arch=arch, cameras=cameras, weights=weights,
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
        load_lerobot_state_dict(model, load_file(str(weights)))
    except ValueError as exc:
        raise CheckpointError(f"{weights}: {str(exc).splitlines()[0]}") from exc
    return model


def _floats(a) -> list[float]:  # noqa: ANN001
    return [float(v) for v in np.asarray(a, np.float32).reshape(-1)]


def build_manifest(ck: Pi0Checkpoint, tmp: Path, joint_names: list[str], rate_hz: float, gripper: str | None,
                   backends: tuple[str, ...], src: Path) -> VLAManifest:
    arch = ck.arch
    h, w = arch.camera_shape
    units = ["m" if n == gripper else "rad" for n in joint_names]
    stages = {stage: {"inputs": ins, "outputs": outs,
                      "artifacts": {b: artifact_spec(tmp, f"{stage}.{SUFFIX_OF[b]}").model_dump() for b in backends}}
              for stage, (ins, outs) in stage_specs(arch).items()}  # type: ignore[arg-type]
    language = {"tokenizer": f"{ck.tokenizer_name} tokenizer", "max_tokens": arch.tokenizer_max_length,
                "tokenizer_file": artifact_spec(tmp, "tokenizer.json").model_dump()}
    if arch.pi05:
        language["state_prompt"] = {"template": PI05_PROMPT, "bins": STATE_BINS}
    else:
        language["prompt_suffix"] = PI0_PROMPT_SUFFIX
    return VLAManifest.model_validate({
        "format": CHUNK_FORMAT, "kind": VLA_KIND, "policy": f"lerobot_{ck.config['type']}",
        "source": {"checkpoint": str(src), "weights_sha256": sha256_file(ck.weights), "tokenizer": ck.tokenizer_name,
                   "architecture": arch.model_dump(mode="json"), "config": ck.config},
        "control_rate_hz": rate_hz,
        "cameras": [{"name": c, "height": h, "width": w} for c in ck.cameras],
        "state": {"joint_names": joint_names, "units": units},
        "action": {"joint_names": joint_names, "units": units, "space": "absolute", "chunk_length": arch.chunk_size,
                   "execute_steps": ck.n_action_steps, "gripper": gripper},
        "normalization": {"state": {"subtract": _floats(ck.state.subtract), "divide": _floats(ck.state.divide)},
                          "action": {"subtract": _floats(ck.action.subtract), "divide": _floats(ck.action.divide)}},
        "language": language,
        "flow": {"num_steps": arch.num_steps, "padded_state_dim": arch.max_state_dim,
                 "padded_action_dim": arch.max_action_dim, "max_prefix": arch.chunk_size - 1},
        "stages": stages, "versions": versions(),
    })


def import_pi0(checkpoint_dir: str | Path, out: str | Path, joint_names: list[str], rate_hz: float,
               gripper: str | None = None, backends: tuple[str, ...] = ROBOT_BACKENDS,
               tokenizer: Path | None = None) -> VLAManifest:
    """Export every stage with the checkpoint's weights into a kind-"vla" bundle; `out` appears only when whole. Each
    robot runtime's chunk is checked against the eager fp32 stages on one observation (source.parity_db)."""
    src, out = Path(checkpoint_dir), Path(out)
    ck = read_pi0_checkpoint(src, tokenizer)
    a = ck.arch
    if len(joint_names) != a.state_dim or a.state_dim != a.action_dim:
        raise CheckpointError(f"{len(joint_names)} joint names for state {a.state_dim} / action {a.action_dim}; "
                              "expected one name per state and action element (absolute joint positions)")
    if gripper is not None and gripper not in joint_names:
        raise CheckpointError(f"gripper {gripper!r} is not one of the joint names {joint_names}")
    if out.exists():
        raise CheckpointError(f"{out} exists; expected a new bundle directory")
    model = build_pi0(a, ck.weights)
    listed = tuple(dict.fromkeys((*backends, "onnx") if "mnn" in backends else backends))  # MNN converts from ONNX
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        export_stages(model, tmp, backends=tuple(b for b in ARTIFACT_FORMATS if b in listed), log=lambda _s: None)
        shutil.copyfile(ck.tokenizer, tmp / "tokenizer.json")
        manifest = build_manifest(ck, tmp, joint_names, rate_hz, gripper, listed, src.resolve())
        write_json_atomic(tmp / "manifest.json", manifest.model_dump(mode="json"))
        with native_stdout_silenced():  # MNN prints to fd 1
            parity = self_parity(tmp, model, tuple(b for b in backends if b in ROBOT_BACKENDS))
        manifest = manifest.model_copy(update={"source": {**manifest.source, "parity_db": parity}})
        write_json_atomic(tmp / "manifest.json", manifest.model_dump(mode="json"))
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest
