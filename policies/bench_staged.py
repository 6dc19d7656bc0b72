"""`omni-vla bench runtime` on a staged VLA bundle (kind "vla": SmolVLA, pi0, pi0.5 imported from LeRobot): one whole
chunk (vision per camera -> prefix -> N flow steps -> finish) through the robot's own StagedVLARuntime on each robot
runtime the bundle holds, and on onnxruntime (the baseline) when it holds the ONNX programs, same seeded
observation, interleaved in one process; median and p99 per thread count.
With few repetitions p99 is the slowest. Load seconds and this process's peak RSS after loading and running are
reported too: a multi-GB bundle is as much about memory as speed.

`stages`: each stage alone as well (its program on the inputs the last chunk left in its buffers, interleaved across
runtimes), the chunk rebuilt from them (cameras x vision + prefix + steps x step + finish), and each stage's GFLOP/s
(FLOPs the manifest recorded at export) against a 1024^3 sgemm at the same thread count in the same run.
"""
from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from omni_vla.backends import ARTIFACT_OF, ROBOT_BACKENDS
from omni_vla.runtime.chunk_manifest import ChunkStageSpec
from omni_vla.runtime.registry import robot_module
from omni_vla.runtime.vla import StagedVLARuntime, read_vla_manifest
from omni_vla_policies.bench_runtime import peak_rss_kb, sgemm_gflops

INSTRUCTION = "pick up the cube and place it in the bin"
BASELINE = "onnxruntime"  # on the bundle's ONNX programs (listed when it was imported for MNN): the ratio's reference


def observation(rt: StagedVLARuntime, seed: int = 0) -> tuple:
    """Images, a state at the statistics' mean, the instruction, and noise: what one inference takes."""
    rng = np.random.default_rng(seed)
    images = {c.name: rng.random((1, 3, c.height, c.width), dtype=np.float32) for c in rt.cameras}
    state = np.asarray(rt.manifest.normalization["state"].subtract, np.float32)[None]
    noise = rng.standard_normal((1, rt.horizon, rt.action_dim)).astype(np.float32)
    table = rt.manifest.language.table  # a bundle without a tokenizer knows only its table's instructions
    text = INSTRUCTION if not table or INSTRUCTION in table else sorted(table)[0]
    return images, state, rt.encode_instruction(text)[None], noise


def onnxruntime_program(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray],
                        num_threads: int) -> Callable[[], Sequence[np.ndarray]]:
    """A stage's ONNX program on onnxruntime (the baseline, not a robot runtime): the LoadProgram contract of
    StagedVLARuntime, so the baseline runs the same tokeniser, normalisation and Euler loop as the robot's."""
    import onnxruntime as ort  # optional: extra "export"

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = num_threads, 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names_in, names_out = [t.name for t in stage.inputs], [t.name for t in stage.outputs]

    def run() -> Sequence[np.ndarray]:
        return session.run(names_out, dict(zip(names_in, inputs)))

    return run


def _open(bundle: Path, backend: str, threads: int) -> StagedVLARuntime:
    if backend == BASELINE:
        return StagedVLARuntime(bundle, ARTIFACT_OF[BASELINE], onnxruntime_program, num_threads=threads)
    return StagedVLARuntime(bundle, backend, robot_module(backend).load_program, num_threads=threads)


def _stats(ms: list[float]) -> dict[str, float]:
    return {"median_ms": round(float(np.median(ms)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def time_stages(runtimes: dict[str, StagedVLARuntime], reps: int, threads: int) -> dict:
    """Each stage alone on each runtime, interleaved; the chunk they add up to; GFLOP/s against the sgemm roofline."""
    m = next(iter(runtimes.values())).manifest
    calls = {"vision": len(m.cameras), "prefix": 1, "step": m.flow.num_steps, "finish": 1}
    times: dict[str, dict[str, list[float]]] = {b: {s: [] for s in calls} for b in runtimes}
    order = list(runtimes)
    for stage in calls:
        programs = {b: rt.stage_program(stage) for b, rt in runtimes.items()}
        for rep in range(reps):
            for b in order[rep % len(order):] + order[:rep % len(order)]:
                t0 = time.perf_counter()
                programs[b]()
                times[b][stage].append((time.perf_counter() - t0) * 1e3)
    sgemm = sgemm_gflops(threads, n=1024, reps=10)
    flops = {s: m.stages[s].flops for s in calls}
    out: dict = {"calls_per_chunk": calls, "flops": flops, "sgemm_gflops": round(sgemm, 2), "backends": {}}
    for b, per in times.items():
        st = {s: _stats(v) for s, v in per.items()}
        for s, f in flops.items():
            if f:
                st[s]["gflops"] = round(f / st[s]["median_ms"] / 1e6, 2)
                st[s]["fraction_of_sgemm"] = round(st[s]["gflops"] / sgemm, 3)
        chain = sum(calls[s] * st[s]["median_ms"] for s in calls)
        out["backends"][b] = {"stages": st, "chain_ms": round(chain, 1)}
    return out


def bench_staged(bundle: str | Path, threads: int, reps: int, warmup: int,
                 backends: tuple[str, ...] = ROBOT_BACKENDS, stages: bool = False) -> dict:
    bundle = Path(bundle)
    m = read_vla_manifest(bundle)
    runnable = (*ROBOT_BACKENDS, BASELINE)
    held = [b for b in backends if b in runnable and all(ARTIFACT_OF[b] in s.artifacts for s in m.stages.values())]
    skipped = {b: "not in the bundle" if b in runnable else "runs the reference kind only" for b in backends
               if b not in held}
    runtimes, load_s = {}, {}
    for b in held:
        t0 = time.perf_counter()
        runtimes[b] = _open(bundle, b, threads)
        load_s[b] = round(time.perf_counter() - t0, 2)
    out = np.zeros((m.action.chunk_length, len(m.action.joint_names)), np.float32)
    times: dict[str, list[float]] = {b: [] for b in runtimes}
    if runtimes:
        images, state, lang, noise = observation(next(iter(runtimes.values())))
        prefix = np.zeros_like(noise)
        for rt in runtimes.values():
            for _ in range(warmup):
                rt.infer(images, state, lang, prefix, 0, noise, out)
        order = list(runtimes)
        for rep in range(reps):
            for b in order[rep % len(order):] + order[:rep % len(order)]:
                t0 = time.perf_counter()
                runtimes[b].infer(images, state, lang, prefix, 0, noise, out)
                times[b].append((time.perf_counter() - t0) * 1e3)
    per_stage = time_stages(runtimes, reps, threads) if stages and runtimes else None
    for rt in runtimes.values():
        rt.close()
    runtimes.clear()  # ExecuTorch's thread pool is process-wide: no program may outlive this thread count
    gc.collect()
    stats = {b: {"median_ms": round(float(np.median(v)), 1), "p99_ms": round(float(np.percentile(v, 99)), 1),
                 "load_s": load_s[b]} for b, v in times.items()}
    return {"bundle": str(bundle), "kind": "vla", "policy": m.policy, "threads": threads, "reps": reps,
            "warmup": warmup, "interleaved": True, "flow_steps": m.flow.num_steps,
            "cameras": [f"{c.name} {c.height}x{c.width}" for c in m.cameras],
            "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir() if p.is_file()),
            "backends": stats, "skipped": skipped, "peak_rss_mb": round(peak_rss_kb() / 1024, 1),
            **({"stages": per_stage} if per_stage else {})}
