"""MNN PolicyRuntime: no torch anywhere on this path (tested in a subprocess).

Threads are set in the runtime manager (load_module's thread_num is ignored). Input placeholders
are created once and refilled with `var.write` each call; outputs are copied out of MNN's buffer
(`read()` is a view that the next forward overwrites).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Mapping, Sequence

import numpy as np

from omni_vla.runtime.base import BundleRuntimeBase
from omni_vla.runtime.bundle import BundleError, BundleManifest, load_bundle
from omni_vla.runtime.chunk_manifest import ChunkStageSpec
from omni_vla.runtime.flow import SteppedFlow
from omni_vla.runtime.text import TextEncoderFn


def import_mnn() -> ModuleType:
    """Import MNN with fd 1 silenced: its C++ init prints a CPU-feature line to stdout (breaks --json)."""
    if "MNN" in sys.modules:
        return sys.modules["MNN"]
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        import MNN  # optional: imported here with fd 1 silenced, its C++ init prints to stdout
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    return MNN


def make_mnn_encoder(path: Path, num_threads: int) -> TextEncoderFn:
    """The exported MiniLM text encoder (.mnn) as (input_ids, attention_mask) -> embedding."""
    MNN = import_mnn()
    rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": num_threads},))
    mod = MNN.nn.load_module_from_file(str(path), ["input_ids", "attention_mask"], ["embedding"],
                                       runtime_manager=rt, shape_mutable=False)
    holders: list = []

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if not holders:
            holders.extend(MNN.expr.placeholder(list(ids.shape), MNN.expr.NCHW, MNN.expr.dtype.int) for _ in range(2))
        holders[0].write(ids)
        holders[1].write(mask)
        return np.array(mod.forward(holders)[0].read(), dtype=np.float32).reshape(-1)

    return run


def load_program(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray],
                 num_threads: int) -> Callable[[], list[np.ndarray]]:
    """One stage of a format-3 bundle: run() reads `inputs` (refilled in place by the caller, float32 or int32 as
    the stage's TensorSpecs say) and returns every output (views the next run overwrites)."""
    MNN = import_mnn()
    rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": num_threads},))
    mod = MNN.nn.load_module_from_file(str(path), [t.name for t in stage.inputs], [t.name for t in stage.outputs],
                                       runtime_manager=rt, shape_mutable=False)
    if mod is None:
        raise BundleError(f"MNN could not load {path}")
    kinds = {"float32": MNN.expr.dtype.float, "int32": MNN.expr.dtype.int}
    holders = [MNN.expr.placeholder(list(t.shape), MNN.expr.NCHW, kinds[t.dtype]) for t in stage.inputs]

    def run() -> list[np.ndarray]:
        for holder, x in zip(holders, inputs):
            holder.write(x)
        return [o.read() for o in mod.forward(holders)]

    return run


def load_chunk_program(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray],
                       num_threads: int) -> Callable[[], np.ndarray]:
    """A kind-"chunk" bundle's program (runtime/chunk.py): its one output."""
    run = load_program(path, stage, inputs, num_threads)
    return lambda: run()[0]


class MNNRuntime(BundleRuntimeBase):
    """PolicyRuntime over the bundle's prefix.mnn and flow_{init,step,finish}.mnn."""

    backend = "mnn"
    make_text_encoder = staticmethod(make_mnn_encoder)

    def __init__(self, bundle_dir: str | Path, num_threads: int = 1, check_versions: bool = True, warmup: bool = True,
                 manifest: BundleManifest | None = None) -> None:
        MNN = import_mnn()
        bundle_dir = Path(bundle_dir)
        manifest, paths = load_bundle(bundle_dir, "mnn", check_versions=check_versions, manifest=manifest)
        self._init_common(bundle_dir, manifest, num_threads)
        self._rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": num_threads},))
        self._modules = {}
        self._vars: dict[str, list] = {}
        for stage, path in paths.items():
            spec = manifest.stages[stage]
            mod = MNN.nn.load_module_from_file(str(path), [t.name for t in spec.inputs], [t.name for t in spec.outputs],
                                               runtime_manager=self._rt, shape_mutable=False)
            if mod is None:
                raise BundleError(f"MNN could not load {path}")
            self._modules[stage] = mod
            self._vars[stage] = [MNN.expr.placeholder(list(t.shape), MNN.expr.NCHW, MNN.expr.dtype.float) for t in spec.inputs]
        self._out_shapes = {k: [t.shape for t in manifest.stages[k].outputs] for k in paths}
        self._flow = SteppedFlow(manifest, self._call, lambda a: a, np.copyto)
        self._result = np.zeros((self.horizon, self.action_dim), np.float32)
        if warmup:
            z = {n: np.zeros(s, np.float32) for n, s in self._shapes.items()}
            self.infer({"front": z["front"], "wrist": z["wrist"]}, z["state"], z["instruction"], z["prefix"], 0, z["noise"], self._result)

    def _call(self, stage: str, inputs: Sequence[np.ndarray], fresh: tuple[int, ...] | None = None) -> list[np.ndarray]:
        """Write the changed inputs into the stage's placeholders, run it; outputs are views MNN overwrites next call."""
        v = self._vars[stage]
        for i in range(len(v)) if fresh is None else fresh:
            v[i].write(inputs[i])
        outs = [o.read() for o in self._modules[stage].forward(v)]
        got = [o.shape for o in outs]
        if got != self._out_shapes[stage]:
            raise BundleError(f"MNN stage {stage} returned {got}, manifest says {self._out_shapes[stage]}")
        return outs

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        front, wrist = self._check_inputs(images, state, instruction, prefix, prefix_len, noise, out)
        ctx = self._call("prefix", (front, wrist, state, instruction))[0]
        res = self._flow(np.ascontiguousarray(ctx, np.float32), state, noise, prefix, self._set_mask(prefix_len))
        np.copyto(out, res.reshape(out.shape))

    def run_prefix(self) -> None:
        """The prefix stage alone on the last infer()'s inputs (profiling: how the time splits)."""
        self._modules["prefix"].forward(self._vars["prefix"])[0].read()

    def run_stages(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray,
                   context: np.ndarray, noise: np.ndarray, prefix: np.ndarray, prefix_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Each stage on its own (diagnostics/parity, allocates): (context from the images, actions from `context`)."""
        def c(x: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(x, np.float32)

        ctx = np.array(self._call("prefix", (c(front), c(wrist), c(state), c(instruction)))[0], np.float32)
        act = np.array(self._flow(c(context), c(state), c(noise), c(prefix), self._set_mask(prefix_len)), np.float32)
        return ctx, act.reshape(self.horizon, self.action_dim)

    def close(self) -> None:
        self._modules.clear()
        self._vars.clear()
