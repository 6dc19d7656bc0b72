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

import numpy as np

from omni_vla.runtime.bundle import BundleError, BundleRuntimeBase, load_bundle


def import_mnn() -> ModuleType:
    """Import MNN with fd 1 silenced: its C++ init prints a CPU-feature line to stdout (breaks --json)."""
    if "MNN" in sys.modules:
        return sys.modules["MNN"]
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        import MNN
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    return MNN


class MNNRuntime(BundleRuntimeBase):
    """PolicyRuntime over the bundle's prefix.mnn and flow.mnn."""

    backend = "mnn"

    def __init__(self, bundle_dir: str | Path, num_threads: int = 1, check_versions: bool = True, warmup: bool = True) -> None:
        MNN = import_mnn()
        bundle_dir = Path(bundle_dir)
        manifest, paths = load_bundle(bundle_dir, "mnn", check_versions=check_versions)
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
        self._ctx_shape = manifest.stages["prefix"].outputs[0].shape
        self._result = np.zeros((self.horizon, self.action_dim), np.float32)
        if warmup:
            z = {n: np.zeros(s, np.float32) for n, s in self._shapes.items()}
            self.infer(z["front"], z["wrist"], z["state"], z["instruction"], z["prefix"], 0, z["noise"], self._result)

    def infer(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        self._check_inputs(front, wrist, state, instruction, prefix, prefix_len, noise, out)
        pv, fv = self._vars["prefix"], self._vars["flow"]
        pv[0].write(front)
        pv[1].write(wrist)
        pv[2].write(state)
        pv[3].write(instruction)
        ctx = self._modules["prefix"].forward(pv)[0].read()
        if ctx.shape != self._ctx_shape:
            raise BundleError(f"MNN prefix stage returned {ctx.shape}, manifest says {self._ctx_shape}")
        fv[0].write(np.ascontiguousarray(ctx, np.float32))
        fv[1].write(state)
        fv[2].write(noise)
        fv[3].write(prefix)
        fv[4].write(self._set_mask(prefix_len))
        res = self._modules["flow"].forward(fv)[0].read()
        np.copyto(out, res.reshape(out.shape))

    def run_prefix(self) -> None:
        """The prefix stage alone on the last infer()'s inputs (profiling: how the time splits)."""
        self._modules["prefix"].forward(self._vars["prefix"])[0].read()

    def run_stages(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray,
                   context: np.ndarray, noise: np.ndarray, prefix: np.ndarray, prefix_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Each stage on its own (diagnostics/parity, allocates): (context from the images, actions from `context`)."""
        pv, fv = self._vars["prefix"], self._vars["flow"]
        for v, x in zip(pv, (front, wrist, state, instruction)):
            v.write(x)
        ctx = np.array(self._modules["prefix"].forward(pv)[0].read(), np.float32)
        for v, x in zip(fv, (context, state, noise, prefix, self._set_mask(prefix_len))):
            v.write(np.ascontiguousarray(x, np.float32))
        act = np.array(self._modules["flow"].forward(fv)[0].read(), np.float32)
        return ctx, act.reshape(self.horizon, self.action_dim)

    def close(self) -> None:
        self._modules.clear()
        self._vars.clear()
