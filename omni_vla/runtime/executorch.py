"""ExecuTorch (XNNPACK) PolicyRuntime: the only omni_vla module that imports torch.

ExecuTorch's Python runtime takes only torch tensors: inputs are numpy buffers allocated once with
zero-copy torch views (torch.from_numpy), and outputs are read without a clone
(`method._method(inputs, clone_outputs=False)` returns the runtime's own buffer, overwritten by the
next call). The Programs are kept referenced for the runtime's lifetime (dropping one while its
methods live segfaulted). Note: ExecuTorch `execute` holds the GIL; run it out of the tick thread.
"""
from __future__ import annotations

import weakref
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime

from omni_vla.runtime.base import BundleRuntimeBase
from omni_vla.runtime.bundle import ArtifactSpec, BundleError, BundleManifest, load_bundle
from omni_vla.runtime.chunk_manifest import ChunkStageSpec
from omni_vla.runtime.flow import SteppedFlow
from omni_vla.runtime.openvino import use_openvino
from omni_vla.runtime.text import TextEncoderFn


_LIVE_RUNTIMES: "weakref.WeakSet[ExecuTorchRuntime]" = weakref.WeakSet()


def set_executorch_threads(num_threads: int) -> None:
    """Size the process-wide XNNPACK thread pool, before any method is loaded.

    Resetting the pool under loaded XNNPACK delegates crashed (segfault measured on the MiniLM .pte),
    so a different size is refused while another ExecuTorch runtime of this process is alive.
    """
    n = int(num_threads)
    if portable_lib._threadpool_get_thread_count() == n:
        return
    live = [r for r in _LIVE_RUNTIMES if r._methods]
    if live:
        raise RuntimeError(f"ExecuTorch's thread pool is process-wide and {len(live)} runtime(s) with "
                           f"{live[0].num_threads} thread(s) are alive; close them before using {n} threads")
    portable_lib._unsafe_reset_threadpool(n)


def make_executorch_encoder(path: Path, num_threads: int) -> TextEncoderFn:
    """The exported MiniLM text encoder (.pte) as (input_ids, attention_mask) -> embedding."""
    program = Runtime.get().load_program(str(path))
    method = program.load_method("forward")

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = method.execute([torch.from_numpy(ids), torch.from_numpy(mask)])[0]
        _ = program  # keep the Program alive as long as the method (dropping it can segfault)
        return out.numpy().astype(np.float32).reshape(-1)

    return run


def prepare_delegate(spec: ArtifactSpec | None, path: Path, num_threads: int) -> None:
    """Before a program loads: an OpenVINO-delegated one gets its library configured (runtime/openvino.py)."""
    if spec is not None and spec.delegate == "openvino":
        use_openvino(spec.compute_dtype, num_threads, str(path))


def load_program(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray],
                 num_threads: int) -> Callable[[], list[np.ndarray]]:
    """One stage of a format-3 bundle: run() reads `inputs` through zero-copy torch views and returns every
    output (the runtime's own buffers, overwritten by the next run)."""
    set_executorch_threads(num_threads)
    prepare_delegate(stage.artifacts.get("executorch"), path, num_threads)
    try:
        program = Runtime.get().load_program(str(path))
        method = program.load_method("forward")
    except Exception as e:  # the C++ loader raises RuntimeError/ValueError on bad programs
        raise BundleError(f"ExecuTorch could not load {path}: {e}") from e
    meta = method.metadata
    for i, t in enumerate(stage.inputs):
        if tuple(meta.input_tensor_meta(i).sizes()) != t.shape:
            raise BundleError(f"{path}: input {i} ({t.name}) has shape {tuple(meta.input_tensor_meta(i).sizes())}, "
                              f"manifest says {t.shape}")
    views = [torch.from_numpy(x) for x in inputs]

    def run() -> list[np.ndarray]:
        _ = program  # keep the Program alive as long as the method (dropping it can segfault)
        return [o.numpy() for o in method._method(views, clone_outputs=False)]

    return run


def load_chunk_program(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray],
                       num_threads: int) -> Callable[[], np.ndarray]:
    """A kind-"chunk" bundle's program (runtime/chunk.py): its one output."""
    run = load_program(path, stage, inputs, num_threads)
    return lambda: run()[0]


