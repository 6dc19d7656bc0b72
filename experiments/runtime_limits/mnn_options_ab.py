"""MNN converter and runtime options on the shipped graphs, interleaved in one process (commit c14ec9f).

    python experiments/runtime_limits/mnn_options_ab.py bundles/reference 300 > results/runtime_limits/mnn_options_ab.json

Each option set re-converts the bundle's prefix.onnx and flow_step.onnx; every variant then runs the same
inputs, in turn, on one thread. `memory: low` is what turns 8-bit weights into dynamic int8 compute.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from omni_vla.runtime.bundle import load_bundle
from omni_vla.runtime.mnn import import_mnn
from omni_vla_policies.export import convert_mnn

OPTIONS = {
    "shipped": [],
    "transformerFuse": ["--transformerFuse"],
    "optimizePrefer2": ["--optimizePrefer", "2"],
    "weightQuant8": ["--weightQuantBits", "8"],
}
RUNTIME = {"memory_normal": "normal", "memory_low": "low"}


def main(bundle: Path, reps: int) -> dict:
    MNN = import_mnn()
    manifest, _ = load_bundle(bundle, "mnn")
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="mnn_options."))
    res: dict = {"threads": 1, "reps": reps, "bundle": str(bundle), "stages": {}}
    for stage in ("prefix", "flow_step"):
        spec = manifest.stages[stage]
        names = [t.name for t in spec.inputs]
        ins = [rng.random(t.shape).astype(np.float32) for t in spec.inputs]
        if stage == "flow_step":
            ins[names.index("step")][:] = np.eye(spec.inputs[names.index("step")].shape[1], dtype=np.float32)[3]
        runs = {}
        for opt, extra in OPTIONS.items():
            path = work / f"{stage}.{opt}.mnn"
            convert_mnn(bundle / f"{stage}.onnx", path, extra)
            for rk, mem in RUNTIME.items():
                rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "memory": mem, "numThread": 1},))
                mod = MNN.nn.load_module_from_file(str(path), names, [t.name for t in spec.outputs], runtime_manager=rt,
                                                   shape_mutable=False)
                v = [MNN.expr.placeholder(list(t.shape), MNN.expr.NCHW, MNN.expr.dtype.float) for t in spec.inputs]
                for var, x in zip(v, ins):
                    var.write(x)
                runs[f"{opt}/{rk}"] = (lambda mod=mod, v=v: [o.read().copy() for o in mod.forward(v)], path.stat().st_size)
        ref = runs["shipped/memory_normal"][0]()
        times = {k: [] for k in runs}
        for i in range(reps):
            for k in (list(runs) if i % 2 else list(runs)[::-1]):
                t0 = time.perf_counter()
                runs[k][0]()
                times[k].append((time.perf_counter() - t0) * 1e3)
        base = float(np.median(times["shipped/memory_normal"]))
        out = {}
        for k, (run, size) in runs.items():
            got = run()
            err = max(float(np.abs(a - b).max()) for a, b in zip(got, ref))
            snr = min(10 * np.log10((a ** 2).sum() / max(((a - b) ** 2).sum(), 1e-30)) for a, b in zip(ref, got))
            med = float(np.median(times[k]))
            out[k] = {"median_ms": round(med, 4), "p99_ms": round(float(np.percentile(times[k], 99)), 4),
                      "speedup_vs_shipped": round(base / med, 3), "max_abs_vs_shipped": err,
                      "snr_db_vs_shipped": round(float(snr), 1) if err else None, "file_bytes": size}
        res["stages"][stage] = out
    return res


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2])), indent=1))
