"""SmolVLA's stages on ExecuTorch's OpenVINO delegate against onnxruntime, ExecuTorch/XNNPACK and eager PyTorch:
median and max per call, interleaved call by call, with parity against the eager stage. Prints one JSON object.

    OPENVINO_LIB_PATH=LIB python -m omni_vla_policies.vla.bench_openvino OV_DIR \
        --xnnpack XNN_DIR [--weights model.safetensors] [--size full] [--threads 1] > bench.json

OV_DIR: `export_vla --backends executorch --delegate openvino --stages vision,prefix,step`; XNN_DIR: `export_vla`
with onnx and executorch, the same weights. LIB: a libopenvino_c.so; one whose plugins.xml sets f32 and the thread
count is what the robot runtime configures (omni_vla.runtime.openvino.configured_library, which says why).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omni_vla.backends import EAGER
from omni_vla.runtime.openvino import plugin_properties
from omni_vla_policies.vla.export_vla import build
from omni_vla_policies.vla.model import stage_inputs, stage_modules
from omni_vla_policies.snr import snr_db
from omni_vla_policies.vla.runners import executorch_stage, onnxruntime_stage, torch_stage
from omni_vla_policies.vla.smolvla_config import SIZES

STAGES = ("vision", "prefix", "step")
REPS = {"vision": 3, "prefix": 5, "step": 10}


def bench(ov_dir: Path, xnn_dir: Path, weights: Path | None, size: str, threads: int) -> dict:
    model = build(SIZES[size](), weights)
    mods, ins = stage_modules(model), stage_inputs(model.arch)
    torch.set_num_threads(threads)
    rows = {}
    for name in STAGES:
        xs = [t.numpy() for t in ins[name]]
        with torch.no_grad():
            ref = mods[name](*ins[name])
        ref = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
        runs = {EAGER: torch_stage(model, name, threads),
                "onnxruntime": onnxruntime_stage(xnn_dir / f"{name}.onnx", name, threads),
                "executorch_xnnpack": executorch_stage(xnn_dir / f"{name}.pte", name, threads),
                "executorch_openvino": executorch_stage(ov_dir / f"{name}.pte", name, threads)}
        snr = {b: [round(snr_db(r, o), 1) for r, o in zip(ref, f(xs))] for b, f in runs.items()}
        times: dict[str, list[float]] = {b: [] for b in runs}
        for _ in range(REPS[name]):
            for b, f in runs.items():
                t = time.perf_counter()
                f(xs)
                times[b].append(time.perf_counter() - t)
        med = {b: float(np.median(v)) for b, v in times.items()}
        rows[name] = {"median_ms": {b: round(1e3 * v, 1) for b, v in med.items()},
                      "max_ms": {b: round(1e3 * max(v), 1) for b, v in times.items()},
                      "vs_onnxruntime": {b: round(med["onnxruntime"] / v, 3) for b, v in med.items()},
                      "vs_torch": {b: round(med[EAGER] / v, 3) for b, v in med.items()},
                      "snr_db_vs_eager": snr, "reps": REPS[name]}
        print(name, rows[name]["median_ms"], snr, file=sys.stderr)
        del runs
    return {"threads": threads, "load_average": os.getloadavg(),
            "openvino_cpu_defaults": plugin_properties(os.environ.get("OPENVINO_LIB_PATH", "")), "stages": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="the OpenVINO-delegated stages")
    p.add_argument("--xnnpack", type=Path, required=True, help="the XNNPACK .pte and .onnx stages, same weights")
    p.add_argument("--weights", type=Path, default=None)
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    print(json.dumps(bench(a.dir, a.xnnpack, a.weights, a.size, a.threads), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
