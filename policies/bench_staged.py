"""`omni-vla bench runtime` on a staged VLA bundle (kind "vla": SmolVLA, pi0, pi0.5 imported from LeRobot): one whole
chunk (vision per camera -> prefix -> N flow steps -> finish) through the robot's own StagedVLARuntime on each robot
runtime the bundle holds, same seeded observation, interleaved in one process; median and p99 per thread count.
With few repetitions p99 is the slowest. Load seconds and this process's peak RSS after loading and running are
reported too: a multi-GB bundle is as much about memory as speed.
"""
from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.registry import robot_module
from omni_vla.runtime.vla import StagedVLARuntime, read_vla_manifest
from omni_vla_policies.bench_runtime import peak_rss_kb

INSTRUCTION = "pick up the cube and place it in the bin"


def observation(rt: StagedVLARuntime, seed: int = 0) -> tuple:
    """Images, a state at the statistics' mean, the instruction, and noise: what one inference takes."""
    rng = np.random.default_rng(seed)
    images = {c.name: rng.random((1, 3, c.height, c.width), dtype=np.float32) for c in rt.cameras}
    state = np.asarray(rt.manifest.normalization["state"].subtract, np.float32)[None]
    noise = rng.standard_normal((1, rt.horizon, rt.action_dim)).astype(np.float32)
    table = rt.manifest.language.table  # a bundle without a tokenizer knows only its table's instructions
    text = INSTRUCTION if not table or INSTRUCTION in table else sorted(table)[0]
    return images, state, rt.encode_instruction(text)[None], noise


def bench_staged(bundle: str | Path, threads: int, reps: int, warmup: int,
                 backends: tuple[str, ...] = ROBOT_BACKENDS) -> dict:
    bundle = Path(bundle)
    m = read_vla_manifest(bundle)
    held = [b for b in backends if b in ROBOT_BACKENDS and all(b in s.artifacts for s in m.stages.values())]
    skipped = {b: "not in the bundle" if b in ROBOT_BACKENDS else "not a robot runtime" for b in backends
               if b not in held}
    runtimes, load_s = {}, {}
    for b in held:
        t0 = time.perf_counter()
        runtimes[b] = StagedVLARuntime(bundle, b, robot_module(b).load_program, num_threads=threads)
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
            "backends": stats, "skipped": skipped, "peak_rss_mb": round(peak_rss_kb() / 1024, 1)}
