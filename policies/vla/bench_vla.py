"""SmolVLA per-stage benchmark: eager PyTorch, onnxruntime, ExecuTorch and MNN on the same inputs, per thread count.

    python -m omni_vla_policies.vla.bench_vla ART_DIR --weights model.safetensors --threads 1,2 --json

ART_DIR is what export_vla wrote. Timing as bench_runtime: one stage at a time (its four backends loaded, then
released), a warm-up call each, then every repetition runs every backend once in a rotating order; median and
p99 in ms (with few repetitions p99 is the slowest). `chain_ms` adds the stages as one inference runs them
(cameras x vision + prefix + num_steps x step + finish). Cold start and peak RSS come from a fresh subprocess
per backend that imports, loads all four stages and runs one whole inference (`cold_start_s`, from process
start), then two more (`warm_chain_ms`, their median): the RSS a robot process running that backend would have.
`roofline`: each stage's FLOPs (counted on the eager stage) over the median, against a 1024^3 sgemm at the same
threads.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omni_vla_policies.bench_runtime import peak_rss_kb, process_age_s, sgemm_gflops
from omni_vla_policies.vla.export_vla import build, stage_flops
from omni_vla_policies.vla.model import stage_inputs
from omni_vla_policies.vla.parity_vla import chain
from omni_vla_policies.vla.runners import BACKENDS, SUFFIX, load_stage
from omni_vla_policies.vla.smolvla_config import SmolVLAArch

STAGES = ("vision", "prefix", "step", "finish")
REPS = {"vision": 5, "prefix": 8, "step": 20, "finish": 50}


def numpy_inputs(arch: SmolVLAArch) -> dict[str, list[np.ndarray]]:
    return {k: [t.numpy() for t in v] for k, v in stage_inputs(arch).items()}


def chain_io(arch: SmolVLAArch) -> dict[str, np.ndarray]:
    """Inputs of one whole inference, in parity_vla.chain's layout."""
    ins = numpy_inputs(arch)
    rng = np.random.default_rng(0)
    s = arch.vision.image_size
    return {"images": rng.random((arch.cameras, 1, 3, s, s), dtype=np.float32),
            "lang_tokens": ins["prefix"][1], "lang_mask": ins["prefix"][2], "state_padded": ins["prefix"][3],
            "noise": ins["step"][0]}


def bench_stages(art_dir: Path, model: torch.nn.Module, threads: int, backends: tuple[str, ...],
                 reps: dict[str, int]) -> dict:
    arch, ins = model.arch, numpy_inputs(model.arch)
    res: dict = {}
    for stage in STAGES:
        fns = {b: load_stage(b, stage, threads, model, art_dir) for b in backends}
        for fn in fns.values():
            fn(ins[stage])
        times: dict[str, list[float]] = {b: [] for b in backends}
        order = list(backends)
        for _ in range(reps[stage]):
            order = order[1:] + order[:1]
            for b in order:
                t0 = time.perf_counter()
                fns[b](ins[stage])
                times[b].append((time.perf_counter() - t0) * 1e3)
        res[stage] = {b: {"median_ms": round(float(np.median(t)), 4), "p99_ms": round(float(np.percentile(t, 99)), 4)}
                      for b, t in times.items()}
        del fns
        gc.collect()
    counts = {"vision": arch.cameras, "prefix": 1, "step": arch.num_steps, "finish": 1}
    res["chain_ms"] = {b: round(sum(counts[s] * res[s][b]["median_ms"] for s in STAGES), 1) for b in backends}
    return res


def cold_start(art_dir: Path, weights: Path, backend: str, threads: int) -> dict:
    """In this (fresh) process: imports, load of all stages and the first inference, then two more."""
    arch = SmolVLAArch.model_validate_json((art_dir / "arch.json").read_text())
    model = build(arch, weights) if backend == "torch" else None
    stages = {s: load_stage(backend, s, threads, model, art_dir) for s in STAGES}
    io = chain_io(arch)
    chain(stages, arch, io)
    cold = process_age_s()
    warm = []
    for _ in range(2):
        t0 = time.perf_counter()
        chain(stages, arch, io)
        warm.append((time.perf_counter() - t0) * 1e3)
    return {"cold_start_s": round(cold, 2), "warm_chain_ms": round(float(np.median(warm)), 1),
            "peak_rss_mb": round(peak_rss_kb() / 1024, 1)}


def cold_start_subprocess(art_dir: Path, weights: Path, backend: str, threads: int) -> dict:
    cmd = [sys.executable, "-m", "omni_vla_policies.vla.bench_vla", str(art_dir), "--weights", str(weights),
           "--cold-start", backend, "--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc={r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench(art_dir: Path, weights: Path, threads: list[int], backends: tuple[str, ...], reps: dict[str, int],
          cold: bool = True) -> dict:
    arch = SmolVLAArch.model_validate_json((art_dir / "arch.json").read_text())
    model = build(arch, weights)
    flops = stage_flops(model)
    sizes = {b: {s: (art_dir / f"{s}.{SUFFIX[b]}").stat().st_size for s in STAGES} for b in backends if b != "torch"}
    out: dict = {"arch": arch.model_dump(), "parameters": sum(p.numel() for p in model.parameters()),
                 "flops": flops, "artifact_bytes": sizes, "reps": reps, "per_threads": {}}
    for t in threads:
        res = bench_stages(art_dir, model, t, backends, reps)
        sg = sgemm_gflops(t, n=1024, reps=10)
        res["sgemm_gflops"] = sg
        res["fraction_of_sgemm"] = {s: {b: round(flops[s] / res[s][b]["median_ms"] / 1e6 / sg, 3) for b in backends}
                                    for s in ("vision", "prefix", "step")}
        if cold:
            res["cold"] = {b: cold_start_subprocess(art_dir, weights, b, t) for b in backends}
        out["per_threads"][str(t)] = res
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("art_dir", type=Path)
    p.add_argument("--weights", type=Path, required=True)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--reps", default=",".join(f"{k}={v}" for k, v in REPS.items()), help="stage=n,...")
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--cold-start", choices=BACKENDS, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not (args.art_dir / "arch.json").is_file():
        print(f"{args.art_dir} has no arch.json: expected the output directory of export_vla", file=sys.stderr)
        return 2
    if not args.weights.is_file():
        print(f"--weights {args.weights} is not a file: expected the model.safetensors the stages were exported from",
              file=sys.stderr)
        return 2
    threads = [int(t) for t in args.threads.split(",")]
    if args.cold_start:
        print(json.dumps(cold_start(args.art_dir, args.weights, args.cold_start, threads[0])))
        return 0
    reps = {**REPS, **{k: int(v) for k, v in (kv.split("=") for kv in args.reps.split(",") if kv)}}
    result = bench(args.art_dir, args.weights, threads, tuple(args.backends.split(",")), reps, cold=not args.no_cold)
    print(json.dumps(result, indent=None if args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
