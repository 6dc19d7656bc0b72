"""`omni-vla bench runtime --bundle <chunk bundle>`: one interleaved run of a format-3 chunk bundle (an imported
ACT) on eager PyTorch, onnxruntime, ExecuTorch and MNN at one thread count.

Every backend computes the same thing from the same raw inputs: the bundle's normalisation (numpy, as
ChunkRuntime applies it) around the network. Eager PyTorch is the importer's ActInference rebuilt from the
checkpoint the manifest names (skipped, with the reason, when that directory is gone); onnxruntime runs the
bundle's policy.onnx. Calls are interleaved in rotating order so drift on a noisy machine hits every backend
alike; medians and p99 per backend, and each robot runtime's speed-up over eager and over onnxruntime.

With more than one thread the run sleeps `gap_ms` between two calls: every backend's worker threads (torch's
OpenMP, onnxruntime's, XNNPACK's pthreadpool, MNN's) spin for a while after a call returns, and on two cores a
spinning pool of the previous backend took the second core from the next one (measured 2026-12-02: with no gap,
ExecuTorch and MNN showed no gain from a second thread while each alone gained 1.7-1.9x). A policy on the robot is
called every few control ticks, so its pool starts from sleep, as it does here. At one thread there is no pool and
no gap (a gap there only cooled the caches: every backend 10-25% slower under background load).
"""
from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omni_vla.backends import EAGER, PROGRAM_BACKENDS, ROBOT_BACKENDS
from omni_vla.inference.client import open_chunk_runtime
from omni_vla.runtime.chunk import read_chunk_manifest
from omni_vla.runtime.chunk_manifest import CHUNK_STAGE, ChunkManifest
from omni_vla_policies.act_model import ActInference
from omni_vla_policies.lerobot_checkpoint import CheckpointError, read_act_checkpoint

GAP_MS = 30.0  # sleep between two timed calls at > 1 thread: longer than the thread pools' spin-wait after a call


def _inputs(m: ChunkManifest, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    images = {c.name: rng.uniform(0, 1, (1, 3, c.height, c.width)).astype(np.float32) for c in m.cameras}
    state = rng.normal(0, 0.3, (1, len(m.state.joint_names))).astype(np.float32)
    cond = m.instruction_input
    condition = np.asarray(next(iter(cond.table.values())), np.float32)[None] if cond else None
    return images, state, condition


def _normalised(m: ChunkManifest, images: dict, state: np.ndarray, condition: np.ndarray | None) -> list[np.ndarray]:
    """The graph's inputs, as ChunkRuntime computes them."""
    def norm(key: str, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        a = m.normalization[key]
        sub, div = (np.asarray(v, np.float32).reshape(lead) for v in (a.subtract, a.divide))
        return ((x - sub) / div).astype(np.float32)

    out = [norm(c.name, images[c.name], (-1, 1, 1)) for c in m.cameras] + [norm("state", state, (-1,))]
    if condition is not None and m.instruction_input is not None:
        out.append(norm(m.instruction_input.input, condition, (-1,)))
    return out


def _runners(bundle: Path, m: ChunkManifest, threads: int, backends: tuple[str, ...]) -> tuple[dict, dict]:
    """name -> zero-argument call (raw inputs -> raw chunk), and name -> why it was skipped."""
    images, state, condition = _inputs(m)
    out = np.zeros((m.action.chunk_length, len(m.action.joint_names)), np.float32)
    act = m.normalization["action"]
    act_sub, act_div = np.asarray(act.subtract, np.float32), np.asarray(act.divide, np.float32)
    runners: dict[str, Callable[[], None]] = {}
    skipped: dict[str, str] = {}
    for name in ROBOT_BACKENDS:
        if name in backends:
            rt = open_chunk_runtime(name, bundle, threads)
            runners[name] = (lambda r: lambda: r.infer(images, state, out, condition))(rt)
    if "onnxruntime" in backends:
        spec = m.stages[CHUNK_STAGE].artifacts.get("onnx")
        if spec is None:
            skipped["onnxruntime"] = "the bundle has no onnx artifact (imported before it kept one)"
        else:
            import onnxruntime as ort  # optional: export extra, benchmarks only

            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
            sess = ort.InferenceSession(str(bundle / spec.file), opts, providers=["CPUExecutionProvider"])
            names = [i.name for i in sess.get_inputs()]

            def run_ort() -> None:
                feed = dict(zip(names, _normalised(m, images, state, condition)))
                np.add(sess.run(None, feed)[0].reshape(out.shape) * act_div, act_sub, out=out)

            runners["onnxruntime"] = run_ort
    if "torch" in backends:
        try:
            ck = read_act_checkpoint(m.source.get("checkpoint", ""))
        except CheckpointError as exc:
            skipped["torch"] = f"no eager reference: {exc}"
        else:
            torch.set_num_threads(threads)
            model = ActInference(ck.weights, ck.shape).eval()

            def run_torch() -> None:
                with torch.no_grad():
                    y = model(*(torch.from_numpy(x) for x in _normalised(m, images, state, condition)))
                np.add(y.numpy().reshape(out.shape) * act_div, act_sub, out=out)

            runners["torch"] = run_torch
    return runners, skipped


def bench_chunk(bundle: str | Path, threads: int, reps: int, warmup: int,
                backends: tuple[str, ...] = PROGRAM_BACKENDS, gap_ms: float = GAP_MS) -> dict:
    bundle = Path(bundle)
    m = read_chunk_manifest(bundle)
    runners, skipped = _runners(bundle, m, threads, backends)
    for run in runners.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {k: [] for k in runners}
    order = list(runners)
    for rep in range(reps):
        for name in order[rep % len(order):] + order[:rep % len(order)]:
            if threads > 1:
                time.sleep(gap_ms / 1e3)
            t0 = time.perf_counter()
            runners[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
    stats = {k: {"median_ms": round(float(np.median(v)), 3), "p99_ms": round(float(np.percentile(v, 99)), 3)}
             for k, v in times.items()}
    runners.clear()  # ExecuTorch's thread pool is process-wide: no program may outlive this thread count
    gc.collect()
    ratios = {}
    for fast in ROBOT_BACKENDS:
        for base in (EAGER, "onnxruntime"):
            if fast in stats and base in stats:
                ratios[f"{fast}_vs_{base}"] = round(stats[base]["median_ms"] / stats[fast]["median_ms"], 2)
    return {"bundle": str(bundle), "kind": "chunk", "policy": m.policy, "threads": threads, "reps": reps,
            "interleaved": True, "gap_ms": gap_ms if threads > 1 else 0.0, "backends": stats, "speedup": ratios, "skipped": skipped,
            "torch_threads": torch.get_num_threads()}
