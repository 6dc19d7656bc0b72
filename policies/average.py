"""`omni-vla average`: one checkpoint whose weights are the mean of several fine-tuned from one lineage.

Why: the recovery rounds are fine-tuned one from the other, so their weights sit in one basin; their
mean (a "model soup") smooths round-to-round swings between tasks instead of picking one round's
trade-off. Only checkpoints that agree on everything but the weights can be averaged: the same
architecture, normalisation statistics, joints, control rate and instruction table. Anything else is
refused by name, because averaging weights fitted to different input statistics is meaningless.
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

from omni_vla.tools.errors import non_negative_float
from omni_vla.tools.outputs import output_dir
from omni_vla_policies.export import load_checkpoint, save_checkpoint

MUST_MATCH = ("model_config", "normalization", "joint_names", "control_rate_hz", "instructions")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def average_checkpoints(paths: list[Path], weights: list[float] | None = None) -> dict:
    """The weighted mean of `paths`' weights; metadata from the last one, `steps` summed, sources recorded."""
    if len(paths) < 2:
        raise ValueError(f"average needs at least two checkpoints, got {len(paths)}")
    weights = [1.0] * len(paths) if weights is None else list(weights)
    if len(weights) != len(paths) or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"weights {weights}: need one non-negative weight per checkpoint, not all zero")
    ckpts = [load_checkpoint(p) for p in paths]
    ref = ckpts[-1]
    for path, c in zip(paths, ckpts):
        for key in MUST_MATCH:
            if c.get(key) != ref.get(key):
                raise ValueError(f"{path}: {key} differs from {paths[-1]}; only checkpoints of one lineage average")
        if not np.array_equal(np.asarray(c["instruction_embeddings"]), np.asarray(ref["instruction_embeddings"])):
            raise ValueError(f"{path}: instruction_embeddings differ from {paths[-1]}")
        if c["state_dict"].keys() != ref["state_dict"].keys():
            raise ValueError(f"{path}: weights have other names than {paths[-1]}")
    total = float(sum(weights))
    state = {}
    for name, ref_value in ref["state_dict"].items():
        if ref_value.is_floating_point():
            state[name] = sum(c["state_dict"][name].double() * (w / total) for c, w in zip(ckpts, weights)).to(ref_value.dtype)
        else:
            state[name] = ref_value.clone()
    out = dict(ref)
    out["state_dict"] = state
    out["averaged_from"] = [
        {"path": str(p), "sha256": _sha256(p), "weight": w / total, "steps": int(c["steps"]),
         "dataset_sha256": str(c["dataset_sha256"])} for p, c, w in zip(paths, ckpts, weights)]
    out["steps"] = int(sum(int(c["steps"]) for c in ckpts))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla average", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", type=Path, help="training checkpoints (.pt) of one lineage")
    p.add_argument("--weights", type=non_negative_float, nargs="+", default=None,
                   help="one per checkpoint (default: equal)")
    p.add_argument("--out", type=Path, required=True, help="checkpoint to write (atomically)")
    args = p.parse_args(argv)
    for path in args.checkpoints:
        if not path.is_file():
            raise SystemExit(f"omni-vla average: {path}: no such checkpoint")
    try:
        ckpt = average_checkpoints(args.checkpoints, args.weights)
    except ValueError as exc:
        raise SystemExit(f"omni-vla average: {exc}") from None
    if args.out.is_dir():
        raise SystemExit(f"omni-vla average: --out {args.out}: is a directory (expected a checkpoint file path)")
    with output_dir(args.out.parent):
        save_checkpoint(ckpt, args.out)
    parts = ", ".join(f"{s['path']} x{s['weight']:.3f}" for s in ckpt["averaged_from"])
    print(f"wrote {args.out}: mean of {len(args.checkpoints)} checkpoints ({parts})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
