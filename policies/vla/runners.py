"""One exported stage on one backend as `run(inputs) -> outputs` (numpy in, numpy out), for parity and benchmark.

Inputs are float32 except lang_tokens (int32). Each runner copies its outputs, so the caller may keep them across
calls (a runtime's output buffer is overwritten by its next run).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from omni_vla.backends import ARTIFACT_OF, EAGER, PROGRAM_BACKENDS, SUFFIX_OF
from omni_vla.runtime.mnn import import_mnn
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_policies.vla.model import STAGE_IO, SmolVLA, stage_modules

StageFn = Callable[[Sequence[np.ndarray]], list[np.ndarray]]
BACKENDS = PROGRAM_BACKENDS
SUFFIX = {backend: SUFFIX_OF[artifact] for backend, artifact in ARTIFACT_OF.items()}  # backend -> file it loads


def torch_stage(model: SmolVLA, stage: str, threads: int) -> StageFn:
    mod = stage_modules(model)[stage]
    torch.set_num_threads(threads)

    def run(xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = mod(*(torch.from_numpy(x) for x in xs))
        return [o.numpy().copy() for o in (out if isinstance(out, tuple) else (out,))]

    return run


def onnxruntime_stage(path: Path, stage: str, threads: int) -> StageFn:
    import onnxruntime as ort  # optional: extra "export", the baseline backend

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = STAGE_IO[stage][0]

    def run(xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return sess.run(None, dict(zip(names, xs)))

    return run


def executorch_stage(path: Path, stage: str, threads: int) -> StageFn:
    from executorch.extension.pybindings import portable_lib  # optional: extra "export"; loads for seconds, noisily
    from executorch.runtime import Runtime  # optional: extra "export"; loads for seconds, noisily

    if portable_lib._threadpool_get_thread_count() != threads:  # process-wide pool; callers release programs first
        portable_lib._unsafe_reset_threadpool(threads)
    program = Runtime.get().load_program(str(path))
    method = program.load_method("forward")

    def run(xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        _ = program  # keep the Program alive as long as the method (dropping it can segfault)
        return [o.numpy().copy() for o in method.execute([torch.from_numpy(np.ascontiguousarray(x)) for x in xs])]

    return run


def mnn_stage(path: Path, stage: str, threads: int) -> StageFn:
    MNN = import_mnn()  # noqa: N806
    ins, outs = STAGE_IO[stage]
    with native_stdout_silenced():
        rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": threads},))
        mod = MNN.nn.load_module_from_file(str(path), ins, outs, runtime_manager=rt, shape_mutable=False)
    if mod is None:
        raise RuntimeError(f"MNN could not load {path}")
    holders: list = []

    def run(xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not holders:
            holders.extend(MNN.expr.placeholder(list(x.shape), MNN.expr.NCHW,
                                                MNN.expr.dtype.int if x.dtype == np.int32 else MNN.expr.dtype.float)
                           for x in xs)
        for h, x in zip(holders, xs):
            h.write(x)
        return [np.array(o.read(), dtype=np.float32) for o in mod.forward(holders)]

    return run


def load_stage(backend: str, stage: str, threads: int, model: SmolVLA | None = None, art_dir: Path | None = None) -> StageFn:
    """`torch` runs the eager stage module; the others load art_dir/<stage>.<suffix>."""
    if backend == EAGER:
        assert model is not None
        return torch_stage(model, stage, threads)
    assert art_dir is not None
    path = art_dir / f"{stage}.{SUFFIX[backend]}"
    loader = {"onnxruntime": onnxruntime_stage, "executorch": executorch_stage, "mnn": mnn_stage}[backend]
    return loader(path, stage, threads)
