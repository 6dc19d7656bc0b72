"""An export_vla stage directory -> a kind-"vla" bundle (format 3, omni_vla/runtime/vla_manifest.py) the loop runs.

    python -m omni_vla_policies.vla.bundle_vla ART_DIR BUNDLE_DIR --rate-hz 5 --execute-steps 20 \
        [--max-prefix 40] [--backends executorch,mnn] [--link]

The robot side comes from a format-2 bundle (default: the shipped reference): its joint names, and its state
statistics as the normalisation of both state and action (SmolVLA predicts absolute joint positions; these
weights are random, so the statistics only place and scale what they output). The language table holds the
reference bundle's instructions tokenised by the MiniLM WordPiece tokenizer shipped with our text encoder: the
model's own SmolVLM2 tokenizer cannot be downloaded here, and with random weights which ids stand for a text does
not matter. Ids beyond the model's vocabulary (test sizes) are taken modulo it, and the table says so.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from pydantic import ValidationError
from tokenizers import Tokenizer

from omni_vla.backends import ROBOT_BACKENDS, SUFFIX_OF
from omni_vla.errors import explain
from omni_vla.runtime.bundle import artifact_spec, read_manifest, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT
from omni_vla.runtime.vla_manifest import VLA_KIND, VLA_STAGES, VLAManifest
from omni_vla_policies.text_encoder import model_dir
from omni_vla_policies.vla.model import STAGE_IO
from omni_vla_policies.vla.smolvla_config import SmolVLAArch

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "bundles" / "reference"


def language_table(texts: list[str], arch: SmolVLAArch) -> tuple[str, dict[str, list[int]]]:
    """(tokenizer description, text -> ids): SmolVLA's prompt is the task and a newline, truncated to max length."""
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_padding()  # the file pads for the text encoder; the table holds the ids alone (the runtime pads, masked)
    tok.no_truncation()
    vocab, n = arch.text.vocab_size, arch.tokenizer_max_length
    raw = {t: tok.encode(t + "\n", add_special_tokens=False).ids[:n] for t in texts}
    wrapped = any(i >= vocab for ids in raw.values() for i in ids)
    name = "sentence-transformers/all-MiniLM-L6-v2 WordPiece (stand-in for SmolVLM2's tokenizer, not shipped)"
    if wrapped:
        name += f", ids modulo the vocabulary of {vocab}"
    return name, {t: [i % vocab for i in ids] for t, ids in raw.items()}


def stage_specs(arch: SmolVLAArch) -> dict[str, tuple[list[dict], list[dict]]]:
    """Each stage's named tensors with their static shapes (what export_vla traced)."""
    t, h, n = arch.text, arch.chunk_size, arch.tokenizer_max_length
    img = (1, 3, *arch.camera_shape)
    tokens = (1, arch.image_tokens, t.hidden_size)
    kv = (arch.num_vlm_layers, arch.prefix_len, t.num_key_value_heads, t.head_dim)
    x = (1, h, arch.max_action_dim)
    shapes = {
        "vision": ([img], [tokens]),
        "prefix": ([(arch.cameras, *tokens[1:]), (1, n), (1, n), (1, arch.max_state_dim)], [kv, kv]),
        "step": ([x, (1,), kv, kv, (1, n)], [x]),
        "finish": ([x], [(1, h, arch.action_dim)]),
    }
    out = {}
    for stage, (ins, outs) in shapes.items():
        names_in, names_out = STAGE_IO[stage]
        out[stage] = ([{"name": k, "shape": s, "dtype": "int32" if k == "lang_tokens" else "float32"}
                       for k, s in zip(names_in, ins)],
                      [{"name": k, "shape": s, "dtype": "float32"} for k, s in zip(names_out, outs)])
    return out


def _place(src: Path, dst: Path, link: bool) -> None:
    if dst.exists():
        dst.unlink()
    if link:
        os.link(src, dst)
    else:
        shutil.copyfile(src, dst)


