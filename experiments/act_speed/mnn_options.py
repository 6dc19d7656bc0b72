"""MNN converter and runtime options on the imported ACT's ONNX form, timed interleaved in one process:
converter --optimizePrefer 2 / --saveStaticModel, runtime precision normal/low, memory/power modes, and whether
numThread reaches the session (1 vs 2 threads of the same file).

    python experiments/act_speed/mnn_options.py CHECKPOINT_DIR --reps 60 --json OUT
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from parts import emit, interleaved
from omni_vla.runtime.mnn import import_mnn
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import convert_mnn, export_onnx
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint

CONVERT = {"default": [], "prefer_fastest": ["--optimizePrefer", "2"], "static": ["--saveStaticModel"]}
RUNTIME = {"high": {"precision": "high"}, "normal": {"precision": "normal"}, "low": {"precision": "low"},
           "high_power": {"precision": "high", "power": "high"}, "high_memhigh": {"precision": "high", "memory": "high"}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    MNN = import_mnn()
    ck = read_act_checkpoint(a.checkpoint)
    s = ck.shape
    ref_model = ActInference(ck.weights, s).eval()
    model = act_export_form(ref_model, xnnpack=False)
    rng = np.random.default_rng(0)
    args = [rng.normal(0, 1, (1, 3, *s.image_hw)).astype(np.float32) for _ in range(s.cameras)]
    args += [rng.normal(0, 1, (1, s.state_dim)).astype(np.float32)]
    if s.env_dim:
        args += [rng.normal(0, 1, (1, s.env_dim)).astype(np.float32)]
    names = [f"in{i}" for i in range(len(args))]
    with torch.no_grad():
        ref = ref_model(*(torch.from_numpy(x) for x in args)).numpy()
    calls, err = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx = Path(tmp) / "m.onnx"
        with torch.no_grad():
            export_onnx(model, tuple(torch.from_numpy(x) for x in args), names, ["out"], onnx)
        files = {}
        for c, extra in CONVERT.items():
            files[c] = Path(tmp) / f"{c}.mnn"
            convert_mnn(onnx, files[c], extra)
        variants = [(c, "high", 1) for c in CONVERT] + [("default", r, 1) for r in RUNTIME if r != "high"]
        variants += [("default", "high", 2)]
        for c, r, n in variants:
            rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "numThread": n, **RUNTIME[r]},))
            mod = MNN.nn.load_module_from_file(str(files[c]), names, ["out"], runtime_manager=rt, shape_mutable=False)
            holders = [MNN.expr.placeholder(list(x.shape), MNN.expr.NCHW, MNN.expr.dtype.float) for x in args]

            def run(mod=mod, holders=holders, rt=rt) -> np.ndarray:
                for h, x in zip(holders, args):
                    h.write(x)
                return mod.forward(holders)[0].read()

            key = f"{c}/{r}/{n}t"
            y = np.array(run()).reshape(ref.shape)
            err[key] = round(float(10 * np.log10((ref ** 2).mean() / max(((y - ref) ** 2).mean(), 1e-30))), 1)
            calls[key] = run
        times = interleaved(calls, a.reps, 10, gap_s=0.03)
    out = {"reps": a.reps, "loadavg": os.getloadavg(), "snr_db_vs_reference": err,
           "median_ms": {k: round(float(np.median(v)), 3) for k, v in times.items()}}
    emit(out, a.json)


if __name__ == "__main__":
    main()
