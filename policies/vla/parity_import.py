"""An imported VLA bundle against what LeRobot's own pipeline made of one raw observation, on each robot runtime.

    python -m omni_vla_policies.vla.parity_import BUNDLE IO.npz --task "pick up the cube" [--backends executorch,mnn]

IO.npz is tests/support/smolvla_checkpoint.py's or pi0_checkpoint.py's output (raw images per camera as
`image.<name>`, state, the noise of the robot's action columns, LeRobot's tokens and its unnormalised actions).
Prints JSON: per backend the end-to-end SNR (dB) and max abs error of the chunk, whether the bundle's tokenizer gave
LeRobot's ids (pi0.5: with the state in the prompt), and the seconds of one whole inference. Exit 2 with one line
on a missing or mismatched file.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.chunk_manifest import ChunkStageSpec
from omni_vla.runtime.registry import robot_module
from omni_vla.runtime.vla import StagedVLARuntime
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_policies.vla.model import STAGE_IO, SmolVLA
from omni_vla_policies.vla.stages import stage_modules
from omni_vla_policies.snr import snr_db

def open_vla(bundle: Path, backend: str, threads: int = 1) -> StagedVLARuntime:
    """The bundle on a robot runtime, its loader imported by name (ExecuTorch's imports torch)."""
    return StagedVLARuntime(bundle, backend, robot_module(backend).load_program, num_threads=threads)


def eager_loader(model: SmolVLA) -> Callable:
    """A LoadProgram running the eager fp32 stages of `model`: the same runtime code (tokeniser, normalisation,
    padding, Euler loop) around the network as written, the reference an exported variant is held to."""
    mods = stage_modules(model)

    def load(_path: Path, spec: ChunkStageSpec, inputs: Sequence[np.ndarray], _threads: int) -> Callable:
        stage = next(s for s, io in STAGE_IO.items() if list(io[0]) == [t.name for t in spec.inputs])
        views = [torch.from_numpy(x) for x in inputs]

        def run() -> list[np.ndarray]:
            with torch.no_grad():
                out = mods[stage](*views)
            return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]

        return run

    return load


def self_parity(bundle: Path, build: Callable[[], SmolVLA], backends: Sequence[str], seed: int = 0) -> dict[str, float]:
    """End-to-end SNR (dB) of each backend's chunk against the eager fp32 model `build` makes, both through
    StagedVLARuntime on one seeded observation (images, state around the statistics' mean, an instruction, noise).
    The float model is dropped before the runtimes load: a full-size pi0 cannot hold both."""
    ref_rt = StagedVLARuntime(bundle, backends[0], eager_loader(build()), check_versions=False)  # artifacts unread
    rng = np.random.default_rng(seed)
    images = {c.name: rng.random((1, 3, c.height, c.width), dtype=np.float32) for c in ref_rt.cameras}
    sub, div = (np.asarray(a, np.float32) for a in (ref_rt.manifest.normalization["state"].subtract,
                                                     ref_rt.manifest.normalization["state"].divide))
    state = (sub + div * rng.standard_normal(len(ref_rt.manifest.state.joint_names))).astype(np.float32)[None]
    lang = ref_rt.encode_instruction("pick up the cube and place it in the bin")[None]
    h, d = ref_rt.horizon, ref_rt.action_dim
    noise = rng.standard_normal((1, h, d)).astype(np.float32)
    zeros = np.zeros((1, h, d), np.float32)

    def chunk(rt: StagedVLARuntime) -> np.ndarray:
        out = np.zeros((h, d), np.float32)
        rt.infer(images, state, lang, zeros, 0, noise, out)
        return out

    ref = chunk(ref_rt)
    del ref_rt
    gc.collect()
    return {b: round(snr_db(ref, chunk(open_vla(bundle, b))), 2) for b in backends}


def compare(bundle: Path, io: dict[str, np.ndarray], task: str, backend: str, threads: int = 1) -> dict:
    rt = open_vla(bundle, backend, threads)
    lang = rt.encode_instruction(task)
    if rt.manifest.language.state_prompt is None:
        ids = rt.token_ids(task)
    else:  # the prompt holds the state (pi0.5)
        norm = rt.manifest.normalization["state"]
        ids = rt.prompt_token_ids(task, (io["state"] - np.asarray(norm.subtract, np.float32))
                                  / np.asarray(norm.divide, np.float32))
    valid = int(io["lang_mask"].sum())
    tokens_match = ids == io["lang_tokens"][0, :valid].tolist()
    out = np.zeros((rt.horizon, rt.action_dim), np.float32)
    images = {c.name: io[f"image.{c.name}"][None] for c in rt.cameras}
    prefix = np.zeros((1, rt.horizon, rt.action_dim), np.float32)
    t0 = time.perf_counter()
    rt.infer(images, io["state"][None], lang[None], prefix, 0, io["noise"], out)
    seconds = time.perf_counter() - t0
    ref = io["actions"][0]
    return {"snr_db": round(snr_db(ref, out), 2), "max_abs": float(np.abs(ref - out).max()),
            "tokens_match": tokens_match, "inference_s": round(seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("io", type=Path)
    p.add_argument("--task", required=True, help="the instruction LeRobot's pipeline was given")
    p.add_argument("--backends", default=",".join(ROBOT_BACKENDS))
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b]
    if not backends or set(backends) - set(ROBOT_BACKENDS):
        print(f"parity_import: --backends {a.backends!r}: expected some of {','.join(ROBOT_BACKENDS)}", file=sys.stderr)
        return 2
    try:
        io = dict(np.load(a.io))
        with native_stdout_silenced():  # MNN prints to fd 1
            res = {b: compare(a.bundle, io, a.task, b, a.threads) for b in backends}
    except (OSError, KeyError, ValueError, BundleError) as exc:
        print(f"parity_import: {str(exc).splitlines()[0]}; expected a bundle and an io.npz of a *_checkpoint.py",
              file=sys.stderr)
        return 2
    print(json.dumps({"bundle": str(a.bundle), "task": a.task, "threads": a.threads, "backends": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
