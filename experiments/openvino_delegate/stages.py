"""SmolVLA's stages through ExecuTorch's OpenVINO delegate, against onnxruntime and ExecuTorch/XNNPACK.

    # export (needs openvino 2025.x and nncf on PYTHONPATH: see README.md)
    python experiments/openvino_delegate/stages.py export runs/vla/smolvla_full_ov --weights runs/vla/ref_full/model.safetensors
    # bench, interleaved call by call, with parity against the eager stage (needs OPENVINO_LIB_PATH)
    python experiments/openvino_delegate/stages.py bench runs/vla/smolvla_full_ov --xnnpack runs/vla/smolvla_full \
        --weights runs/vla/ref_full/model.safetensors --threads 1 > bench.json

The ExecuTorch pip wheel ships an OpenVINO backend that dlopens libopenvino_c.so at run time. It imports the
compiled blob without properties, so OpenVINO's CPU defaults apply (bf16 on a CPU with AMX/AVX512-BF16, all
cores); plugins.xml next to the library sets them (README.md). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

from omni_vla_policies.vla.export_vla import build, export_stages
from omni_vla_policies.vla.model import stage_inputs, stage_modules
from omni_vla_policies.vla.parity_vla import snr_db
from omni_vla_policies.vla.runners import executorch_stage, onnxruntime_stage, torch_stage
from omni_vla_policies.vla.smolvla_config import SIZES

STAGES = ("vision", "prefix", "step")
REPS = {"vision": 3, "prefix": 5, "step": 10}


def export(out: Path, weights: Path | None, size: str) -> dict:
    return export_stages(build(SIZES[size](), weights), out, ("executorch",), STAGES, delegate="openvino",
                         log=lambda m: print(m, file=sys.stderr))


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
        runs = {"torch": torch_stage(model, name, threads), "onnxruntime": onnxruntime_stage(xnn_dir / f"{name}.onnx", name, threads),
                "executorch_xnnpack": executorch_stage(xnn_dir / f"{name}.pte", name, threads),
                "executorch_openvino": executorch_stage(ov_dir / f"{name}.pte", name, threads)}
        snr = {b: [round(snr_db(r, o), 1) for r, o in zip(ref, f(xs))] for b, f in runs.items()}
        times = {b: [] for b in runs}
        for _ in range(REPS[name]):
            for b, f in runs.items():
                t = time.perf_counter()
                f(xs)
                times[b].append(time.perf_counter() - t)
        med = {b: float(np.median(v)) for b, v in times.items()}
        rows[name] = {"median_ms": {b: round(1e3 * v, 1) for b, v in med.items()},
                      "max_ms": {b: round(1e3 * max(v), 1) for b, v in times.items()},
                      "vs_onnxruntime": {b: round(med["onnxruntime"] / v, 3) for b, v in med.items()},
                      "vs_torch": {b: round(med["torch"] / v, 3) for b, v in med.items()},
                      "snr_db_vs_eager": snr, "reps": REPS[name]}
        print(name, rows[name]["median_ms"], snr, file=sys.stderr)
        del runs
    return {"threads": threads, "load_average": os.getloadavg(), "openvino_cpu_defaults": _plugin_defaults(), "stages": rows}


def _plugin_defaults() -> dict[str, str]:
    """The CPU plugin properties plugins.xml beside OPENVINO_LIB_PATH sets (what the delegate ran with)."""
    lib = os.environ.get("OPENVINO_LIB_PATH", "")
    xml = Path(lib).parent / "plugins.xml" if lib else None
    if xml is None or not xml.is_file():
        return {}
    return dict(re.findall(r'key="([A-Z_]+)" value="([^"]*)"', xml.read_text()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("export", "bench"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--xnnpack", type=Path, default=Path("runs/vla/smolvla_full"))
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--size", default="full")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    result = export(a.dir, a.weights, a.size) if a.cmd == "export" else bench(a.dir, a.xnnpack, a.weights, a.size, a.threads)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