class ExecuTorchRuntime(BundleRuntimeBase):
    """PolicyRuntime over the bundle's prefix.pte and flow_{init,step,finish}.pte."""

    backend = "executorch"
    make_text_encoder = staticmethod(make_executorch_encoder)

    def __init__(self, bundle_dir: str | Path, num_threads: int = 1, check_versions: bool = True, warmup: bool = True,
                 manifest: BundleManifest | None = None) -> None:
        bundle_dir = Path(bundle_dir)
        self._methods: dict = {}
        manifest, paths = load_bundle(bundle_dir, "executorch", check_versions=check_versions, manifest=manifest)
        set_executorch_threads(num_threads)  # before anything (text encoder included) is loaded
        self._init_common(bundle_dir, manifest, num_threads)
        _LIVE_RUNTIMES.add(self)
        rt = Runtime.get()
        self._programs = {}
        for stage, path in paths.items():
            prepare_delegate(manifest.stages[stage].artifacts.get("executorch"), path, num_threads)
            try:
                self._programs[stage] = rt.load_program(str(path))
                self._methods[stage] = self._programs[stage].load_method("forward")
            except Exception as e:  # the C++ loader raises RuntimeError/ValueError on bad programs
                raise BundleError(f"ExecuTorch could not load {path}: {e}") from e
        for stage, method in self._methods.items():
            spec = manifest.stages[stage]
            meta = method.metadata
            if meta.num_inputs() != len(spec.inputs) or meta.num_outputs() != len(spec.outputs):
                raise BundleError(f"{paths[stage]}: {meta.num_inputs()} inputs/{meta.num_outputs()} outputs, "
                                  f"manifest says {len(spec.inputs)}/{len(spec.outputs)}")
            for i, t in enumerate(spec.inputs):
                got = tuple(meta.input_tensor_meta(i).sizes())
                if got != t.shape:
                    raise BundleError(f"{paths[stage]}: input {i} ({t.name}) has shape {got}, manifest says {t.shape}")
            for i, t in enumerate(spec.outputs):
                got = tuple(meta.output_tensor_meta(i).sizes())
                if got != t.shape:
                    raise BundleError(f"{paths[stage]}: output {i} ({t.name}) has shape {got}, manifest says {t.shape}")
        f = manifest.stages["flow_init"].inputs
        self._buffers = {t.name: np.zeros(t.shape, np.float32) for t in [*manifest.stages["prefix"].inputs, *f[2:4]]}
        self._t = {k: torch.from_numpy(v) for k, v in self._buffers.items()}
        self._prefix_in = [self._t[t.name] for t in manifest.stages["prefix"].inputs]
        self._mask_t = torch.from_numpy(self._mask)
        self._flow = SteppedFlow(manifest, self._call, torch.from_numpy, lambda dst, src: dst.copy_(src))
        if warmup:
            self._run()

    def _call(self, stage: str, inputs: Sequence[torch.Tensor], fresh: tuple[int, ...] | None = None) -> list[torch.Tensor]:
        """The stage's outputs are the runtime's own buffers (no clone): overwritten by its next call."""
        return self._methods[stage]._method(list(inputs), clone_outputs=False)

    def _run(self) -> torch.Tensor:
        ctx = self._call("prefix", self._prefix_in)[0]  # flow_init reads the prefix program's output buffer
        return self._flow(ctx, self._t["state"], self._t["noise"], self._t["prefix"], self._mask_t)

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        front, wrist = self._check_inputs(images, state, instruction, prefix, prefix_len, noise, out)
        b = self._buffers
        for name, arr in (("front", front), ("wrist", wrist), ("state", state), ("instruction", instruction),
                          ("noise", noise), ("prefix", prefix)):
            np.copyto(b[name], arr)
        self._set_mask(prefix_len)
        np.copyto(out, self._run().numpy()[0])

    def run_prefix(self) -> None:
        """The prefix stage alone on the last infer()'s inputs (profiling: how the time splits)."""
        self._call("prefix", self._prefix_in)

    def run_stages(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray,
                   context: np.ndarray, noise: np.ndarray, prefix: np.ndarray, prefix_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Each stage on its own (diagnostics/parity, allocates): (context from the images, actions from `context`)."""
        def t(x: np.ndarray) -> torch.Tensor:  # ExecuTorch reads raw memory: strides must be C-contiguous
            return torch.from_numpy(np.ascontiguousarray(x, np.float32))

        ctx = self._call("prefix", [t(front), t(wrist), t(state), t(instruction)])[0].numpy().copy()
        mask = self._set_mask(prefix_len).copy()
        act = self._flow(t(context), t(state), t(noise), t(prefix), t(mask)).numpy().copy()
        return ctx, act[0]

    def close(self) -> None:
        self._methods.clear()
        self._programs.clear()
