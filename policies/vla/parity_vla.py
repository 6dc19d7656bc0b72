"""Parity of SmolVLA's stages (eager and every exported artifact) against LeRobot's own SmolVLA.

    $SMOLVLA_PY tests/support/smolvla_reference.py REF_DIR SPEC.json     # LeRobot's side (its own venv)
    python -m omni_vla_policies.vla.parity_vla REF_DIR [--artifacts DIR] --json

`spec(arch)` is SPEC.json. LeRobot's side writes its random weights and, on saved inputs, the outputs of its own
methods; here the same weights are loaded into the stage modules, each stage is fed LeRobot's inputs for it
(vision: each camera; prefix: LeRobot's image tokens; step: LeRobot's KV cache) and its output compared, then the
whole chain (vision -> prefix -> N steps -> finish) against predict_action_chunk. SNR in dB =
10 log10(sum ref^2 / sum err^2).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from omni_vla_policies.snr import snr_db
from omni_vla_policies.vla.export_vla import build
from omni_vla_policies.vla.model import step_time
from omni_vla_policies.vla.runners import BACKENDS, SUFFIX, StageFn, load_stage
from omni_vla_policies.vla.smolvla_config import SmolVLAArch, TextArch, VisionArch


def spec(arch: SmolVLAArch, seed: int = 0, valid_tokens: int | None = None) -> dict:
    """What smolvla_reference.py needs to build the same model with LeRobot's code."""
    fields = ("num_vlm_layers", "expert_width_multiplier", "self_attn_every_n_layers", "chunk_size", "num_steps",
              "max_state_dim", "max_action_dim", "tokenizer_max_length", "min_period", "max_period")
    return {"vlm_config": arch.vlm_config(), "smolvla": {k: getattr(arch, k) for k in fields},
            "cameras": arch.cameras, "image_size": arch.vision.image_size, "state_dim": arch.state_dim,
            "action_dim": arch.action_dim, "seed": seed,
            "valid_tokens": arch.tokenizer_max_length * 2 // 3 if valid_tokens is None else valid_tokens}


def chain(stages: dict[str, StageFn], arch: SmolVLAArch, io: dict[str, np.ndarray]) -> np.ndarray:
    """vision per camera -> prefix -> num_steps Euler steps -> finish, as a runtime runs them."""
    tokens = np.concatenate([stages["vision"]([im])[0] for im in io["images"]], axis=0)
    keys, values = stages["prefix"]([tokens, io["lang_tokens"].astype(np.int32), io["lang_mask"], io["state_padded"]])
    x = io["noise"]
    for i in range(arch.num_steps):
        x = stages["step"]([x, np.array([step_time(arch, i)], np.float32), keys, values, io["lang_mask"]])[0]
    return stages["finish"]([x])[0]


def stage_parity(stages: dict[str, StageFn], arch: SmolVLAArch, io: dict[str, np.ndarray]) -> dict[str, float]:
    vision = np.concatenate([stages["vision"]([im])[0] for im in io["images"]], axis=0)
    keys, values = stages["prefix"]([io["vision"], io["lang_tokens"].astype(np.int32), io["lang_mask"],
                                     io["state_padded"]])
    step = stages["step"]([io["noise"], np.ones(1, np.float32), io["keys"], io["values"], io["lang_mask"]])[0]
    return {"vision": snr_db(io["vision"], vision), "prefix_keys": snr_db(io["keys"], keys),
            "prefix_values": snr_db(io["values"], values), "step": snr_db(io["step"], step),
            "end_to_end": snr_db(io["actions"], chain(stages, arch, io))}


def run(ref_dir: Path, artifacts: Path | None, backends: tuple[str, ...], threads: int = 1) -> dict:
    arch = SmolVLAArch.model_validate_json((artifacts / "arch.json").read_text()) if artifacts else None
    io = {k: v for k, v in np.load(ref_dir / "io.npz").items()}
    ref_spec = json.loads((ref_dir / "spec.json").read_text()) if (ref_dir / "spec.json").is_file() else None
    if arch is None:
        if ref_spec is None:
            raise ValueError(f"{ref_dir} has no spec.json and no --artifacts arch.json was given")
        arch = arch_from_spec(ref_spec)
    model = build(arch, ref_dir / "model.safetensors")
    out = {"reference_parameters": int(io["parameters"]), "reference_torch": str(io["torch"]), "snr_db": {}}
    for backend in backends:
        if backend != "torch" and (artifacts is None or not (artifacts / f"vision.{SUFFIX[backend]}").is_file()):
            continue
        stages = {s: load_stage(backend, s, threads, model, artifacts) for s in ("vision", "prefix", "step", "finish")}
        out["snr_db"][backend] = {k: round(v, 2) for k, v in stage_parity(stages, arch, io).items()}
    return out


def arch_from_spec(s: dict) -> SmolVLAArch:
    """The architecture a spec.json describes (the inverse of `spec`)."""
    vc, tc = s["vlm_config"]["vision_config"], s["vlm_config"]["text_config"]
    return SmolVLAArch(vision=VisionArch(**{k: vc[k] for k in VisionArch.model_fields}),
                       text=TextArch(**{k: tc[k] for k in TextArch.model_fields}),
                       scale_factor=s["vlm_config"]["scale_factor"], cameras=s["cameras"], state_dim=s["state_dim"],
                       action_dim=s["action_dim"], **s["smolvla"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref_dir", type=Path)
    p.add_argument("--artifacts", type=Path, default=None)
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not (args.ref_dir / "io.npz").is_file():
        print(f"{args.ref_dir} has no io.npz: expected the output directory of smolvla_reference.py", file=sys.stderr)
        return 2
    result = run(args.ref_dir, args.artifacts, tuple(args.backends.split(",")), args.threads)
    print(json.dumps(result, indent=None if args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