def write_vla_bundle(art: Path, out: Path, *, rate_hz: float, execute_steps: int, max_prefix: int,
                     backends: tuple[str, ...] = ROBOT_BACKENDS, robot: Path = REFERENCE,
                     link: bool = False, policy: str = "lerobot_smolvla") -> VLAManifest:
    """Validate, then write `out` (artifacts, then manifest.json last and atomically); returns the manifest."""
    arch = SmolVLAArch.model_validate_json((art / "arch.json").read_text())
    ref = read_manifest(robot)
    joints = list(ref.joint_names)
    if (arch.state_dim, arch.action_dim) != (len(joints), len(joints)):
        raise ValueError(f"{art}: exported for state/action {arch.state_dim}/{arch.action_dim}, the robot of {robot} "
                         f"has {len(joints)} joints; re-export with --state-dim/--action-dim {len(joints)}")
    exported = json.loads((art / "export.json").read_text())
    stages, files = {}, []
    for stage, (ins, outs) in stage_specs(arch).items():
        arts = {}
        for b in backends:
            src = art / f"{stage}.{SUFFIX_OF[b]}"
            if not src.is_file():
                raise FileNotFoundError(f"{src} is missing: export it with export_vla --backends {b}")
            arts[b] = artifact_spec(art, src.name).model_dump()  # hashed at the source: placed unchanged below
            files.append(src)
        stages[stage] = {"inputs": ins, "outputs": outs, "artifacts": arts,
                         "flops": exported.get("flops", {}).get(stage)}
    texts = [str(t) for t in np.load(robot / ref.instruction.table.file)["texts"]]
    tokenizer, table = language_table(texts, arch)
    units = ["m" if j == joints[-1] else "rad" for j in joints]
    stats = {"subtract": ref.normalization.state_mean, "divide": ref.normalization.state_std}
    manifest = VLAManifest.model_validate({
        "format": CHUNK_FORMAT, "kind": VLA_KIND, "policy": policy,
        "source": {"architecture": arch.model_dump(), "weights": "random (seeded init): latency, not behaviour",
                   "int8": bool(exported.get("int8")), "robot_from": str(robot.name),
                   "normalization": "the robot bundle's state statistics, for state and action"},
        "control_rate_hz": rate_hz,
        "cameras": [{"name": c, "height": arch.vision.image_size, "width": arch.vision.image_size}
                    for c in ("front", "wrist")[: arch.cameras]],
        "state": {"joint_names": joints, "units": units},
        "action": {"joint_names": joints, "units": units, "space": "absolute", "chunk_length": arch.chunk_size,
                   "execute_steps": execute_steps, "gripper": joints[-1]},
        "normalization": {"state": stats, "action": stats},
        "language": {"tokenizer": tokenizer, "max_tokens": arch.tokenizer_max_length, "table": table},
        "flow": {"num_steps": arch.num_steps, "padded_state_dim": arch.max_state_dim,
                 "padded_action_dim": arch.max_action_dim, "max_prefix": max_prefix},
        "stages": stages, "versions": exported["versions"],
    })
    assert set(manifest.stages) == set(VLA_STAGES)
    out.mkdir(parents=True, exist_ok=True)  # only once the manifest is valid: a refusal writes nothing
    for src in files:
        _place(src, out / src.name, link)
    write_json_atomic(out / "manifest.json", manifest.model_dump(mode="json"))
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("art", type=Path, help="export_vla's output directory")
    p.add_argument("out", type=Path, help="the bundle directory to write")
    p.add_argument("--rate-hz", type=float, required=True, help="the control rate the bundle states")
    p.add_argument("--execute-steps", type=int, required=True, help="actions executed per chunk (the loop's default)")
    p.add_argument("--max-prefix", type=int, default=None, help="rows RTC may pin (default: chunk length - 1)")
    p.add_argument("--backends", default=",".join(ROBOT_BACKENDS))
    p.add_argument("--robot", type=Path, default=REFERENCE, help="a format-2 bundle giving joints and statistics")
    p.add_argument("--link", action="store_true", help="hard-link the artifacts instead of copying them")
    args = p.parse_args(argv)
    if not (args.art / "arch.json").is_file():
        print(f"{args.art} has no arch.json: expected the output directory of export_vla", file=sys.stderr)
        return 2
    arch = SmolVLAArch.model_validate_json((args.art / "arch.json").read_text())
    backends = tuple(b for b in args.backends.split(",") if b)
    if not backends or set(backends) - set(SUFFIX_OF):
        print(f"bundle_vla: unknown backend(s) {sorted(set(backends) - set(SUFFIX_OF))} in --backends {args.backends!r}; "
              f"expected some of {sorted(SUFFIX_OF)}", file=sys.stderr)
        return 2
    try:
        m = write_vla_bundle(args.art, args.out, rate_hz=args.rate_hz, execute_steps=args.execute_steps,
                             max_prefix=arch.chunk_size - 1 if args.max_prefix is None else args.max_prefix,
                             backends=backends, robot=args.robot, link=args.link)
    except ValidationError as exc:
        print(f"bundle_vla: the bundle would be invalid: {explain(exc)}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"bundle_vla: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/manifest.json: {m.policy}, {len(m.cameras)} cameras, chunk {m.action.chunk_length}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
